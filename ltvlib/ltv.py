"""Learned task vectors: train one vector per (layer, position) by gradient descent, model frozen.

Where the vectors go: each is *added* to the residual stream entering decoder block ``layer``
(``block_input``) at prompt position ``position`` (``-1`` = last token), the paper's site. Loss: the
negative log-likelihood of the gold answer after the prompt, averaged over the answer's tokens (multi-token
labels) and then over the batch.

Two recipes (:data:`PAPER_RECIPE`, :data:`FAST_RECIPE`):

- ``paper``: the authors' released recipe, batch 1, full forward per step (see the config's docstring).
- ``fast`` (default): batches of 16 and the prompt prefix before the earliest injected position is cached
  (:mod:`ltvlib.forward`; per row for a position counted from the start) so each step only runs the tokens
  from there on; the gradient is the full forward's (tested). Those caches are built once per (model, task
  split, prompt format) and shared by every layer, seed and recipe in the process (:mod:`ltvlib.prompt_store`).
  Its initial range and learning rate are *relative to the stream* (:mod:`ltvlib.stream_scale`), so the same
  recipe works at every layer and on every model: the initial range is a multiple of the residual stream's RMS
  at each vector's site, the learning rate a multiple of the RMS of the stream entering the last block
  (``TrainConfig.lr_final_stream_weight``).

A result records whether it learned (``learned``, :func:`learned_rule`): the lower end of the 95 % Wilson
interval of its validation accuracy must lie above the better of the validation prompts' accuracy without a
vector (within the labels for a classification task) and the majority answer's rate, and the thresholds it was
judged by are kept with it; a run that did not learn is retried at a smaller step
(``TrainConfig.retries_without_progress``). Classification tasks stop early on
balanced accuracy (``TrainConfig.early_stopping``).

One loop trains every LTV: :func:`train_ltv` steps one run, or several runs (seeds, tasks at the same layers) as
rows of one batch, each run keeping its own draw, sampler, optimiser, early stopping and retries.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

import torch
from torch import Tensor

from . import prompt_store
from .cache import atomic_write_bytes, cache_path, code_version, read_cached, task_key
from .evaluate import EvalResult, EvalSet, evaluate
from .forward import PromptRunner, Tail, run_rows, tail_needed
from .inject import VectorEdit, resolve_positions
from .ltv_record import TrainingRecord
from .memo import memo, model_serial
from .prompts import answer_ids, check_task_context, encode_prompts, sample_demos, tokenizer_limit
from .sites import check_layer
from .stats import wilson_interval
from .stream_scale import STATISTICS, site_stream_rms, site_stream_scale
from .tasks import Example, Task, TaskSplits, get_task, load_splits

if TYPE_CHECKING:
    from .models import LoadedModel

EARLY_STOPPING = ("auto", "accuracy", "balanced_accuracy")


@dataclass(frozen=True)
class TrainConfig:
    """How an LTV is optimised.

    Attributes:
        recipe: ``"paper"`` or ``"fast"`` (a label; the fields below define the recipe).
        lr: peak AdamW learning rate, decayed linearly to 0 over all steps (with ``relative_to_stream``: a
            multiple of the stream RMS at each vector's site).
        weight_decay: AdamW weight decay.
        batch_size: queries per step.
        epochs: maximum number of epochs.
        samples_per_epoch: queries drawn per epoch: shuffled passes over the training split, repeated if
            the split is smaller.
        init_range: vectors start from U(-init_range, init_range) (with ``relative_to_stream``: times the
            stream RMS at each vector's site).
        patience: stop after this many epochs without a better validation score; the best vector is kept.
        patience_after_gain: start counting those epochs only once validation accuracy has beaten the starting
            vector's (with short epochs, a task whose accuracy stays at 0 for the first few steps would
            otherwise stop before it starts learning).
        prefix_cache: reuse each prompt's prefix before its earliest injected position (fast path), in training
            and in validation; without it every forward runs the whole prompt, as the released code does.
        demo_sets: with k-shot training prompts, the number of fixed demonstration blocks a step draws from.
        val_queries: early stopping looks at the first this-many validation queries (None: all of them).
        max_loss: a loss above this (or NaN/inf) stops training with an error.
        relative_to_stream: ``lr`` and ``init_range`` are multiples of the RMS per coordinate of the residual
            stream at each vector's site (:func:`ltvlib.stream_scale.site_stream_rms`: block input, the trained
            position, zero-shot training prompts, no vector); each vector gets its own AdamW parameter group,
            all decayed by the same linear schedule (the learning rate's stream is blended with the last block's
            by ``lr_final_stream_weight``). False: absolute numbers (the released recipe).
        early_stopping: the validation score that picks the kept vector and counts patience:
            ``"accuracy"`` (first-token accuracy), ``"balanced_accuracy"`` (the mean of per-label recall over
            the labels present, :attr:`ltvlib.evaluate.EvalResult.balanced_accuracy`: a vector that predicts
            the majority label of a skewed validation pool does not score above one that separates the labels)
            or ``"auto"`` (default): balanced accuracy for classification tasks, accuracy for generation tasks.
        retries_without_progress: when a run ends with a vector that did not learn (:func:`learned_rule`), train
            again from the same start and batches with the learning rate
            multiplied by ``retry_lr_factor``, at most this many times (0: never; the released recipe).
        retry_lr_factor: the learning rate's factor per retry.
        lr_final_stream_weight: with ``relative_to_stream``, how much of the learning rate's scale comes from the
            stream entering the *last* block (same prompts and position) instead of the vector's own site: each
            vector's learning rate is ``lr * rms_site ** (1 - w) * rms_last ** w``. 0: the site alone (every layer
            takes steps of the same size relative to its own stream); 1: the same absolute step at every layer of
            a model (a fixed fraction of the stream the vector must eventually move, the output's). The initial
            range stays relative to the site. Ignored by absolute recipes.
        lr_vector_count_exponent: each vector's learning rate is divided by ``n ** e``, with ``n`` the number of
            vectors the LTV trains jointly (layers times positions) and ``e`` this exponent: 0 gives every vector
            the whole step (a 40-vector LTV's steps then add up to 40 one-vector steps); 1 shares one step among
            them (their sizes add up to one step, by arithmetic; how far they move the stream together was not
            measured). A one-vector LTV is unaffected; so is the released recipe (0).
        lr_stream_statistic: with ``relative_to_stream``, how the streams the learning rate is relative to are
            measured (:func:`ltvlib.stream_scale.site_stream_scale`): ``"rms"``, their RMS per coordinate, or
            ``"median"``, their typical coordinate (the median over coordinates of each coordinate's RMS), which a
            few massive coordinates do not move. The initial range stays relative to the site's RMS.
    """

    recipe: str
    lr: float
    weight_decay: float
    batch_size: int
    epochs: int
    samples_per_epoch: int
    init_range: float
    patience: int
    prefix_cache: bool
    demo_sets: int = 8
    max_loss: float = 1e4
    patience_after_gain: bool = False
    val_queries: int | None = None
    relative_to_stream: bool = False
    early_stopping: str = "auto"
    retries_without_progress: int = 0
    retry_lr_factor: float = 1 / 3
    lr_final_stream_weight: float = 0.0
    lr_vector_count_exponent: float = 0.0
    lr_stream_statistic: str = "rms"

    def __post_init__(self) -> None:
        if self.lr_stream_statistic not in STATISTICS:
            raise ValueError(f"unknown lr_stream_statistic {self.lr_stream_statistic!r}; "
                             f"allowed: {', '.join(STATISTICS)}")
        if self.early_stopping not in EARLY_STOPPING:
            raise ValueError(f"unknown early_stopping {self.early_stopping!r}; allowed: {', '.join(EARLY_STOPPING)}")
        if self.retries_without_progress < 0:
            raise ValueError(f"retries_without_progress must be >= 0, got {self.retries_without_progress}")
        if not 0 < self.retry_lr_factor < 1:
            raise ValueError(f"retry_lr_factor must lie in (0, 1), got {self.retry_lr_factor}")
        if not 0.0 <= self.lr_final_stream_weight <= 1.0:
            raise ValueError(f"lr_final_stream_weight must lie in [0, 1], got {self.lr_final_stream_weight}")
        if not 0.0 <= self.lr_vector_count_exponent <= 1.0:
            raise ValueError(f"lr_vector_count_exponent must lie in [0, 1], got {self.lr_vector_count_exponent}")


PAPER_RECIPE = TrainConfig(
    recipe="paper", lr=5e-3, weight_decay=0.01, batch_size=1, epochs=10, samples_per_epoch=100,
    init_range=0.1, patience=2, prefix_cache=False, early_stopping="accuracy",
)
"""The released recipe (github.com/HLYang2001/Learned_TV, as summarised in the book's notes): U(-0.1, 0.1)
init, AdamW lr 5e-3 (the paper's text says 1e-3) with weight decay 0.01, batch 1, at most 10 epochs of 100
sampled queries, linear decay stepped per sample, early stopping with patience 2 on validation accuracy
(``early_stopping="accuracy"``: the released code compares plain accuracy). Its numbers are absolute at
every layer and on every model."""

FAST_REFERENCE_RMS = 6.15
"""RMS per coordinate of SmolLM2-135M's residual stream entering block 15 (the middle layer) at the last token,
where the fast recipe's absolute numbers were first tuned: 6.15 on the first 32 zero-shot Antonym test prompts
(chapter 08's reference); :func:`ltvlib.stream_scale.site_stream_rms` gives 6.14 on the first 32 Antonym
training prompts of the default split (TREC 5.92, Capitalize 6.20, SST-2 5.79). :data:`FAST_RECIPE` states its
steps as absolute numbers at this stream divided by it (init 0.1: e.g. 0.0998 on Antonym's; lr 0.9)."""

FAST_REFERENCE_LAST_RMS = 29.0
"""RMS per coordinate of SmolLM2-135M's residual stream entering its last block (29) at the last token (28.8 to 29
on the default split's training prompts): the stream :data:`FAST_RECIPE`'s learning rate is relative to
(``lr_final_stream_weight=1``), so ``lr * FAST_REFERENCE_LAST_RMS`` is its absolute step at every layer of
SmolLM2-135M."""

FAST_REFERENCE_MEDIAN = 1.93
"""The typical coordinate (``statistic="median"`` of :func:`ltvlib.stream_scale.site_stream_scale`) of SmolLM2-135M's
stream entering block 15 at the last token, on the first 32 Antonym training prompts of the default split: 1.934
(SST-2 1.68, TREC 1.98); its RMS is 3.2 times that."""

FAST_REFERENCE_LAST_MEDIAN = 10.9
"""The typical coordinate of SmolLM2-135M's stream entering its last block (29) at the last token, on the first 32
Antonym training prompts of the default split: 10.92 (SST-2 10.10, TREC 11.89); its RMS
(:data:`FAST_REFERENCE_LAST_RMS`) is 2.7 times that. :data:`FAST_RECIPE`'s learning rate is relative to it, so
``lr * FAST_REFERENCE_LAST_MEDIAN`` is its absolute step at every layer of SmolLM2-135M: the 4.24 it was tuned at."""

FAST_RECIPE = TrainConfig(
    recipe="fast", lr=0.9 / FAST_REFERENCE_RMS * FAST_REFERENCE_LAST_RMS / FAST_REFERENCE_LAST_MEDIAN,
    weight_decay=0.01, batch_size=16, epochs=8, samples_per_epoch=128, init_range=0.1 / FAST_REFERENCE_RMS,
    patience=2, prefix_cache=True, patience_after_gain=True, val_queries=200, relative_to_stream=True,
    retries_without_progress=2, lr_final_stream_weight=1.0, lr_vector_count_exponent=1.0,
    lr_stream_statistic="median",
)
"""Ours: batches of 16 with a larger learning rate, at most 8 epochs of 128 queries (64 steps, 1,024 samples
against the paper's 1,000), cached prompt prefixes and early blocks skipped; the same initialisation, AdamW,
linear decay and early stopping (patience 2) as the paper's recipe, except that patience starts counting once
validation accuracy has beaten the starting vector's, and that early stopping looks at the first 200 validation
queries (the paper's recipe looks at all 400: computing each validation prompt once costs about a fifth of a
fast run). Early stopping looks at balanced accuracy for classification tasks (``early_stopping="auto"``).

Step sizes. The initial range is relative to the vector's site: 0.1 / 6.15 = 0.0163 times the stream RMS there
(:data:`FAST_REFERENCE_RMS`; U(-0.1, 0.1) at SmolLM2's middle layer, as in the paper). The learning rate is
relative to the stream entering the *last* block (``lr_final_stream_weight=1``), to its typical coordinate
(``lr_stream_statistic="median"``): 0.389 times it, 4.24 at every layer of SmolLM2-135M
(:data:`FAST_REFERENCE_LAST_MEDIAN`; 3.9 to 4.6 by task) and 81 to 120 on Gemma-3-270M. A vector must move the
output, whose stream is the last block's, whatever layer it is added at: a step relative to its own site (the
previous default, 27 times 0.0163 at the site) took steps 240 times smaller at SmolLM2's layer 0 than at its last,
and TREC at layers 0 and 3 trained far better with larger ones.

Why the typical coordinate and not the RMS: Adam moves every coordinate by about the learning rate per step, and
the RMS is set by a few massive coordinates (:mod:`ltvlib.stream_scale`), more so on Gemma-3-270M (RMS 5.7 times
its typical coordinate entering the last block, SmolLM2-135M 2.9). Relative to the RMS (0.146 times it, the
previous default) Gemma's step was 190 per coordinate at layer 9 on SST-2, where the typical coordinate is 17 and
the best vector it found had an RMS of 23: the loss went 11.6, 13.9, 3.6, 1.0, 1.1, 1.7, 0.7, 1.3, 0.4, 4.3 (every
fourth step) and validation accuracy 0.50, 0.73, 0.58, 0.51 by epoch, below zero-shot within the labels (0.785).
The same factor of the typical coordinate gives SmolLM2 the steps it was tuned at and Gemma about half its old
ones.

How it was chosen: 0.1 at layer 15 first (batch 16, epochs and queries per epoch chosen against the paper's
recipe on Antonym and TREC). Then, by the rule "the highest mean validation score (what early stopping sees,
never test accuracy) over the grid's points", over Antonym and TREC at layers 0, 3, 8, 15, 22, 26 and 29:
site-relative factors first (x27 of 0.0163 won), then the blend ``w`` in quarters with the factor interpolated
per point from single runs at x9 to x2187: w = 0 / x27 44.1 %, w = 1/2 / x27 46.3, w = 3/4 / x15.6 47.1,
**w = 1 / x9 47.7** (mean validation accuracy over those 14 points). Checked against a third and three times its learning rate on
test accuracy at those 14 points (3-10 seeds each): within 5 points of the better neighbour at 13; at TREC layer
3 three times the step scores 5.5 points more [1.0, 10.0] (10 seeds). All of that was one-vector LTVs.

Several vectors (``lr_vector_count_exponent=1``): an LTV of ``n`` vectors gives each ``1/n`` of that learning
rate, so their step sizes add up to one vector's step (arithmetic; how far they move the stream together was
not measured). With the whole step
each, chapter 02's 40-vector LTV (every 4th layer x the last 5 positions) stayed near its start on Capital,
Capitalize and Antonym (validation 0.020 / 0.045 / 0.025); with ``1/sqrt(n)`` 0.347 / 0.035 / 0.025; with
``1/n`` 0.408 / 0.775 / 0.375. A one-vector LTV is unaffected.

A run that does not learn (:func:`learned_rule`: the lower end of its validation accuracy's 95 % Wilson interval
not above the better of no vector and the majority answer) is trained again from the same start with a third of
the learning rate, at most twice (``retries_without_progress``): a run that learns is never retried, so this costs
time only where a vector would otherwise be reported as "did not train".

Checked on both models' label tasks at their middle layers (``bench/label_row.py``: SST-2, 300 training, 200
validation and 200 test queries, seed 0): Gemma-3-270M layer 9 in one attempt at lr 89, validation 88.5 % [83.3,
92.2], test 88.0 % [82.8, 91.8] against 78.0 % zero-shot within the labels (at the previous step, relative to the
RMS: validation 73.0 %, not learned); SmolLM2-135M layer 15 at lr 3.93, validation 84.0 % [78.3, 88.4], test 88.5 %
[83.3, 92.2] against 50.5 % (at the previous 4.27: validation 82.0 %, test 89.0 %). On Antonym (generation; 300
training, 200 validation and test queries): Gemma layer 9 at lr 81, test 46.0 % [39.2, 52.9] as at the previous 176
(validation 48.0 % against 43.0 %; the previous step's loss rose from 8.7 to 18.8 over its first four steps, this
one's fell to 5.5); SmolLM2 layer 15 at the same step as before (4.25), test 41.5 % [34.9, 48.4].
``bench/recipes.py`` compares this recipe with the released one side by side (time to accuracy), and
``bench/label_row.py`` checks label tasks on both models at their middle layer; figures and commands in
``bench/README.md``."""


RECIPES = {"paper": PAPER_RECIPE, "fast": FAST_RECIPE}


def resolve_recipe(recipe: str | TrainConfig) -> TrainConfig:
    """A recipe name (``"fast"``, ``"paper"``) or config, as a config; raises ``ValueError`` otherwise."""
    if isinstance(recipe, TrainConfig):
        return recipe
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)} or a TrainConfig")
    return RECIPES[recipe]


class TrainingDivergedError(FloatingPointError):
    """The loss became NaN, infinite or exploded."""


@dataclass(frozen=True, eq=False)
class LearnedTaskVector:
    """A trained LTV, where it came from and how its training went (immutable: :func:`dataclasses.replace` makes
    a changed copy).

    Attributes:
        vectors: ``(len(layers) * len(positions), d_model)``; row ``i * len(positions) + j`` goes to
            ``layers[i]`` at ``positions[j]``, added at the block input.
        layers, positions: the grid of sites.
        model, task, recipe, seed, shots: provenance.
        config: the training config.
        training: the training telemetry and outcome (:class:`ltvlib.ltv_record.TrainingRecord`: curve, steps,
            seconds, attempts, validation scores, step sizes, whether it learned); its defaults for a vector
            built by hand.
    """

    vectors: Tensor
    layers: tuple[int, ...]
    positions: tuple[int, ...]
    model: str
    task: str
    recipe: str
    seed: int
    shots: int
    config: TrainConfig
    training: TrainingRecord = field(default_factory=TrainingRecord)

    def edits(self, scale: float = 1.0, *, layer: int | None = None) -> list[VectorEdit]:
        """The vectors as injections (added at the block input), each times ``scale``. ``layer``: None puts
        them at the vector's own layers; a layer given moves a one-layer vector there (``ValueError`` for a
        vector trained at several layers)."""
        layers = self.layers
        if layer is not None:
            if len(self.layers) != 1:
                raise ValueError(f"layer={layer} moves a one-layer vector; this one was trained at layers {self.layers}")
            layers = (layer,)
        pairs = [(l, p) for l in layers for p in self.positions]
        return [VectorEdit(l, p, scale * v) for (l, p), v in zip(pairs, self.vectors)]

    def apply(self, lm: LoadedModel, *, layer: int | None = None, scale: float = 1.0) -> AbstractContextManager[None]:
        """A context manager putting :meth:`edits` into every prompt forward run inside it (plain or
        ``generate``): ``ltvlib.inject.apply(lm, self.edits(scale, layer=layer))``; hooks removed on exit."""
        from .task_vector import apply_edits

        return apply_edits(lm, self.edits(scale, layer=layer))

    def metadata(self, *, without: Sequence[str] = ()) -> dict[str, Any]:
        """Everything but the vectors, as JSON-ready values: provenance, ``config`` and ``training`` as dicts.
        ``without``: training fields given as None (e.g. ``("curve",)`` for a result key that should not
        carry the whole curve)."""
        meta = {k: v for k, v in asdict(self).items() if k != "vectors"}
        for name in without:
            if name not in meta["training"]:
                raise ValueError(f"unknown training field {name!r}; allowed: {', '.join(meta['training'])}")
            meta["training"][name] = None
        return meta

    def save(self, path: str | Path) -> Path:
        """Write ``vectors`` as safetensors with the rest as JSON string metadata (atomically), and where the
        vectors go (``site`` ``"block_input"``, ``mode`` ``"add"``, ``layers``, ``positions``:
        :func:`ltvlib.task_vector.placement_metadata`)."""
        from safetensors.torch import save

        from .task_vector import placement_metadata

        meta = {"ltv": json.dumps(self.metadata()), "code_version": code_version(), **placement_metadata(self.edits())}
        return atomic_write_bytes(path, save({"vectors": self.vectors.detach().cpu().contiguous()}, metadata=meta))

    @classmethod
    def load(cls, path: str | Path) -> LearnedTaskVector:
        """Read a file written by :meth:`save`.

        Files whose training fields sat beside the provenance (no ``training`` entry) are read into a
        :class:`~ltvlib.ltv_record.TrainingRecord` (:meth:`~ltvlib.ltv_record.TrainingRecord.from_flat_metadata`,
        which also derives the outcome of the oldest files from their curve). Configs that predate
        ``relative_to_stream`` and ``early_stopping``: absolute numbers and plain accuracy, as they were trained.
        """
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = json.loads(f.metadata()["ltv"])
            vectors = f.get_tensor("vectors")
        meta["config"].setdefault("early_stopping", "accuracy")
        meta["config"] = TrainConfig(**meta["config"])
        meta["layers"] = tuple(meta["layers"])
        meta["positions"] = tuple(meta["positions"])
        if "training" in meta:
            meta["training"] = TrainingRecord.from_metadata(meta["training"])
        else:
            meta["training"] = TrainingRecord.from_flat_metadata(meta)
        return cls(vectors=vectors, **meta)


def answer_loss(logits: Tensor, answers: Sequence[Sequence[int]], valid: Tensor) -> Tensor:
    """Mean over rows of the mean negative log-probability of each row's answer tokens.

    Args:
        logits: ``(batch, n, vocab)``, column ``j`` predicting answer token ``j``.
        answers: token ids per row; valid: ``(batch, n)`` mask of real answer tokens.
    """
    n = logits.shape[1]
    target = torch.tensor([list(a) + [0] * (n - len(a)) for a in answers], device=logits.device)
    logp = logits.float().log_softmax(-1).gather(-1, target[..., None])[..., 0]
    per_row = -(logp * valid).sum(-1) / valid.sum(-1)
    return per_row.mean()


def _grid_edits(params: Tensor | Sequence[Tensor], layers: Sequence[int], positions: Sequence[int]) -> list[VectorEdit]:
    pairs = [(l, p) for l in layers for p in positions]
    return [VectorEdit(l, p, params[i]) for i, (l, p) in enumerate(pairs)]


# The code path before the prompt store (LTV_PROMPT_STORE=0, see ltvlib.prompt_store): the last four runners
# kept per model (:mod:`ltvlib.memo`), keyed by everything that defines them, each prompt's cache computed lazily
# in the training batches. A runner that keeps blocks from ``first_layer`` on serves any later layer too.
def _legacy_memo(lm: LoadedModel, key: tuple, first_layer: int, build: Any) -> Any:
    entry = memo(lm, "ltv.runners", key, lambda: (first_layer, build()), keep=4,
                 reuse=lambda e: e[0] <= first_layer)
    return entry[1]


@dataclass
class _TrainingPrompts:
    """The training queries as prompts: one runner per demonstration block (one runner for zero-shot).

    ``groups[s]`` lists the training indices whose prompts use block ``s``; runner ``s`` holds exactly those
    prompts, in that order. Each query keeps its block for the whole run, so its own prefix is computed
    once; a block's demonstrations never include the block's own queries.
    """

    runners: list[PromptRunner]
    groups: list[list[int]]


def _training_prompts(
    lm: LoadedModel, task: Task, train: list[Example], shots: int, n_sets: int, tail: Tail, seed: int,
    first_layer: int,
) -> _TrainingPrompts:
    def build(first: int) -> _TrainingPrompts:
        if not shots:
            runner = PromptRunner(lm, encode_prompts(lm.tokenizer, task, train), tail=tail, first_layer=first,
                                  max_cache_bytes=prompt_store.runner_bytes())
            return _TrainingPrompts([runner], [list(range(len(train)))])
        rng = random.Random(f"demos-{seed}")
        groups = [g for g in (list(range(s, len(train), n_sets)) for s in range(n_sets)) if g]
        runners = []
        for group in groups:
            members = set(group)
            block = sample_demos([e for i, e in enumerate(train) if i not in members], shots, rng)
            queries = [train[i] for i in group]
            prompts = encode_prompts(lm.tokenizer, task, queries, shared_demos=block)
            runners.append(PromptRunner(lm, prompts, tail=tail, first_layer=first,
                                        max_cache_bytes=prompt_store.runner_bytes(len(groups))))
        return _TrainingPrompts(runners, groups)

    key = ("train", lm.name, model_serial(lm), task, tuple(train), shots, n_sets, tail, seed if shots else None)
    if not prompt_store.enabled():
        return _legacy_memo(lm, key, first_layer, lambda: build(first_layer))

    def answers() -> list[list[int]]:
        return answer_ids(lm.tokenizer, task, [e.output for e in train])

    def prefill(data: _TrainingPrompts) -> int:
        ids = answers()
        return sum(r.prefill([ids[i] for i in g]) for r, g in zip(data.runners, data.groups))

    def bound(data: _TrainingPrompts) -> int:
        ids = answers()
        return sum(r.cache_bound([ids[i] for i in g]) for r, g in zip(data.runners, data.groups))

    return prompt_store.STORE.get(key, first_layer, build, prefill, bound)


def _validation_set(
    lm: LoadedModel, task: Task, val: list[Example], train: list[Example], shots: int, n_sets: int, seed: int,
    tail: Tail, first_layer: int,
) -> EvalSet:
    key = ("val", lm.name, model_serial(lm), task, tuple(val), shots, n_sets, seed if shots else None, tail)

    def build(first: int) -> EvalSet:
        return EvalSet(lm, task, val, shots=shots, demo_pool=train, seed=seed, tail=tail,
                       demo_sets=n_sets if shots else None, first_layer=first)

    if not prompt_store.enabled():
        return _legacy_memo(lm, key, first_layer, lambda: build(first_layer))
    return prompt_store.STORE.get(key, first_layer, build,
                                  lambda es: sum(runner.prefill() for _, runner in es.groups))


class BatchSampler:
    """Batches of training queries: each batch comes from one demonstration block (chosen at random), its
    queries drawn by shuffled passes over that block's queries, so a small split (Capital has 98 queries)
    still yields any number of samples and no query repeats within a pass."""

    def __init__(self, groups: list[list[int]], rng: random.Random) -> None:
        self.groups, self.rng = groups, rng
        self.queues: list[list[int]] = [[] for _ in groups]

    def batch(self, size: int) -> tuple[int, list[int]]:
        """A block and ``size`` positions in it (indices into ``groups[block]``)."""
        s = self.rng.randrange(len(self.groups))
        out: list[int] = []
        while len(out) < size:
            if not self.queues[s]:
                self.queues[s] = self.rng.sample(range(len(self.groups[s])), len(self.groups[s]))
            out.append(self.queues[s].pop())
        return s, out


TaskList = list[Task | str] | tuple[Task | str, ...]
"""Several tasks for :func:`train_ltv` (a list or tuple: a single name is one task)."""


@overload
def train_ltv(
    lm: LoadedModel, task: Task | str, *, layers: Sequence[int] | None = ..., positions: Sequence[int] = ...,
    shots: int = ..., recipe: str | TrainConfig = ..., seed: int = ..., seeds: None = ...,
    splits: TaskSplits | None = ..., n_train: int = ..., n_val: int = ..., cache: bool = ..., progress: bool = ...,
) -> LearnedTaskVector: ...


@overload
def train_ltv(
    lm: LoadedModel, task: Task | str, *, layers: Sequence[int] | None = ..., positions: Sequence[int] = ...,
    shots: int = ..., recipe: str | TrainConfig = ..., seed: int = ..., seeds: Sequence[int],
    splits: TaskSplits | None = ..., n_train: int = ..., n_val: int = ..., cache: bool = ..., progress: bool = ...,
) -> list[LearnedTaskVector]: ...


@overload
def train_ltv(
    lm: LoadedModel, task: TaskList, *, layers: Sequence[int] | None = ..., positions: Sequence[int] = ...,
    shots: int = ..., recipe: str | TrainConfig = ..., seed: int = ..., seeds: None = ...,
    splits: None = ..., n_train: int = ..., n_val: int = ..., cache: bool = ..., progress: bool = ...,
) -> list[LearnedTaskVector]: ...


@overload
def train_ltv(
    lm: LoadedModel, task: TaskList, *, layers: Sequence[int] | None = ..., positions: Sequence[int] = ...,
    shots: int = ..., recipe: str | TrainConfig = ..., seed: int = ..., seeds: Sequence[int],
    splits: None = ..., n_train: int = ..., n_val: int = ..., cache: bool = ..., progress: bool = ...,
) -> list[list[LearnedTaskVector]]: ...


def train_ltv(
    lm: LoadedModel,
    task: Task | str | TaskList,
    *,
    layers: Sequence[int] | None = None,
    positions: Sequence[int] = (-1,),
    shots: int = 0,
    recipe: str | TrainConfig = "fast",
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    splits: TaskSplits | None = None,
    n_train: int = 600,
    n_val: int = 400,
    cache: bool = False,
    progress: bool = True,
) -> LearnedTaskVector | list[LearnedTaskVector] | list[list[LearnedTaskVector]]:
    """Train a learned task vector (or one per seed of ``seeds``, or per task of a list of tasks), or with
    ``cache=True`` read back the one trained earlier with the same configuration, task data and code.

    The one way to train an LTV. ``cache`` is off by default (a plain call touches no disk); the book's chapters
    train through :mod:`ltvlib.study.ltvs`, which passes ``cache=True``.

    Several runs are trained together: with zero-shot prompts and cached prefixes, every (task, seed) run's
    queries are rows of one batch per step, each row carrying its own run's vector (its own draw, sampler,
    optimiser, schedule, early stopping and retries). Each step equals the run's step trained alone within float
    tolerance (a batch of other rows sums in another order); a run that amplifies rounding can end elsewhere, as a
    different seed would (Gemma-3-270M's TREC at layer 9: cosine 0.93 to the vector trained alone after 64 steps,
    while Antonym and SST-2 beside it were bit-identical). What it saves depends on the machine: on 2 CPU cores
    three seeds at SmolLM2-135M's middle layer took 1/1.28 of the time of one after another, four tasks at layer 3
    1/1.03 (``bench/floor.py --seeds``, ``--tasks``; current figures in ``bench/README.md``). With demonstrations
    or without cached prefixes the runs go one after another. ``training.seconds`` is then the whole call's wall
    time.

    With ``cache=True`` vectors live in ``<cache>/vectors/ltv/<key>.safetensors`` (:func:`ltv_cache_path`; see
    :mod:`ltvlib.cache`); the key holds the model name, the task's definition and the bytes of its data files
    (:func:`ltvlib.cache.task_key`), layers, positions, shots, the config, seed, ``n_train``, ``n_val`` and the
    code version, so a task whose data changed, or another task under the same name, is trained afresh.
    Splits of the caller's own are keyed by their examples instead of ``n_train`` and ``n_val``
    (:func:`ltv_cache_key`). A damaged file is reported and trained afresh (:func:`ltvlib.cache.read_cached`).
    Nothing is written unless training succeeds; only the runs not cached are trained.

    Args:
        lm: the frozen model (:func:`ltvlib.models.load_model`).
        task: a task name or :class:`~ltvlib.tasks.Task`, or a list (or tuple) of them: one result per task, in
            that order, every task at the same layers and positions.
        layers: injection layers (default: the middle layer ``L // 2``); one vector per (layer, position).
        positions: prompt positions (negative from the last token, non-negative from the first).
        shots: demonstrations in the training prompts (0 = zero-shot, the paper's default).
        recipe: ``"fast"``, ``"paper"`` or a :class:`TrainConfig`.
        seed: seeds the initialisation, the query sampling and the demonstrations.
        seeds: several seeds (distinct, at least one): a list of results in this order (not with ``seed``).
        splits: data splits of a single task (default ``load_splits(task, seed=0, n_train=n_train,
            n_val=n_val)``: the split does not move with ``seed``).
        n_train, n_val: sizes of the default splits' training and validation parts.
        cache: look the vectors up in the on-disk cache, and store them there after training.
        progress: show a progress bar.

    Returns:
        one task: the vector (a list per seed with ``seeds``); a list of tasks: a list of those, one per task.

    Raises:
        ValueError: an unknown recipe, a layer or position out of range, ``seeds`` empty or repeated or given
            with ``seed``, no tasks, a task twice, ``splits`` with several tasks; with ``cache=True``: no
            positions or a position that is not an int (before anything is looked up).
        TrainingDivergedError: the loss became NaN/inf or exceeded ``config.max_loss`` (task and seed named).
        ContextLengthError: a prompt past the model's context: with the default splits, any row of the task's
            files, before anything is read or cached (:func:`check_context`).
    """
    several = isinstance(task, (list, tuple))
    tasks = [get_task(t) for t in (task if isinstance(task, (list, tuple)) else [task])]
    if not tasks:
        raise ValueError("train_ltv needs at least one task")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"train_ltv needs distinct tasks; got {names!r}")
    if several and splits is not None:
        raise ValueError("splits= names one task's data: with several tasks each uses its default splits")
    if seeds is not None:
        wanted = [int(s) for s in seeds]
        if not wanted or len(set(wanted)) != len(wanted):
            raise ValueError(f"train_ltv needs distinct seeds, at least one; got {list(seeds)!r}")
        if seed != 0:
            raise ValueError(f"pass seed={seed} or seeds={wanted!r}, not both")
    else:
        wanted = [seed]
    if splits is None:
        for t in tasks:
            check_context(lm, t)
    config = resolve_recipe(recipe)
    layers = tuple(check_layer(l, lm.n_layers) for l in (layers if layers is not None else [lm.middle_layer]))
    positions = tuple(positions)
    runs = [(t, s) for t in tasks for s in wanted]
    found: dict[tuple[str, int], LearnedTaskVector | None] = {}
    paths: dict[tuple[str, int], Path] = {}
    if cache:
        for t, s in runs:
            paths[t.name, s] = ltv_cache_path(lm.name, t, layers=layers, positions=positions, shots=shots,
                                              recipe=config, seed=s, n_train=n_train, n_val=n_val, splits=splits)
        found = {k: read_cached(p, LearnedTaskVector.load) for k, p in paths.items()}
    missing = [(t, s) for t, s in runs if found.get((t.name, s)) is None]
    if missing:
        own = {t.name: splits or load_splits(t, seed=0, n_train=n_train, n_val=n_val) for t, _ in missing}
        specs = [_Spec(t, own[t.name], s) for t, s in missing]
        for ltv in _train_runs(lm, specs, layers=layers, positions=positions, shots=shots, config=config,
                               progress=progress):
            if cache:
                ltv.save(paths[ltv.task, ltv.seed])
            found[ltv.task, ltv.seed] = ltv
    per_task = [[cast(LearnedTaskVector, found[t.name, s]) for s in wanted] for t in tasks]
    if seeds is None:
        singles = [results[0] for results in per_task]
        return singles if several else singles[0]
    return per_task if several else per_task[0]


def check_context(lm: LoadedModel, task: Task | str) -> None:
    """Every row of ``task``'s data files fits ``lm``: its zero-shot prompt and answer within the tokenizer's bound,
    which :func:`ltvlib.models.wrap_model` sets to the model's context where the tokenizer states none
    (:func:`ltvlib.prompts.check_task_context`, before the splits are read and their rows cached, so a file with a
    row too long stops in seconds and writes nothing). Remembered per model and task (:mod:`ltvlib.memo`).

    Raises:
        ContextLengthError: a row too long; the message names its file and line, its tokens and the limit.
    """
    t = get_task(task)
    limit = tokenizer_limit(lm.tokenizer)
    if limit is None:  # no bound known: nothing to check against
        return
    memo(lm, "ltv.context_checked", (t, limit), lambda: check_task_context(t, lm.tokenizer, limit), keep=16)


def ltv_cache_key(
    model: str, task: Task | str, *, layers: Sequence[int], positions: Sequence[int] = (-1,), shots: int = 0,
    recipe: str | TrainConfig = "fast", seed: int = 0, n_train: int = 600, n_val: int = 400,
    splits: TaskSplits | None = None,
) -> dict[str, Any]:
    """The on-disk cache key of an LTV (the one key every cache of LTVs uses): the model's name, the task's
    definition and data (:func:`ltvlib.cache.task_key`), layers, positions, shots, the config, seed and the
    default splits' sizes, or, for ``splits`` of the caller's own (cleaned data, other sizes), a digest of their
    training and validation examples (:func:`splits_digest`). Raises ``ValueError`` for no positions or a
    position that is not an int."""
    positions = tuple(positions)
    if not positions or not all(isinstance(p, int) and not isinstance(p, bool) for p in positions):
        raise ValueError(f"positions must be a non-empty sequence of ints, got {positions!r}")
    key: dict[str, Any] = {
        "model": model, "task": task_key(get_task(task)), "layers": tuple(int(l) for l in layers),
        "positions": positions, "shots": shots, "config": asdict(resolve_recipe(recipe)), "seed": seed,
        "n_train": n_train, "n_val": n_val,
    }
    if splits is not None:
        del key["n_train"], key["n_val"]
        key["splits"] = splits_digest(splits)
    return key


def splits_digest(splits: TaskSplits) -> str:
    """A digest of the training and validation examples of ``splits``, in order (what training reads of them)."""
    rows = [[e.input, e.output, list(e.alternatives)] for e in (*splits.train, None, *splits.validation)
            if e is not None] + [len(splits.train)]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def ltv_cache_path(model: str, task: Task | str, **key: Any) -> Path:
    """Where :func:`train_ltv` (``cache=True``) keeps the LTV of :func:`ltv_cache_key`'s arguments."""
    return cache_path("ltv", ltv_cache_key(model, task, **key), ".safetensors")


@dataclass(frozen=True)
class _Spec:
    """One run to train: a task, the splits it trains and validates on, and its seed."""

    task: Task
    splits: TaskSplits
    seed: int


@dataclass
class _Run:
    """One run's state in :func:`_attempt`: its own draw, sampler, optimiser, schedule and early stopping."""

    spec: _Spec
    data: _TrainingPrompts
    answers: list[list[int]]
    val_set: EvalSet
    sampler: BatchSampler
    params: list[Tensor]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    site: _SiteScales
    effective_lr: tuple[float, ...]
    width: int
    curve: list[dict[str, float | None]] = field(default_factory=list)
    accuracies: dict[int, float] = field(default_factory=dict)
    step: int = 0
    stale: int = 0
    gained: bool = False
    start_score: float = float("nan")
    best_score: float = float("nan")
    best: Tensor | None = None
    best_epoch: int = 0
    best_step: int = 0
    active: bool = True

    def current(self) -> Tensor:
        return torch.stack([p.detach() for p in self.params])


@dataclass(frozen=True)
class _SiteScales:
    """What a task's stream sets for its runs: each site's RMS (None: absolute recipe), each vector's initial-range
    and learning-rate multipliers (:func:`step_scales`), and the score early stopping compares."""

    rms: tuple[float, ...] | None
    init: tuple[float, ...]
    lr: tuple[float, ...]
    metric: str


def _train_runs(
    lm: LoadedModel, specs: list[_Spec], *, layers: tuple[int, ...], positions: tuple[int, ...], shots: int,
    config: TrainConfig, progress: bool,
) -> list[LearnedTaskVector]:
    """:func:`train_ltv` without the cache: one result per spec, in order, with each run's retries while it has
    not learned (:func:`learned_rule`). Runs that can share a batch (zero-shot, cached prefixes) step together."""
    start = time.perf_counter()
    scores: list[list[float]] = [[] for _ in specs]
    steps: list[list[int]] = [[] for _ in specs]
    factors = [1.0] * len(specs)
    baselines: dict[int, float] = {}
    results: dict[int, LearnedTaskVector] = {}
    pending = list(range(len(specs)))
    together = shots == 0 and config.prefix_cache
    while pending:
        for group in ([pending] if together else [[k] for k in pending]):
            trained = _attempt(lm, [specs[k] for k in group], [factors[k] for k in group], layers=layers,
                               positions=positions, shots=shots, config=config, progress=progress,
                               baselines={i: baselines[k] for i, k in enumerate(group) if k in baselines})
            for k, (ltv, baseline) in zip(group, trained):
                baselines[k] = baseline
                scores[k].append(ltv.training.best_val_score)
                steps[k].append(ltv.training.steps)
                # keep the best attempt: a retry at a smaller step that scores worse must not replace it
                kept = results.get(k)
                if kept is None or ltv.training.learned or ltv.training.best_val_score > kept.training.best_val_score:
                    results[k] = ltv
        pending = [k for k in pending
                   if not results[k].training.learned and len(scores[k]) <= config.retries_without_progress]
        for k in pending:
            factors[k] *= config.retry_lr_factor
    seconds = time.perf_counter() - start
    return [replace(results[k], training=replace(results[k].training, attempts=len(scores[k]),
                                                 attempt_scores=tuple(scores[k]), attempt_steps=tuple(steps[k]),
                                                 seconds=seconds))
            for k in range(len(specs))]


def majority_rate(examples: Sequence[Example]) -> float:
    """The share of ``examples`` whose answer is the most common one (the majority label of a classification
    task, the most frequent answer of a generation task): what always giving that answer scores."""
    if not examples:
        return float("nan")
    return max(Counter(e.output for e in examples).values()) / len(examples)


def no_vector_accuracy(result: EvalResult) -> float:
    """What the prompts score without a vector, as :func:`learned_rule` compares it: for a classification task the
    accuracy *within the labels* (:attr:`~ltvlib.evaluate.EvalResult.label_accuracy`, the argmax over the labels'
    first tokens only), else first-token accuracy over the whole vocabulary. A small model often answers a label
    task zero-shot with some other word while ranking the right label first among the labels (Gemma-3-270M on
    SST-2: 0 % over the vocabulary, 78.5 % within the labels, 200 validation queries): a vector must beat what
    the model already knows, not only its answer format."""
    return result.accuracy if result.label_accuracy is None else result.label_accuracy


def learned_rule(accuracy: float, n: int, no_vector_accuracy: float, majority: float) -> tuple[bool, float]:
    """Whether a vector of validation ``accuracy`` on ``n`` queries learned, and the lower bound it was judged by:
    the lower end of the 95 % Wilson interval of its accuracy must lie above the better of the validation
    prompts' accuracy without a vector (:func:`no_vector_accuracy`: within the labels for a classification task)
    and the majority answer's rate (what a constant answer scores)."""
    if n < 1:
        return False, float("nan")
    low = wilson_interval(round(accuracy * n), n)[0]
    return low > max(no_vector_accuracy, majority), low


GROUP_TOKENS = 32768
"""Bound on the padded prompt tokens (rows x the longest prompt) of one forward of runs stepped together."""


def width_groups(widths: Sequence[int], rows: int, max_tokens: int = GROUP_TOKENS) -> list[list[int]]:
    """Runs that share one forward in a training step: indices into ``widths`` (each run's longest prompt, in
    tokens; ``rows`` rows a run), grouped in order of width so that a group's longest prompt is at most twice its
    shortest (plus 16 tokens) and its padded size at most ``max_tokens`` (a run alone may exceed it). Padding a
    short prompt to a long one's width costs memory traffic (its cached keys and values are copied into the batch)
    that the arithmetic does not need. Indices keep their order within a group; one run is one group."""
    order = sorted(range(len(widths)), key=lambda k: (widths[k], k))
    groups: list[list[int]] = []
    low = 0
    for k in order:
        w = widths[k]
        if groups and w <= 2 * low + 16 and (len(groups[-1]) + 1) * rows * w <= max_tokens:
            groups[-1].append(k)
        else:
            groups.append([k])
            low = w
    return [sorted(g) for g in groups]


def _attempt(
    lm: LoadedModel, specs: list[_Spec], factors: list[float], *, layers: tuple[int, ...],
    positions: tuple[int, ...], shots: int, config: TrainConfig, progress: bool, baselines: dict[int, float],
) -> list[tuple[LearnedTaskVector, float]]:
    """One attempt of every run in ``specs`` (learning rate ``config.lr * factors[k]``), stepped together: the
    active runs' queries are rows of one batch (:func:`ltvlib.forward.run_rows`), each row carrying its run's
    vectors; each run's loss is the mean over its own rows, and the backward pass of their sum gives each run its
    own gradient. One run takes exactly the single-run path (its vectors unexpanded, its loss alone). Several runs
    need zero-shot prompts and cached prefixes. ``baselines`` holds the runs' validation accuracy without a vector
    where known (by index in ``specs``); each result comes with its run's."""
    from tqdm import tqdm

    start = time.perf_counter()
    if len(specs) > 1 and (shots or not config.prefix_cache):
        raise ValueError("several runs step together only with zero-shot prompts and cached prefixes")
    tail = tail_needed(positions) if config.prefix_cache else None
    n_sets = config.demo_sets if shots else 1
    first = min(layers)
    steps_per_epoch = math.ceil(config.samples_per_epoch / config.batch_size)
    total = config.epochs * steps_per_epoch
    sites_of: dict[tuple[str, int], _SiteScales] = {}

    def site_scales(spec: _Spec) -> _SiteScales:
        # the stream is measured once per task and split, for all its seeds
        key = (spec.task.name, id(spec.splits))
        if key not in sites_of:
            task, train = spec.task, list(spec.splits.train)
            metric = validation_metric(config, task)
            if metric == "balanced_accuracy" and not task.labels:
                # evaluate() has no balanced accuracy without labels: the first comparison would fail after an epoch
                raise ValueError(
                    f"early_stopping='balanced_accuracy' needs a classification task; {task.name!r} has no labels")
            # Every position must exist in every prompt: fail now, naming it, not mid-training.
            shortest = min(encode_prompts(lm.tokenizer, task, train).rows, key=len)
            resolve_positions(torch.ones(1, len(shortest)), positions)
            rms = site_stream_rms(lm, task, train, layers, positions) if config.relative_to_stream else None
            init = rms or (1.0,) * (len(layers) * len(positions))
            lr = step_scales(config, lm, task, train, layers, positions, site_rms=rms)
            sites_of[key] = _SiteScales(tuple(rms) if rms is not None else None, tuple(init), lr, metric)
        return sites_of[key]

    runs = []
    for spec, factor in zip(specs, factors):
        task, train = spec.task, list(spec.splits.train)
        val = list(spec.splits.validation)[: config.val_queries]
        site = site_scales(spec)
        rng = random.Random(spec.seed)
        gen = torch.Generator().manual_seed(spec.seed)
        data = _training_prompts(lm, task, train, shots, n_sets, tail, spec.seed, first)
        # Without prefix caching (the paper's recipe, as released) validation runs full forwards too.
        val_set = _validation_set(lm, task, val, train, shots, n_sets, spec.seed, tail, first)
        lr = config.lr * factor
        # The same draw for every recipe, then each row scaled to its site: an absolute recipe's vectors are
        # bit-identical to those of the code before relative steps existed.
        draw = torch.rand(len(site.init), lm.d_model, generator=gen) * 2 - 1
        params = [(draw[i] * (config.init_range * s)).to(lm.device).requires_grad_(True)
                  for i, s in enumerate(site.init)]
        # One parameter group per vector, each with its own site's learning rate; LambdaLR decays all of them.
        opt = torch.optim.AdamW([{"params": [p], "lr": lr * s} for p, s in zip(params, site.lr)],
                                lr=lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / max(total, 1)))
        answers = answer_ids(lm.tokenizer, task, [e.output for e in train])
        width = max(len(row) for runner in data.runners for row in runner.prompts.rows)
        runs.append(_Run(spec, data, answers, val_set, BatchSampler(data.groups, rng), params, opt, sched, site,
                         tuple(lr * s for s in site.lr), width))

    def validate(run: _Run, epoch: int) -> float:
        with torch.no_grad():
            r = evaluate(run.val_set, _grid_edits(run.current(), layers, positions))
        score = r.accuracy if run.site.metric == "accuracy" else r.balanced_accuracy
        assert score is not None  # balanced accuracy without labels raised above
        run.curve.append({"epoch": epoch, "val_accuracy": r.accuracy, "val_balanced_accuracy": r.balanced_accuracy,
                          "val_score": score, "step": run.step})
        run.accuracies[epoch] = r.accuracy
        return score

    for run in runs:
        run.start_score = run.best_score = validate(run, 0)
        run.best = run.current().clone()
    sites = [(l, p) for l in layers for p in positions]
    names = sorted({r.spec.task.name for r in runs})
    bar = tqdm(total=total * len(runs), disable=not progress, leave=False,
               desc=f"LTV {','.join(names)} L{','.join(map(str, layers))}"
                    + (f" x{len(runs)} runs" if len(runs) > 1 else ""))
    try:
        for epoch in range(1, config.epochs + 1):
            active = [r for r in runs if r.active]
            if not active:
                break
            for b in range(steps_per_epoch):
                size = min(config.batch_size, config.samples_per_epoch - b * config.batch_size)
                drawn = [run.sampler.batch(size) for run in active]
                for run in active:
                    run.opt.zero_grad(set_to_none=True)
                losses: list[Tensor] = [torch.zeros(())] * len(active)
                # runs whose prompts are of similar length share a forward (little padding); each run's vectors
                # get only their own loss's gradient
                for group in width_groups([r.width for r in active], size, GROUP_TOKENS):
                    rows: list[tuple[PromptRunner, int]] = []
                    batch_answers: list[list[int]] = []
                    for k in group:
                        run, (g, local) = active[k], drawn[k]
                        assert g == 0 or len(active) == 1  # several runs: zero-shot, one group
                        rows += [(run.data.runners[g], j) for j in local]
                        batch_answers += [run.answers[run.data.groups[g][j]] for j in local]
                    if len(group) == 1:
                        edits = _grid_edits(active[group[0]].params, layers, positions)
                    else:
                        # each row carries its own run's vector: (rows, d_model) per site
                        edits = [VectorEdit(l, p, torch.cat([active[k].params[i].expand(size, -1) for k in group]))
                                 for i, (l, p) in enumerate(sites)]
                    logits, valid = run_rows(rows, edits, answers=batch_answers)
                    if len(group) == 1:
                        mine = [answer_loss(logits, batch_answers, valid)]
                    else:
                        mine = [answer_loss(logits[j * size:(j + 1) * size], batch_answers[j * size:(j + 1) * size],
                                            valid[j * size:(j + 1) * size]) for j in range(len(group))]
                    for k, loss in zip(group, mine):
                        run = active[k]
                        if not torch.isfinite(loss) or loss.item() > config.max_loss:
                            raise TrainingDivergedError(
                                f"LTV training of task {run.spec.task.name!r} diverged at step {run.step}: "
                                f"loss={loss.item()} (seed {run.spec.seed}, lr={run.sched.get_last_lr()[0]:.3g}); "
                                "try a smaller learning rate"
                            )
                        losses[k] = loss
                    (mine[0] if len(mine) == 1 else cast(Tensor, sum(mine))).backward()
                for run, loss in zip(active, losses):
                    run.opt.step()
                    run.sched.step()
                    run.step += 1
                    # torch types learning rates as float | Tensor; LambdaLR over float lrs keeps floats
                    run.curve.append({"step": run.step, "loss": loss.item(),
                                      "lr": cast(float, run.sched.get_last_lr()[0])})
                bar.update(len(active))
                bar.set_postfix(loss=f"{losses[0].item():.3f}", val=f"{active[0].best_score:.2f}")
            for run in active:
                score = validate(run, epoch)
                if score > run.best_score:
                    run.best_score, run.best, run.best_epoch = score, run.current().clone(), epoch
                    run.best_step, run.stale, run.gained = run.step, 0, True
                elif run.gained or not config.patience_after_gain:
                    run.stale += 1
                    if run.stale >= config.patience:
                        run.active = False
    finally:
        bar.close()
    out = []
    for k, run in enumerate(runs):
        if k not in baselines:
            with torch.no_grad():
                baselines[k] = no_vector_accuracy(evaluate(run.val_set))
        val = list(run.spec.splits.validation)[: config.val_queries]
        majority = majority_rate(val)
        accuracy = run.accuracies[run.best_epoch]
        above, low = learned_rule(accuracy, len(val), baselines[k], majority)
        learned = above and run.best_score > run.start_score
        out.append((LearnedTaskVector(
            vectors=cast(Tensor, run.best).cpu(), layers=layers, positions=positions, model=lm.name,
            task=run.spec.task.name, recipe=config.recipe, seed=run.spec.seed, shots=shots, config=config,
            training=TrainingRecord(
                curve=run.curve, best_val_accuracy=accuracy, steps=run.step, seconds=time.perf_counter() - start,
                start_val_accuracy=run.accuracies[0], val_metric=run.site.metric, best_val_score=run.best_score,
                start_val_score=run.start_score, steps_to_best=run.best_step, trained=learned,
                stream_rms=run.site.rms, effective_lr=run.effective_lr,
                effective_init=tuple(config.init_range * s for s in run.site.init), learned=learned,
                no_vector_val_accuracy=baselines[k], majority_val_rate=majority, val_accuracy_low=low,
                val_n=len(val),
            ),
        ), baselines[k]))
    return out


def step_scales(
    config: TrainConfig, lm: LoadedModel, task: Task, train: Sequence[Example], layers: Sequence[int],
    positions: Sequence[int], *, site_rms: Sequence[float] | None = None,
) -> tuple[float, ...]:
    """Per (layer, position) site, layer-major: what ``config.lr`` is multiplied by to give each vector's peak
    learning rate, ``rms_site ** (1 - w) * rms_last ** w / n ** e`` for a stream-relative config
    (``w = config.lr_final_stream_weight``; ``rms_last`` the stream entering the last block at the same position,
    both :func:`~ltvlib.stream_scale.site_stream_scale` with ``config.lr_stream_statistic``, measured by the same
    cached forward; ``n`` the number of sites and ``e = config.lr_vector_count_exponent``), ``1 / n ** e`` for an
    absolute one (nothing measured). ``site_rms``: the sites' RMS when the caller has it already."""
    n = len(layers) * len(positions)
    share = 1.0 / n ** config.lr_vector_count_exponent
    if not config.relative_to_stream:
        return (share,) * n
    stat, w = config.lr_stream_statistic, config.lr_final_stream_weight
    if site_rms is not None and stat == "rms":
        site = tuple(site_rms)
    else:
        site = site_stream_scale(lm, task, train, layers, positions, statistic=stat)
    if w == 0.0:
        return tuple(s * share for s in site)
    last = site_stream_scale(lm, task, train, [lm.n_layers - 1] * len(layers), positions, statistic=stat)
    return tuple(s ** (1 - w) * t ** w * share for s, t in zip(site, last))


def validation_metric(config: TrainConfig, task: Task) -> str:
    """The score early stopping compares: ``config.early_stopping``, with ``"auto"`` resolved to balanced
    accuracy for classification tasks and accuracy for generation tasks."""
    if config.early_stopping != "auto":
        return config.early_stopping
    return "balanced_accuracy" if task.kind == "classification" else "accuracy"


def cached_ltv(
    lm: LoadedModel,
    task: Task | str,
    *,
    layers: Sequence[int] | None = None,
    positions: Sequence[int] = (-1,),
    shots: int = 0,
    recipe: str | TrainConfig = "fast",
    seed: int = 0,
    n_train: int = 600,
    n_val: int = 400,
    progress: bool = True,
) -> LearnedTaskVector:
    """Deprecated: ``train_ltv(..., cache=True)`` (the same cache entries); emits a ``DeprecationWarning``."""
    warnings.warn("cached_ltv is deprecated: use train_ltv(..., cache=True)", DeprecationWarning, stacklevel=2)
    return train_ltv(lm, task, layers=layers, positions=positions, shots=shots, recipe=recipe, seed=seed,
                     n_train=n_train, n_val=n_val, cache=True, progress=progress)


def absolute_recipe(
    config: TrainConfig, rms: float = FAST_REFERENCE_RMS, last_rms: float = FAST_REFERENCE_LAST_RMS, *,
    median: float = FAST_REFERENCE_MEDIAN, last_median: float = FAST_REFERENCE_LAST_MEDIAN,
) -> TrainConfig:
    """A stream-relative ``config`` as the absolute numbers it takes at a site whose stream has RMS ``rms`` (typical
    coordinate ``median``) in a model whose stream entering the last block has RMS ``last_rms`` (typical coordinate
    ``last_median``); defaults: SmolLM2-135M's middle and last layers, so ``absolute_recipe(FAST_RECIPE)`` has lr
    ``0.9 / 6.15 * 29.0 = 4.24`` and init 0.1. The learning rate blends the site's and the last block's as
    :func:`step_scales` does, by the config's ``lr_stream_statistic``; the initial range follows ``rms``; the share
    among vectors (``lr_vector_count_exponent``) is kept, as it applies to absolute configs too. An absolute config
    is returned as it is. For trainers that do not measure the stream (e.g. the PEFT comparison's)."""
    if not config.relative_to_stream:
        return config
    w = config.lr_final_stream_weight
    site, last = (rms, last_rms) if config.lr_stream_statistic == "rms" else (median, last_median)
    return replace(config, lr=config.lr * site ** (1 - w) * last ** w, init_range=config.init_range * rms,
                   relative_to_stream=False, lr_final_stream_weight=0.0, lr_stream_statistic="rms")


def with_config(config: TrainConfig, **changes: Any) -> TrainConfig:
    """A copy of ``config`` with some fields changed (e.g. ``epochs`` for a smoke profile)."""
    return replace(config, **changes)
