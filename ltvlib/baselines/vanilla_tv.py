"""Vanilla task vectors (Hendel, Geva and Globerson, *In-Context Learning Creates Task Vectors*, 2023).

The original recipe (defaults in :class:`VanillaTVConfig`): build ICL prompts of the task, each with
``shots`` demonstrations and a *dummy* query, in the format ``example:{x}->{y}`` (demonstrations separated by
a newline); take the hidden state of the last token at the **output** of block ``l`` (``hidden_states[l +
1]`` in Hugging Face numbering), average it over ``n_dummy`` dummy queries; then run the zero-shot prompt of a
new query (``example:{x}->``) and **replace** its last-token state at the output of block ``l`` with that
vector. The layer is chosen on validation data.

Two forms are offered (``VanillaTVConfig.form``):

- ``"replace"``: Hendel et al.'s, ``h_l(last) <- mean ICL state``;
- ``"difference"``: how the LTV paper writes it, ``h_l(last) <- h_l(last) + (mean ICL state - mean
  zero-shot state)``, the zero-shot states taken from the dummy queries' own zero-shot prompts.

One extraction records every layer (``(n_layers, d_model)`` ICL and zero-shot means), so a layer sweep
costs only one single-token pass per layer over the evaluation prompts' cached prefixes.

Difference from the original, kept on purpose: Hendel et al. recompute the vector for every test query from
that query's own demonstrations. Like the LTV paper, which treats the task vector as one vector per task
("mean over queries"), we average ``n_contexts`` demonstration sets (each with ``n_dummy`` dummy queries)
into a single vector per task: a lower-variance estimate of the same quantity that every test query shares.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor

from ..cache import atomic_write_bytes, code_version
from ..evaluate import EvalSet, evaluate
from ..inject import Mode, Site, VectorEdit, record_residual
from ..kv_cache import forward_tokens
from ..prompts import EncodedPrompts, encode_prompts, pad_left
from ..sites import check_layer
from ..task_vector import apply_edits, placement_metadata
from ..tasks import TASKS, Example, RowSpec, Task, get_task

if TYPE_CHECKING:
    from ..models import LoadedModel

Template = Literal["hendel", "task"]
Form = Literal["replace", "difference"]

HENDEL_QUERY = "example:{x}->"
HENDEL_ANSWER = "{y}"
HENDEL_SEPARATOR = "\n"


@dataclass(frozen=True)
class VanillaTVConfig:
    """Vanilla task-vector extraction; defaults are Hendel et al. (2023) unless marked *ours*.

    Attributes:
        shots: demonstrations per ICL prompt (5 in the paper).
        n_dummy: dummy queries per demonstration set, whose states are averaged (2 in the paper's code).
        n_contexts: demonstration sets averaged into the task's single vector (*ours*; see module docstring).
        template: ``"hendel"`` (``example:{x}->{y}``, newline-separated, for the ICL prompts *and* the
            zero-shot prompts it is patched into) or ``"task"`` (the task's own template, the paper's
            ``Q: {x}\\nA: {y}``, so that the vector is compared with LTVs on the very same prompts).
        form: ``"replace"`` (the paper's) or ``"difference"`` (the LTV paper's written form, added).
        n_dev: validation queries used to choose the layer.
        seed: seeds demonstrations and dummy queries.
    """

    shots: int = 5
    n_dummy: int = 2
    n_contexts: int = 25
    template: Template = "hendel"
    form: Form = "replace"
    n_dev: int = 50
    seed: int = 0


def vanilla_task(task: Task | str, template: Template) -> Task:
    """The task with the prompt format of ``template`` (``"task"`` leaves it unchanged)."""
    task = get_task(task)
    if template == "task":
        return task
    if template != "hendel":
        raise ValueError(f"unknown template {template!r}; allowed: 'hendel', 'task'")
    return replace(task, query_template=HENDEL_QUERY, answer_template=HENDEL_ANSWER, separator=HENDEL_SEPARATOR)


@dataclass
class VanillaTaskVector:
    """Mean last-token states of ICL and zero-shot prompts at every block output.

    Attributes:
        icl_states: ``(n_layers, d_model)``; row ``l`` is the mean last-token state leaving block ``l``
            over the ICL prompts (``n_contexts * n_dummy`` of them).
        zero_shot_states: ``(n_layers, d_model)``, the same for the dummy queries' zero-shot prompts.
        layer: the layer chosen on validation data (None until :func:`select_layer` ran).
        dev_accuracy: validation accuracy per layer from the layer choice (``{layer: accuracy}``).
        model, task, config: provenance; seconds: extraction wall time.
        source_task: the :class:`~ltvlib.tasks.Task` it was extracted for, so that a task that is not in the
            registry (:meth:`~ltvlib.tasks.Task.from_jsonl`, :meth:`~ltvlib.tasks.Task.from_json`) is evaluated
            on its own format (:func:`zero_shot_evalset`); saved with the vector when it is not a registered
            task. None: look ``task`` up in the registry.
    """

    icl_states: Tensor
    zero_shot_states: Tensor
    model: str
    task: str
    config: VanillaTVConfig
    layer: int | None = None
    dev_accuracy: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0
    source_task: Task | None = field(default=None, repr=False, compare=False)

    site: ClassVar[Site] = "block_output"

    def mode(self, form: Form | None = None) -> Mode:
        """``"replace"`` for the replace form, ``"add"`` for the difference form."""
        form = form or self.config.form
        if form not in ("replace", "difference"):
            raise ValueError(f"unknown form {form!r}; allowed: 'replace', 'difference'")
        return "replace" if form == "replace" else "add"

    def vector(self, layer: int, form: Form | None = None) -> Tensor:
        """The ``(d_model,)`` vector for block output ``layer``: the ICL state, or ICL minus zero-shot."""
        layer = check_layer(layer, self.icl_states.shape[0])
        if self.mode(form) == "replace":
            return self.icl_states[layer]
        return self.icl_states[layer] - self.zero_shot_states[layer]

    def edits(self, layer: int | None = None, form: Form | None = None, *, scale: float = 1.0) -> list[VectorEdit]:
        """The injection at the last token: the output of block ``layer`` (default: the chosen layer), written
        (replace form: ``h <- scale * ICL state``) or added (difference form: ``h <- h + scale * (ICL -
        zero-shot)``). ``form`` defaults to the config's; ``vtv.edits(layer, form)`` or keywords.

        Raises:
            ValueError: no layer given and none chosen yet; an unknown form.
        """
        if layer is None:
            if self.layer is None:
                raise ValueError("no layer given and none chosen yet: pass layer= or run select_layer first")
            layer = self.layer
        return [VectorEdit(layer, -1, scale * self.vector(layer, form), site="block_output", mode=self.mode(form))]

    def apply(self, lm: LoadedModel, *, layer: int | None = None, scale: float = 1.0,
              form: Form | None = None) -> AbstractContextManager[None]:
        """A context manager putting :meth:`edits` into every prompt forward inside it
        (:func:`ltvlib.inject.apply`); its hooks are removed on exit."""
        return apply_edits(lm, self.edits(layer=layer, form=form, scale=scale))

    def metadata(self) -> dict[str, Any]:
        meta = {"model": self.model, "task": self.task, "config": asdict(self.config), "layer": self.layer,
                "dev_accuracy": {str(k): v for k, v in self.dev_accuracy.items()}, "seconds": self.seconds}
        if self.source_task is not None and self.source_task.name not in TASKS:
            meta["source_task"] = _task_spec(self.source_task)
        return meta

    def save(self, path: str | Path) -> Path:
        """Both state tables as safetensors with the rest as JSON metadata (atomically); the placement keys
        (site, mode, layers, positions) say where the chosen layer's vector goes (layers ``[]`` before
        :func:`select_layer`)."""
        from safetensors.torch import save

        tensors = {"icl_states": self.icl_states, "zero_shot_states": self.zero_shot_states}
        tensors = {k: v.detach().float().cpu().contiguous() for k, v in tensors.items()}
        placement = {"site": self.site, "mode": self.mode(), "layers": "[]", "positions": "[-1]"}
        if self.layer is not None:
            placement = placement_metadata(self.edits())
        meta = {"vanilla_tv": json.dumps(self.metadata()), "code_version": code_version(), **placement}
        return atomic_write_bytes(path, save(tensors, metadata=meta))

    @classmethod
    def load(cls, path: str | Path) -> VanillaTaskVector:
        """Read a file written by :meth:`save` (files without the placement keys read as before).

        Raises:
            ValueError: the file's ``site`` is not block output, or its ``mode`` not the config form's.
        """
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            stored = f.metadata()
            meta = json.loads(stored["vanilla_tv"])
            tensors = {k: f.get_tensor(k) for k in ("icl_states", "zero_shot_states")}
        meta["config"] = VanillaTVConfig(**meta["config"])
        meta["dev_accuracy"] = {int(k): v for k, v in meta["dev_accuracy"].items()}
        if meta.get("source_task") is not None:
            meta["source_task"] = _task_from_spec(meta["source_task"])
        tv = cls(**tensors, **meta)
        for key, want in (("site", cls.site), ("mode", tv.mode())):
            if stored.get(key, want) != want:
                raise ValueError(f"{path}: this vanilla task vector goes to {key} {want!r}, the file says "
                                 f"{stored[key]!r}")
        return tv


_TASK_SPEC_FIELDS = ("name", "kind", "query_template", "answer_template", "separator", "labels", "files",
                     "eval_split_note", "description", "eval_file", "split_by_row")


def _task_spec(task: Task) -> dict[str, Any]:
    """A JSON-able description of a task outside the registry (its row specs as dicts)."""
    spec = {k: getattr(task, k) for k in _TASK_SPEC_FIELDS}
    spec["row_specs"] = [asdict(r) for r in task.row_specs]
    return spec


def _task_from_spec(spec: dict[str, Any]) -> Task:
    spec = dict(spec)
    spec["row_specs"] = tuple(RowSpec(**r) for r in spec["row_specs"])
    spec["files"] = tuple(spec["files"])
    if spec.get("labels") is not None:
        spec["labels"] = tuple(spec["labels"])
    return Task(**spec)


@torch.no_grad()
def last_token_states(lm: LoadedModel, prompts: EncodedPrompts, *, max_tokens: int = 4096) -> Tensor:
    """Last-token states leaving every block, per prompt: ``(n_prompts, n_layers, d_model)``."""
    rows = prompts.full_rows()
    layers = list(range(lm.n_layers))
    out = torch.zeros(len(rows), lm.n_layers, lm.d_model)
    step = max(1, max_tokens // max(len(r) for r in rows))
    for start in range(0, len(rows), step):
        index = list(range(start, min(start + step, len(rows))))
        ids, mask = pad_left([rows[i] for i in index], lm.tokenizer.pad_token_id, lm.device)
        with record_residual(lm, layers, site="block_output") as cap:
            forward_tokens(lm, ids, mask)
        # left padding: the last column is every row's last real token
        out[index] = torch.stack([cap[l][:, -1].float().cpu() for l in layers], dim=1)
    return out


def icl_and_zero_shot_prompts(
    lm: LoadedModel, task: Task, pool: Sequence[Example], config: VanillaTVConfig
) -> tuple[EncodedPrompts, EncodedPrompts]:
    """The ``n_contexts * n_dummy`` ICL prompts and the dummy queries' zero-shot prompts."""
    need = config.shots + config.n_dummy
    if len(pool) < need:
        raise ValueError(f"task {task.name!r}: the pool has {len(pool)} examples, need at least {need}")
    rng = random.Random(f"vanilla-tv-{config.seed}")
    queries: list[Example] = []
    demos: list[list[Example]] = []
    for _ in range(config.n_contexts):
        chosen = rng.sample(list(pool), need)
        for dummy in chosen[config.shots :]:
            queries.append(dummy)
            demos.append(chosen[: config.shots])
    icl = encode_prompts(lm.tokenizer, task, queries, demos=demos)
    zero = encode_prompts(lm.tokenizer, task, queries)
    return icl, zero


