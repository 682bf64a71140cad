"""The flexibility settings of the paper's Table 1, as data, and their cached measurements.

The paper (Table 1, Llama-3.1-8B, average over seven tasks) injects LTV, Vanilla TV and FV at other sites
than the baseline "last position of the middle layer", to show that only the learned vector adapts. Here
each setting is a :class:`Setting`: injection layers, prompt positions and demonstrations in the prompt.

**Where vectors go.**

- *Positions* follow :mod:`ltvlib.inject`: a non-negative position counts from the prompt's first real
  token (``0`` = the first token, the BOS if the tokenizer adds one; SmolLM2 adds none), a negative one back
  from the last (``-1`` = the last token). The paper's ``P={4}`` is read as position ``4`` from the start;
  in the zero-shot prompt ``Q: {x}\\nA:`` of a one-token query that is the ``A`` token (on a model that adds
  BOS it is the last query token or the newline). A non-final position caches each prompt up to that
  position and recomputes the rest (:class:`~ltvlib.runner.PositionTail`); only a position inside a shared
  demonstration block forces full forwards.
- *LTV*: one independent vector per (layer, position) pair, *added* at the input of each block
  (:func:`ltvlib.ltv.train_ltv`), all trained jointly with the model frozen; in the ICL setting it is
  trained and evaluated on ``shots``-shot prompts.
- *Vanilla TV* (:mod:`ltvlib.baselines.vanilla_tv`): its extraction records the ICL prompts' last-token
  state leaving **every** block, so at layer ``l`` we use the layer's own state (``tv.vector(l)``), at the
  *output* of block ``l``: **replaced** (Hendel et al.'s form, ``"vanilla_tv"``) or the ICL-minus-zero-shot
  difference **added** (``"vanilla_tv_difference"``). Several positions get the *same* layer's vector
  (the extraction has one state per layer, the last token's).
- *FV* (:mod:`ltvlib.baselines.function_vector`): one vector per task; the *same* vector is *added* at the
  output of every block and every position of the setting (so ``n`` sites add it ``n`` times).
- *ICL setting*: the setting's sites, on ``shots``-shot prompts whose demonstrations come from the
  training split (the profile's fixed demonstration blocks); the extracted vectors are the zero-shot ones.

Each method keeps its own paper's site (LTV: block input; extracted vectors: block output), as in chapter 1.
Results are cached by :func:`setting_result` (key: model, task, setting, profile sizes, extraction configs,
seed, and the source of this module and of the extraction modules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from .baselines.function_vector import FunctionVector
from .baselines.vanilla_tv import VanillaTaskVector
from .cache import cached_json, dependency_hash, task_key
from .evaluate import EvalSet, evaluate
from .experiments import ltv_accuracy, profile_ltv, profile_splits
from .experiments_extracted import extracted_sizes, profile_function_vector, profile_vanilla_tv
from .inject import Mode, Site, VectorEdit
from .profiles import Profile, sweep_layers
from .runner import tail_needed
from .sites import check_layer
from .tasks import PAPER_TASKS, get_task

ExtractedMethod = Literal["vanilla_tv", "vanilla_tv_difference", "function_vector"]
EXTRACTED_METHODS: tuple[str, ...] = ("vanilla_tv", "vanilla_tv_difference", "function_vector")


@dataclass(frozen=True)
class Setting:
    """Where the vectors go in one flexibility setting.

    Attributes:
        name: short key (``"baseline"``, ``"position4"``, ``"last5"``, ``"every4"``, ``"every2"``,
            ``"layers_x_positions"``, ``"icl8"``, ``"late23"`` ...).
        label: the column title, e.g. ``"P={4}, L={15}"``.
        layers: injection layers (one vector per layer and position for the LTV).
        positions: prompt positions (non-negative from the first real token, negative from the last).
        shots: demonstrations in the evaluation (and LTV training) prompts; 0 = zero-shot.
        paper_column: the Table 1 column it reproduces (None for settings the paper has no column for).
    """

    name: str
    label: str
    layers: tuple[int, ...]
    positions: tuple[int, ...]
    shots: int = 0
    paper_column: str | None = None

    @property
    def n_sites(self) -> int:
        """Number of (layer, position) pairs: vectors in the LTV, injections of an extracted vector."""
        return len(self.layers) * len(self.positions)


PAPER_COLUMNS: tuple[str, ...] = (
    "P={-1}, L={16}", "P={4}", "P={-5..-1}", "L={0,4,...}", "multi-layer+multi-position", "+ 8-shot ICL prompt",
)
"""Column titles of the paper's Table 1 (Llama-3.1-8B has 32 layers, so its middle layer is 16)."""

