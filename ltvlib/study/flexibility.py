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
  position and recomputes the rest (:class:`~ltvlib.forward.PositionTail`); only a position inside a shared
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
  training split (the run's fixed demonstration blocks); the extracted vectors are the zero-shot ones.

Each method keeps its own paper's site (LTV: block input; extracted vectors: block output), as in chapter 1.
Results are cached by :func:`setting_result` (key: model, task, setting, run sizes, extraction configs,
seed, and the source of this module and of the extraction modules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..baselines.function_vector import FunctionVector
from ..baselines.vanilla_tv import Form, VanillaTaskVector
from ..cache import cached_json, dependency_hash, task_key
from ..evaluate import EvalSet, evaluate
from ..forward import tail_needed
from ..inject import VectorEdit
from ..ltv import LearnedTaskVector
from ..sites import check_layer
from ..stats import DEFAULT_RESAMPLES, Estimate, proportion_estimate, seed_interval
from ..tasks import TaskSplits, get_task, load_splits
from .extracted import cached_function_vector, cached_vanilla_tv
from .ltvs import RunSizes, sweep_with_middle, task_contrast, task_splits, trained_ltv
from .sizes import FlexSizes  # noqa: F401 (re-exported: the class lives in the leaf ltvlib.study.sizes)

if TYPE_CHECKING:
    from ..models import LoadedModel

ExtractedMethod = Literal["vanilla_tv", "vanilla_tv_difference", "function_vector"]
EXTRACTED_METHODS: tuple[ExtractedMethod, ...] = ("vanilla_tv", "vanilla_tv_difference", "function_vector")


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


def check_setting(lm: LoadedModel, task: str, setting: Setting, run_sizes: RunSizes) -> Setting:
    """``setting`` if every site exists in ``lm`` and in every prompt of ``task``; else ``ValueError``.

    Negative layers are resolved to their index. Positions must lie inside the shortest zero-shot prompt
    (non-negative ones from its first token, negative ones from its last).
    """
    from ..prompts import encode_prompts

    layers = tuple(check_layer(l, lm.n_layers) for l in setting.layers)
    if len(set(layers)) != len(layers) or len(set(setting.positions)) != len(setting.positions):
        raise ValueError(f"setting {setting.name!r} repeats a layer or position: {setting.layers}, {setting.positions}")
    splits = task_splits(task, run_sizes)
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
) -> list[VectorEdit]:
    """An extracted vector at every (layer, position) of ``setting``, each edit at its site and mode (for
    :func:`evaluate`):

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
        return [VectorEdit(l, p, vector.vector, site="block_output", mode="add")
                for l in setting.layers for p in setting.positions]
    if not isinstance(vector, VanillaTaskVector):
        raise TypeError(f"method {method!r} needs a VanillaTaskVector, got {type(vector).__name__}")
    form: Form = "replace" if method == "vanilla_tv" else "difference"
    return [VectorEdit(l, p, vector.vector(l, form), site="block_output", mode=vector.mode(form))
            for l in setting.layers for p in setting.positions]


def vanilla_tv_task_template(lm: LoadedModel, task: str, run_sizes: RunSizes, *, seed: int = 0) -> VanillaTaskVector:
    """The Vanilla TV extracted from ICL prompts in the task's own ``Q:/A:`` template (the prompts the LTV is
    scored on), the same cache entry chapter 1's layer curves use."""
    config = replace(run_sizes.vanilla_tv, template="task", form="replace")
    candidates = sweep_with_middle(lm.n_layers, run_sizes)
    return cached_vanilla_tv(lm, task, run_sizes, config=config, seed=seed, select_layers=candidates)


def flex_splits(task: str, run_sizes: RunSizes, n_test: int | None = None) -> TaskSplits:
    """The task's splits at ``run_sizes``' training sizes with the first ``n_test`` test queries (None:
    ``run_sizes.n_test``), the same for zero-shot and k-shot prompts."""
    splits = load_splits(task, seed=0, n_train=run_sizes.n_train, n_val=run_sizes.n_val)
    n = run_sizes.n_test if n_test is None else n_test
    if n is not None:
        if n < 1:
            raise ValueError(f"n_test must be at least 1, got {n}")
        splits = TaskSplits(splits.task, splits.train, splits.validation, splits.test[:n], splits.seed)
    return splits