def extract_vanilla_tv(
    lm: LoadedModel, task: Task | str, pool: Sequence[Example], config: VanillaTVConfig = VanillaTVConfig()
) -> VanillaTaskVector:
    """Extract the vanilla task vector of ``task`` at every layer from demonstrations drawn from ``pool``.

    The layer is not chosen here; see :func:`select_layer`.
    """
    base = get_task(task)
    t = vanilla_task(base, config.template)
    start = time.perf_counter()
    icl, zero = icl_and_zero_shot_prompts(lm, t, pool, config)
    icl_states = last_token_states(lm, icl).mean(0)
    zero_states = last_token_states(lm, zero).mean(0)
    return VanillaTaskVector(
        icl_states=icl_states, zero_shot_states=zero_states, model=lm.name, task=base.name, config=config,
        seconds=time.perf_counter() - start, source_task=base,
    )


def zero_shot_evalset(
    lm: LoadedModel, tv: VanillaTaskVector, examples: Sequence[Example], *, task: Task | None = None
) -> EvalSet:
    """Zero-shot prompts (in the vector's template) over ``examples``, prefixes cached for a layer sweep.

    The prompts' task is ``task`` if given, else the one the vector was extracted for
    (:attr:`VanillaTaskVector.source_task`, so a task read from a file works), else the registry's ``tv.task``.
    """
    base = task if task is not None else tv.source_task if tv.source_task is not None else tv.task
    return EvalSet(lm, vanilla_task(base, tv.config.template), examples, tail=1)


def layer_accuracies(
    evalset: EvalSet, tv: VanillaTaskVector, layers: Sequence[int], form: Form | None = None
) -> dict[int, Any]:
    """Evaluation result of the vector patched at each of ``layers`` (one single-token pass per layer)."""
    return {
        l: evaluate(evalset, tv.edits(l, form)) for l in layers
    }


def select_layer(
    lm: LoadedModel, tv: VanillaTaskVector, dev: Sequence[Example], *, layers: Sequence[int] | None = None,
    form: Form | None = None,
) -> VanillaTaskVector:
    """Choose the layer with the best accuracy on ``dev`` (first ``config.n_dev`` examples); sets
    ``tv.layer`` and ``tv.dev_accuracy`` and returns ``tv``. Ties go to the earliest layer."""
    layers = list(range(lm.n_layers)) if layers is None else [check_layer(l, lm.n_layers) for l in layers]
    es = zero_shot_evalset(lm, tv, list(dev)[: tv.config.n_dev])
    acc = {l: r.accuracy for l, r in layer_accuracies(es, tv, layers, form).items()}
    tv.dev_accuracy = acc
    tv.layer = max(layers, key=lambda l: (acc[l], -l))
    return tv