PAPER_TABLE1: dict[str, dict[str, float]] = {
    "vanilla_tv": dict(zip(PAPER_COLUMNS, (37.80, 2.16, 17.97, 19.18, 18.15, 56.12))),
    "function_vector": dict(zip(PAPER_COLUMNS, (37.30, 2.68, 31.88, 6.05, 0.38, 74.78))),
    "ltv": dict(zip(PAPER_COLUMNS, (83.49, 78.39, 86.43, 82.44, 51.39, 84.61))),
}
"""Table 1 of the paper: dataset-average accuracy (%) per method and column (as reported; see
``shared/paper/notes.md``)."""


def every_nth_layer(n_layers: int, step: int) -> tuple[int, ...]:
    """``(0, step, 2 * step, ...)`` below ``n_layers``: the paper's ``L={0,4,...}`` for ``step=4``."""
    if step < 1:
        raise ValueError(f"layer step must be at least 1, got {step}")
    return tuple(range(0, n_layers, step))


def late_layers(n_layers: int, k: int | None = 3) -> tuple[int, ...]:
    """``k`` layers evenly spread over the last quarter of the network, from ``(3 * n_layers) // 4`` to the
    last layer (chapter 1 calls the same range "late"); fewer if the quarter has fewer layers; all of them
    for ``k=None``. ``k=1`` is the last layer."""
    first = (3 * n_layers) // 4
    if k is None:
        return tuple(range(first, n_layers))
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    span = n_layers - 1 - first
    if k == 1 or span == 0:
        return (n_layers - 1,)
    return tuple(sorted({round(first + i * span / (k - 1)) for i in range(k)}))


def table1_settings(
    n_layers: int, *, position: int = 4, n_last: int = 5, layer_steps: Sequence[int] = (4, 2), icl_shots: int = 8,
) -> list[Setting]:
    """The Table 1 settings for a model with ``n_layers`` blocks, the baseline first.

    Args:
        n_layers: decoder blocks of the model; the middle layer is ``n_layers // 2``.
        position: the single non-final position (the paper's ``P={4}``, counted from the first token).
        n_last: the multi-position setting's last positions ``-n_last .. -1``.
        layer_steps: multi-layer settings, one per step: layers ``0, step, 2 * step, ...`` at the last
            position. The first step is the paper's column; the paper's table says every 4th layer while its
            text says every 2nd, so by default both are measured.
        icl_shots: demonstrations of the ICL setting (baseline sites on k-shot prompts).

    The "multi-layer + multi-position" setting crosses the first multi-layer set with the last ``n_last``
    positions (one LTV vector per pair).
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be at least 1, got {n_layers}")
    if position < 0:
        raise ValueError(f"position must count from the first token (>= 0), got {position}")
    if n_last < 1 or icl_shots < 1 or not layer_steps:
        raise ValueError(f"need n_last >= 1, icl_shots >= 1 and a layer step; got {n_last}, {icl_shots}, {layer_steps}")
    mid = n_layers // 2
    last = tuple(range(-n_last, 0))
    multi = [every_nth_layer(n_layers, s) for s in layer_steps]
    settings = [
        Setting("baseline", f"P={{-1}}, L={{{mid}}}", (mid,), (-1,), 0, PAPER_COLUMNS[0]),
        Setting(f"position{position}", f"P={{{position}}}, L={{{mid}}}", (mid,), (position,), 0, PAPER_COLUMNS[1]),
        Setting(f"last{n_last}", f"P={{-{n_last}..-1}}, L={{{mid}}}", (mid,), last, 0, PAPER_COLUMNS[2]),
    ]
    for i, (step, layers) in enumerate(zip(layer_steps, multi)):
        settings.append(Setting(f"every{step}", f"P={{-1}}, L={{0,{step},...,{layers[-1]}}}", layers, (-1,), 0,
                                PAPER_COLUMNS[3] if i == 0 else None))
    settings.append(Setting(
        "layers_x_positions", f"P={{-{n_last}..-1}}, L={{0,{layer_steps[0]},...,{multi[0][-1]}}}", multi[0], last, 0,
        PAPER_COLUMNS[4],
    ))
    settings.append(Setting(f"icl{icl_shots}", f"P={{-1}}, L={{{mid}}}, {icl_shots}-shot prompt", (mid,), (-1,),
                            icl_shots, PAPER_COLUMNS[5]))
    return settings


def late_settings(n_layers: int, k: int | None = 3) -> list[Setting]:
    """Single-layer, last-position settings at :func:`late_layers` (the paper's "no critical depth")."""
    return [Setting(f"late{l}", f"P={{-1}}, L={{{l}}}", (l,), (-1,)) for l in late_layers(n_layers, k)]


def check_setting(lm: Any, task: str, setting: Setting, profile: Profile) -> Setting:
    """``setting`` if every site exists in ``lm`` and in every prompt of ``task``; else ``ValueError``.

    Negative layers are resolved to their index. Positions must lie inside the shortest zero-shot prompt
    (non-negative ones from its first token, negative ones from its last).
    """
    from .prompts import encode_prompts

    layers = tuple(check_layer(l, lm.n_layers) for l in setting.layers)
    if len(set(layers)) != len(layers) or len(set(setting.positions)) != len(setting.positions):
        raise ValueError(f"setting {setting.name!r} repeats a layer or position: {setting.layers}, {setting.positions}")
    splits = profile_splits(task, profile)
    rows = encode_prompts(lm.tokenizer, get_task(task), [*splits.train, *splits.validation, *splits.test]).rows
    shortest = min(len(r) for r in rows)
    bad = [p for p in setting.positions if not -shortest <= p < shortest]
    if bad:
        raise ValueError(
            f"setting {setting.name!r}: positions {bad} fall outside the shortest {task!r} prompt of {shortest} "
            f"tokens; allowed: {-shortest} .. {shortest - 1}"
        )
    return replace(setting, layers=layers)


def extracted_edits(
    method: ExtractedMethod, vector: VanillaTaskVector | FunctionVector, setting: Setting
) -> tuple[list[VectorEdit], Site, Mode]:
    """An extracted vector at every site of ``setting``: ``(edits, site, mode)`` for :func:`evaluate`.

    - ``"vanilla_tv"``: at layer ``l``, the ICL prompts' mean last-token state leaving block ``l``
      (``(d_model,)``) **replaces** the state at each of the setting's positions (site ``block_output``);
    - ``"vanilla_tv_difference"``: the ICL-minus-zero-shot state of layer ``l`` is **added** there;
    - ``"function_vector"``: the task's single FV is **added** at the output of every layer and position.
    """
    if method not in EXTRACTED_METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(EXTRACTED_METHODS)}")
    if method == "function_vector":
        if not isinstance(vector, FunctionVector):
            raise TypeError(f"method 'function_vector' needs a FunctionVector, got {type(vector).__name__}")
        return [VectorEdit(l, p, vector.vector) for l in setting.layers for p in setting.positions], \
            "block_output", "add"
    if not isinstance(vector, VanillaTaskVector):
        raise TypeError(f"method {method!r} needs a VanillaTaskVector, got {type(vector).__name__}")
    form = "replace" if method == "vanilla_tv" else "difference"
    edits = [VectorEdit(l, p, vector.vector(l, form)) for l in setting.layers for p in setting.positions]
    return edits, "block_output", vector.mode(form)