@dataclass(frozen=True)
class SettingResult:
    """One task in one setting: the LTVs and the other methods, each as per-query correctness on the same
    test queries.

    Attributes:
        setting: the (checked) setting.
        task: the task's name.
        ltvs: the setting's LTVs, one per training seed.
        correct: method -> ``(rows, n)`` bool array: ``"ltv"`` one row per LTV of ``ltvs``; ``"none"`` (the
            prompt alone) and the extracted methods one row; for a k-shot setting also
            ``"ltv_zero_shot_trained"``, the zero-shot-trained LTVs of ``zero_shot_ltvs`` on the k-shot prompts.
        zero_shot_ltvs: k-shot settings: the LTVs trained on zero-shot prompts for the same sites.
        seconds: ``{"ltv_train": ...}`` (the LTVs' recorded training wall time, summed), ``"eval"`` (all
            evaluations of this result when it was computed).
    """

    setting: Setting
    task: str
    ltvs: tuple[LearnedTaskVector, ...]
    correct: dict[str, np.ndarray]
    zero_shot_ltvs: tuple[LearnedTaskVector, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Test queries."""
        return int(self.correct["none"].shape[1])

    def accuracy(self, method: str) -> float:
        """Mean correctness of ``method`` over its rows and queries (untrained LTVs included: gate them with
        :class:`ltvlib.study.ltv_report.LTVLedger` before showing)."""
        return float(self.correct[method].mean())


def _fingerprint(ltv: LearnedTaskVector) -> dict[str, Any]:
    return {"meta": ltv.metadata(without=("curve", "seconds")), "sum": float(ltv.vectors.double().sum())}


def setting_result(
    lm: LoadedModel, task: str, run_sizes: RunSizes, setting: Setting, *, seeds: Sequence[int] = (0,),
    zero_shot_seeds: Sequence[int] | None = None, n_test: int | None = None, seed: int = 0, extracted: bool = True,
    progress: bool = False,
) -> SettingResult:
    """The LTVs trained for ``setting`` and the extracted vectors injected there, scored on the same queries.

    The LTVs come from :func:`ltvlib.study.ltvs.trained_ltv` (shared disk cache: the baseline's are chapter
    00's; trained on ``setting.shots``-shot prompts), one per training seed of ``seeds``. The extracted
    vectors (:func:`vanilla_tv_task_template`, :func:`ltvlib.study.extracted.
    cached_function_vector`, extraction seed ``seed``) go where :func:`extracted_edits` says. Every method
    is evaluated on one :class:`~ltvlib.evaluate.EvalSet` of the first ``n_test`` test queries
    (:func:`flex_splits`), cached up to each prompt's earliest injected position (:func:`ltvlib.forward.
    tail_needed`: a per-row tail for ``P={4}``); demonstrations of a k-shot setting are the run's fixed
    blocks drawn with ``seed``. For a k-shot setting the LTVs trained on zero-shot prompts for the same sites
    (seeds ``zero_shot_seeds``, default ``seeds``) are scored on the k-shot prompts too.

    The per-query correctness is cached (key: model, task, setting, sizes, extraction configs, each LTV's
    record and content, the source of this module and what it imports).
    """
    import time

    setting = check_setting(lm, task, setting, run_sizes)
    splits = flex_splits(task, run_sizes, n_test)
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds: give at least one training seed")

    def train(shots: int, s: int) -> LearnedTaskVector:
        return trained_ltv(lm, task, run_sizes, layers=list(setting.layers), positions=setting.positions, shots=shots,
                           seed=s, progress=progress)

    ltvs = tuple(train(setting.shots, s) for s in seeds)
    zs_seeds = tuple(int(s) for s in (seeds if zero_shot_seeds is None else zero_shot_seeds))
    ltvs0 = tuple(train(0, s) for s in zs_seeds) if setting.shots else ()
    key = {
        "what": "flexibility-correct", "model": lm.name, "task": task_key(task), "setting": asdict(setting),
        "seed": seed, "n_train": run_sizes.n_train, "n_val": run_sizes.n_val, "test": len(splits.test),
        "demo_sets": run_sizes.icl_demo_sets if setting.shots else None, "extracted": extracted,
        "vanilla_tv": asdict(run_sizes.vanilla_tv), "function_vector": asdict(run_sizes.function_vector),
        "ltvs": [_fingerprint(v) for v in ltvs], "ltvs0": [_fingerprint(v) for v in ltvs0],
        "source": dependency_hash(__name__),
    }

    def compute() -> dict[str, Any]:
        t0 = time.perf_counter()
        es = EvalSet(lm, get_task(task), splits.test, shots=setting.shots, demo_pool=splits.train, seed=seed,
                     demo_sets=run_sizes.icl_demo_sets if setting.shots else None,
                     tail=tail_needed(setting.positions))
        out: dict[str, Any] = {"none": [evaluate(es).correct], "ltv": [evaluate(es, v.edits()).correct for v in ltvs]}
        if ltvs0:
            out["ltv_zero_shot_trained"] = [evaluate(es, v.edits()).correct for v in ltvs0]
        if extracted:
            tv = vanilla_tv_task_template(lm, task, run_sizes, seed=seed)
            fv = cached_function_vector(lm, task, run_sizes, seed=seed)
            t1 = time.perf_counter()
            for method in EXTRACTED_METHODS:
                edits = extracted_edits(method, fv if method == "function_vector" else tv, setting)
                out[method] = [evaluate(es, edits).correct]
            t0 += time.perf_counter() - t1  # extraction (shared with chapter 1) is not evaluation
        out = {m: [[int(c) for c in row] for row in rows] for m, rows in out.items()}
        out["eval_seconds"] = time.perf_counter() - t0
        return out

    data = cached_json("flexibility", key, compute)
    correct = {m: np.asarray(rows, dtype=bool) for m, rows in data.items() if m != "eval_seconds"}
    return SettingResult(
        setting=setting, task=task, ltvs=ltvs, correct=correct, zero_shot_ltvs=ltvs0,
        seconds={"ltv_train": float(sum(v.training.seconds for v in ltvs)), "eval": float(data["eval_seconds"])},
    )


# ------------------------------------------------------------------------------------ means over tasks
#
# Table 1 reports each column as the mean over tasks of each task's accuracy. Its interval is the stratified
# bootstrap of :func:`ltvlib.study.ltvs.task_contrast`: every task's queries (and, with several training seeds,
# its seeds) are resampled within that task, the per-task means averaged with equal weights. A difference of two
# methods (or of a column and a multiple of the baseline) draws the same queries for both within each task.


def task_mean_contrast(
    a: Mapping[str, Any], b: Mapping[str, Any] | None = None, *, weight: float = 1.0,
    n_resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95, seed: int = 0,
    rows: tuple[str, str] = ("auto", "auto"),
) -> Estimate:
    """The mean over tasks of ``a``'s accuracy, minus ``weight`` times ``b``'s, with a task-stratified paired
    bootstrap interval (:func:`ltvlib.study.ltvs.task_contrast`).

    Args:
        a, b: task -> per-query correctness, shape (queries,) or (seeds, queries); ``b`` (if given) must have
            the same tasks and, per task, the same queries as ``a``. Without ``b``: the mean of ``a`` alone.
        weight: ``b``'s factor: 1 for a difference, 0.9 for "``a`` keeps 90 % of ``b``".
        n_resamples, confidence, seed: the bootstrap's draws, level and own random seed.
        rows: what the rows of ``a`` and ``b`` are (:data:`ltvlib.stats.ROW_KINDS`): ``("seeds", "seeds")``
            for a one-seed LTV against the baseline's seeds, so the difference counts the one seed.

    Returns:
        An :class:`~ltvlib.stats.Estimate` (``difference=True`` with ``b``); ``n`` is the number of queries
        summed over tasks, ``seeds`` and ``draws`` as :func:`ltvlib.stats.rows_summary` counts them.
    """
    if not a:
        raise ValueError("task_mean_contrast: no tasks")
    if b is not None and set(a) != set(b):
        raise ValueError(f"task_mean_contrast: a and b cover different tasks: {sorted(a)} vs {sorted(b)}")
    terms = {t: [(1.0, a[t], rows[0])] + ([(-float(weight), b[t], rows[1])] if b is not None else [])
             for t in sorted(a)}
    return task_contrast(terms, difference=b is not None, n_resamples=n_resamples, confidence=confidence,
                         seed=seed)


def cell_estimate(correct: Any, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Estimate:
    """One task's accuracy in one column: the Wilson interval for one seed (one row), the seed-query
    bootstrap (:func:`ltvlib.stats.seed_interval`) for several."""
    m = np.asarray(correct)
    if m.ndim == 2 and m.shape[0] > 1:
        return seed_interval(m, n_resamples=n_resamples, seed=seed)
    row = m.reshape(-1)
    return proportion_estimate(int(row.sum()), int(row.size))


def keep_share(column: str) -> float:
    """The share of its baseline accuracy that the LTV must keep in a Table 1 column for the paper's
    outcome there: 0.9 where the paper's LTV keeps at least 90 % of its baseline (every column but one),
    0.5 where it keeps less (the multi-layer + multi-position column: 51.39 / 83.49 = 62 %)."""
    share = PAPER_TABLE1["ltv"][column] / PAPER_TABLE1["ltv"][PAPER_COLUMNS[0]]
    return 0.9 if share >= 0.9 else 0.5