def profile_vanilla_tv_task_template(lm: Any, task: str, profile: Profile, *, seed: int = 0) -> VanillaTaskVector:
    """The Vanilla TV extracted from ICL prompts in the task's own ``Q:/A:`` template (the prompts the LTV is
    scored on), the same cache entry chapter 1's layer curves use."""
    config = replace(extracted_sizes(profile).vanilla_tv, template="task", form="replace")
    candidates = sorted(set(sweep_layers(lm.n_layers, profile)) | {lm.middle_layer})
    return profile_vanilla_tv(lm, task, profile, config=config, seed=seed, select_layers=candidates)


@dataclass(frozen=True)
class FlexSizes:
    """What the flexibility chapter covers in one profile.

    Attributes:
        tasks: the tasks of every setting.
        icl_shots: demonstrations of the ICL setting (the paper's 8; fewer in ``smoke``, where only the code
            path matters).
        n_late: late layers of the "no critical depth" comparison (None = every layer of the last quarter).
    """

    tasks: tuple[str, ...]
    icl_shots: int = 8
    n_late: int | None = 3


FLEX_SIZES: dict[str, FlexSizes] = {
    "smoke": FlexSizes(tasks=("antonym",), icl_shots=2, n_late=1),
    "cpu": FlexSizes(tasks=("antonym",)),
    "paper": FlexSizes(tasks=PAPER_TASKS, n_late=None),
}
"""Per profile. A non-final position forces full forwards in training and validation (no cached prompt
prefix, no skipped early blocks), and the multi-layer settings run every block. Measured on two shared CPU
cores (about 2.5 times slower than alone): training the Antonym LTVs took 283 s (baseline), 1084 s (P={4}),
238 s (last five positions) and 618 s (every 4th layer) of wall time. So ``cpu`` keeps one short-prompt task
(Antonym, 6-8 tokens per zero-shot prompt, whose baseline and layer-29 LTVs and extracted vectors chapter 1
has already cached), ``paper`` all seven."""


def flex_sizes(profile: Profile) -> FlexSizes:
    """The :data:`FLEX_SIZES` entry of ``profile`` (the profile's own tasks for a profile without one)."""
    return FLEX_SIZES.get(profile.name, FlexSizes(tasks=profile.tasks))


def _summary(r: Any) -> dict[str, Any]:
    return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n}


def setting_result(
    lm: Any, task: str, profile: Profile, setting: Setting, *, seed: int = 0, extracted: bool = True,
    progress: bool = False,
) -> dict[str, Any]:
    """Test accuracy of the LTV trained for ``setting`` and of the extracted vectors injected there (cached).

    The LTV comes from :func:`ltvlib.experiments.profile_ltv` (shared disk cache; trained on
    ``setting.shots``-shot prompts) and is scored with :func:`ltvlib.experiments.ltv_accuracy`. The
    extracted vectors (:func:`profile_vanilla_tv_task_template`, :func:`ltvlib.experiments_extracted.
    profile_function_vector`) go where :func:`extracted_edits` says, on the same test prompts.

    Returns:
        ``{"setting": asdict(setting), "ltv": {accuracy, label_accuracy, n, steps, train_seconds,
        val_accuracy}, "none": {...} (the prompts without any vector), "ltv_zero_shot_trained": {...} (only
        for k-shot settings: the zero-shot-trained LTV of the same sites on the k-shot prompts), "vanilla_tv": {...},
        "vanilla_tv_difference": {...}, "function_vector": {...}, "seconds": {...}}``; the extracted entries
        only with ``extracted=True``.
    """
    import time

    setting = check_setting(lm, task, setting, profile)
    sizes = extracted_sizes(profile)
    splits = profile_splits(task, profile, icl=setting.shots > 0)
    key = {
        "what": "flexibility", "model": lm.name, "task": task_key(task), "setting": asdict(setting), "seed": seed,
        "n_train": profile.n_train, "n_val": profile.n_val, "n_test": len(splits.test),
        "recipe": asdict(profile.recipe), "demo_sets": profile.icl_demo_sets if setting.shots else None,
        "extracted": extracted, "vanilla_tv": asdict(sizes.vanilla_tv), "function_vector": asdict(sizes.function_vector),
        "source": dependency_hash(__name__),
    }

    def compute() -> dict[str, Any]:
        t0 = time.perf_counter()
        ltv = profile_ltv(lm, task, profile, layers=list(setting.layers), positions=setting.positions,
                          shots=setting.shots, seed=seed, progress=progress)
        t1 = time.perf_counter()
        r = ltv_accuracy(lm, ltv, profile, shots=setting.shots, seed=seed)
        t2 = time.perf_counter()
        out: dict[str, Any] = {
            "setting": asdict(setting),
            "ltv": {k: r[k] for k in ("accuracy", "label_accuracy", "n", "steps", "train_seconds", "val_accuracy")},
        }
        es = EvalSet(lm, get_task(task), splits.test, shots=setting.shots, demo_pool=splits.train, seed=seed,
                     demo_sets=profile.icl_demo_sets if setting.shots else None,
                     tail=tail_needed(setting.positions))
        out["none"] = _summary(evaluate(es))
        if setting.shots:
            # the zero-shot-trained LTV of the same sites, injected on the k-shot prompts as it is
            ltv0 = profile_ltv(lm, task, profile, layers=list(setting.layers), positions=setting.positions,
                               seed=seed, progress=progress)
            r0 = ltv_accuracy(lm, ltv0, profile, shots=setting.shots, seed=seed)
            out["ltv_zero_shot_trained"] = {k: r0[k] for k in ("accuracy", "label_accuracy", "n")}
        if extracted:
            tv = profile_vanilla_tv_task_template(lm, task, profile, seed=seed)
            fv = profile_function_vector(lm, task, profile, seed=seed)
            t3 = time.perf_counter()
            for method in EXTRACTED_METHODS:
                edits, site, mode = extracted_edits(method, fv if method == "function_vector" else tv, setting)
                out[method] = _summary(evaluate(es, edits, site=site, mode=mode))
            out["seconds"] = {"ltv_train": t1 - t0, "ltv_eval": t2 - t1, "extract": t3 - t2,
                              "extracted_eval": time.perf_counter() - t3}
        else:
            out["seconds"] = {"ltv_train": t1 - t0, "ltv_eval": t2 - t1, "none_eval": time.perf_counter() - t2}
        return out

    return cached_json("flexibility", key, compute)
