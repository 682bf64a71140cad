"""What a book run costs before it runs: ``python -m ltvlib.book plan --model M --profile P``.

From the model's config alone (no weights; :mod:`ltvlib.flops`) and the book's own plans (:mod:`ltvlib.study.plans`:
per chapter its tasks, seeds, layers and sizes; the LTV recipes of :mod:`ltvlib.ltv`: steps, batch sizes, prefix
caching), it counts per chapter the tokens the chapter runs forward and backward, their FLOPs, the GPU memory a
run needs and the GPU-hours on a named GPU at a stated utilisation. Prompt lengths are counted with the model's
own tokenizer when its ``tokenizer.json`` is on this machine, else with SmolLM2's (Llama 3's counts are within a
few per cent on these English prompts).

How one LTV training is counted (the unit most chapters repeat), as :func:`ltvlib.ltv.train_ltv` runs it:

- ``fast`` recipe (prefix caching): the stream's size at the sites (the first 32 training prompts in one padded
  batch, once per task, positions and statistic in the whole book: it is cached on disk);
  each training prompt with its teacher-forced answer tokens and each validation prompt once in full, no
  gradient (once per chapter, task, prompt kind and tail: later vectors of the chapter reuse them unless they enter
  an earlier block than the prompts' cache keeps, see :class:`LTVCounter`); a small task counts the queries its
  split holds (:func:`split_sizes`); the validation prompts once more without a
  vector (the run's baseline, from the first block the validation prompts' cache keeps). Then each step runs
  ``batch`` rows of the tail (the prompt from its earliest injected position, the last one unless the vector sits
  elsewhere, and the answer tokens, padded to the batch's longest, attending the batch's longest prefix) through
  blocks ``layer..L-1``, forward and backward; each validation (before the first epoch and after each) runs the
  validation prompts' tails through the same blocks.
- ``paper`` recipe (the released one: batch 1, full forwards): every step runs the whole prompt and answer
  through every block, and backward through blocks ``layer..L-1``; each validation and the baseline run every
  validation prompt in full.
- Steps are the schedule's maximum (``epochs x ceil(samples / batch)``) and one attempt: early stopping only ends
  a run sooner; a run that does not learn is retried (at most ``retries_without_progress`` times), which repeats
  its steps and validations. :func:`ltv_training_cost` takes the steps, validations and attempts a run actually
  made, which is what the measured check (``tests/test_plan.py``) uses.
- Evaluation: each test prompt (at most as many as the task's test split holds) once in full per (task, prompt
  kind), then the last position through blocks
  ``layer..L-1`` per vector evaluated; ICL prompts carry their k demonstrations.

FLOPs are counted as ``torch.utils.flop_counter`` counts them (:mod:`ltvlib.flops`: matrix products, attention,
the unembedding at every position whose logits are computed; backward = activation gradients only, about 1x the
forward of the blocks above the vector). The other chapters' measurements (extraction, head ablation, linearity
fits, chapter 06's transfer and composition scores, chapter 07's behaviour scores and greedy answers) are counted
the same way from their plan sizes and their prompts' lengths. Chapter 08 counts what it computes on this model
that no earlier chapter did; ``--second-models`` adds a row for each of its other models, where nothing is cached.
Every trained vector is counted once, in the first chapter (in run order) that trains it: later chapters read it
from the cache.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..flops import SHAPE_ALIASES, Cost, Shape, forward, full, model_shape
from ..forward import DEFAULT_BATCH_TOKENS, PREFILL_BATCH_TOKENS, token_batches

GPUS: dict[str, tuple[float, float, str]] = {
    "h100": (989e12, 80, "NVIDIA H100 SXM, bf16 dense tensor peak 989 TFLOP/s, 80 GB"),
    "h200": (989e12, 141, "NVIDIA H200 SXM, bf16 dense tensor peak 989 TFLOP/s, 141 GB"),
    "a100": (312e12, 80, "NVIDIA A100 SXM 80GB, bf16 dense tensor peak 312 TFLOP/s"),
    "l40s": (362e12, 48, "NVIDIA L40S, bf16 dense tensor peak 362 TFLOP/s, 48 GB"),
}
"""GPU name -> (bf16 dense peak FLOP/s, memory in GB, description)."""

RMS_PROMPTS = 32
"""Training prompts the fast recipe's stream RMS is measured on (:data:`ltvlib.stream_scale.RMS_PROMPTS`)."""

LENGTH_SAMPLE = 200
"""Training examples of each task whose prompts are tokenised for the lengths."""


# ---------------------------------------------------------------------------------------------------------------
# prompt lengths

Count = Callable[[str], int]


def tokenizer_file(model: str) -> Path | None:
    """The ``tokenizer.json`` of ``model`` on this machine (a registry model's folder in the cache, a local
    folder, or the local hub cache), else SmolLM2's when it is here, else None."""
    from ..cache import cache_root

    key = SHAPE_ALIASES.get(model, model)
    for candidate in (cache_root() / "models" / key / "tokenizer.json", Path(model).expanduser() / "tokenizer.json"):
        if candidate.is_file():
            return candidate
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "tokenizer.json")
    except ValueError:  # not a repository id
        found = None
    if isinstance(found, str):
        return Path(found)
    smol = cache_root() / "models" / "smollm2-135m" / "tokenizer.json"
    return smol if smol.is_file() else None


@cache
def file_counter(path: Path | None) -> tuple[Count, int]:
    """Tokens of a text without special tokens, by the ``tokenizers`` library (no transformers import), and the
    special tokens it puts before a text; without a file, four characters make a token and none is special."""
    if path is None:
        return (lambda text: max(1, round(len(text) / 4))), 0
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    return (lambda text: len(tok.encode(text, add_special_tokens=False).ids)), len(tok.encode("").ids)


def tokenizer_counter(tokenizer: Any) -> tuple[Count, int]:
    """A transformers tokenizer (a loaded model's) as :func:`file_counter` gives one."""
    return (lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)), len(tokenizer("").input_ids)


@dataclass(frozen=True)
class Lengths:
    """Tokens of a task's zero-shot queries, answers and demonstrations (one each, with its separator), per
    example, in a sample of the task's examples, and the special tokens the tokenizer puts before a prompt (a
    BOS token: one per prompt, kept by the prompt runners as a prefix shared by their rows)."""

    queries: tuple[int, ...]
    answers: tuple[int, ...]
    demos: tuple[int, ...]
    special: int = 0
    test_size: int | None = None
    """The test queries the task's split holds (None: as many as asked for)."""

    def at_most(self, n_test: int) -> int:
        """``n_test`` test queries, or as many as the split holds where it holds fewer."""
        return n_test if self.test_size is None else min(n_test, self.test_size)

    @property
    def query(self) -> float:
        return statistics.fmean(self.queries)

    @property
    def answer(self) -> float:
        return statistics.fmean(self.answers)

    @property
    def demo(self) -> float:
        return statistics.fmean(self.demos)

    def shared(self, shots: int = 0) -> float:
        """Tokens before every query of a prompt with ``shots`` demonstrations: special tokens and the block."""
        return self.special + shots * self.demo

    def prompt(self, shots: int = 0) -> float:
        return self.shared(shots) + self.query

    def tails(self, positions: Sequence[int] = (-1,), shots: int = 0) -> tuple[int, ...]:
        """Per example, the prompt tokens a vector at ``positions`` makes a runner recompute: from the earliest
        injected position to the prompt's end (:class:`ltvlib.forward.PositionTail`; a non-negative position
        counts from the first token, special tokens and demonstrations included; a negative one from the end)."""
        shared = round(self.shared(shots))
        return tuple(max(max(shared + q - p if p >= 0 else -p for p in positions), 1) for q in self.queries)

    def tail(self, positions: Sequence[int] = (-1,), shots: int = 0) -> float:
        """The mean of :meth:`tails`."""
        return statistics.fmean(self.tails(positions, shots))

    @staticmethod
    def batch_max(values: Sequence[int], rows: int) -> float:
        """The expected longest of ``rows`` values drawn from ``values``: a batch's padded length."""
        ordered, m = sorted(values), len(values)
        return sum(v * ((k / m) ** rows - ((k - 1) / m) ** rows) for k, v in enumerate(ordered, 1))

    @classmethod
    def of(cls, task: Any, examples: Sequence[Any], count: Count, special: int = 0,
           demos: Sequence[Any] | None = None) -> Lengths:
        """The lengths of ``examples`` of ``task`` (a :class:`~ltvlib.tasks.Task`) as ``count`` tokenises them
        (without special tokens; ``special`` of them before each prompt), with ``demos`` as the demonstrations
        (default: ``examples`` themselves)."""
        return cls(tuple(count(task.format_query(e.input)) for e in examples),
                   tuple(count(task.format_answer(e.output)) for e in examples),
                   tuple(count(task.format_demo(e) + task.separator) for e in (examples if demos is None else demos)),
                   special)


def batched(shape: Shape, lengths: Lengths, rows: int, *, answers: bool, max_rows: int, max_tokens: int,
            shared: float = 0.0, logits: float = 1) -> Cost:
    """``rows`` prompts (each with its teacher-forced answer tokens but the last when ``answers``) run once in
    full, no gradient, cut into batches as the prompt runners cut them: sorted by length, at most ``max_rows``
    rows and ``max_tokens`` padded tokens a batch (:func:`ltvlib.forward.token_batches`), each batch padded to
    its longest prompt plus its longest answer. The prompts are the sample's, repeated when ``rows`` exceeds it;
    ``shared`` tokens before every row (kept once per runner) are attended, not recomputed."""
    pairs = [(lengths.queries[i % len(lengths.queries)], lengths.answers[i % len(lengths.queries)] if answers else 1)
             for i in range(rows)]
    pairs.sort()
    c = Cost()
    for batch in token_batches(range(rows), [q + a for q, a in pairs], max_rows, max_tokens):
        width = max(pairs[i][0] for i in batch) + max(pairs[i][1] for i in batch) - 1
        c.add(forward(shape, len(batch), width, shared + width, logits=logits))
    return c


@cache
def split_sizes(task: str, n_train: int, n_val: int) -> tuple[int, int, int]:
    """The training, validation and test queries of ``task``'s default split when ``n_train`` and ``n_val`` are
    asked for: a small task holds fewer (Capital: 98, 49 and 50 of 600, 200 and the rest)."""
    from ..tasks import load_splits

    s = load_splits(task, seed=0, n_train=n_train, n_val=n_val)
    return len(s.train), len(s.validation), len(s.test)


@cache
def task_lengths(task: str, tokenizer: Path | None = None) -> Lengths:
    """:class:`Lengths` of the first :data:`LENGTH_SAMPLE` training examples of ``task``'s default split, counted
    with the ``tokenizer.json`` at ``tokenizer``."""
    from ..tasks import get_task, load_splits

    t = get_task(task)
    ex = list(load_splits(task, n_train=600, n_val=0).train)[:LENGTH_SAMPLE]
    count, special = file_counter(tokenizer)
    return Lengths.of(t, ex, count, special)


# ---------------------------------------------------------------------------------------------------------------
# costs


def ltv_training_cost(shape: Shape, lengths: Lengths, layer: int, recipe: Any, *, n_train: int, n_val: int,
                      steps: int | None = None, validations: int | None = None, attempts: int = 1, shots: int = 0,
                      prefill: bool = True, rms: bool | None = None, positions: Sequence[int] = (-1,),
                      attempt_steps: Sequence[int] | None = None) -> Cost:
    """One LTV trained with its vectors entering block ``layer`` (the lowest of its layers) at ``positions``
    with ``recipe`` (a :class:`~ltvlib.ltv.TrainConfig`) on prompts of ``lengths``: ``steps`` and
    ``validations`` (per attempt; default: the schedule's maximum) and ``attempts`` (the first run and its
    retries). ``prefill=False`` leaves out the prompts' first passes (paid by an earlier LTV of the same task and
    prompt kind in the process); ``rms=False`` leaves out the stream RMS's passes (cached on disk by an earlier
    LTV of the same task and positions; default: with the prompts' first passes). Every step and validation
    recomputes each prompt's tail from its earliest injected position (:meth:`Lengths.tails`; a training batch is
    padded to its longest tail). ``attempt_steps``: the steps each attempt took (in place of ``steps``,
    ``validations`` and ``attempts``), each with a validation before its first epoch and after each it ran."""
    q, a, shared = lengths.query, lengths.answer, lengths.shared(shots)
    n = shared + q
    per_epoch = math.ceil(recipe.samples_per_epoch / recipe.batch_size)
    steps = recipe.epochs * per_epoch if steps is None else steps
    validations = recipe.epochs + 1 if validations is None else validations
    n_v = min(n_val, recipe.val_queries) if recipe.val_queries else n_val
    b = recipe.batch_size
    c = Cost()
    if recipe.prefix_cache:
        if (prefill if rms is None else rms) and recipe.relative_to_stream:
            # one forward for the RMS (the initial range), another when the step follows another statistic
            passes = 1 + (getattr(recipe, "lr_stream_statistic", "rms") != "rms")
            width = lengths.shared(0) + Lengths.batch_max(lengths.queries, RMS_PROMPTS)  # zero-shot prompts
            c.add(full(shape, 1, width).scaled(RMS_PROMPTS * passes))
        if prefill:
            # each runner's shared prefix (special tokens, demonstration block) once: training and validation
            c.add(full(shape, (recipe.demo_sets if shots else 1) * 2 if shared else 0, shared))
            c.add(batched(shape, lengths, n_train, answers=True, max_rows=32, max_tokens=PREFILL_BATCH_TOKENS,
                          shared=shared))
            c.add(batched(shape, lengths, n_v, answers=False, max_rows=32, max_tokens=PREFILL_BATCH_TOKENS,
                          shared=shared))
        # the baseline: the validation prompts without a vector, from the first block their cache keeps
        c.add(forward(shape, n_v, lengths.tail(positions, shots), n, first=layer))
        a_pad = Lengths.batch_max(lengths.answers, b)
        keys = shared + Lengths.batch_max(lengths.queries, b) - 1 + a_pad
        tail = Lengths.batch_max(lengths.tails(positions, shots), b)

        def attempt(steps: int, validations: int) -> Cost:
            run = forward(shape, steps * b, tail - 1 + a_pad, keys, first=layer, logits=a_pad, grad=True)
            run.peak_tokens = b * (a_pad + keys)
            return run.add(forward(shape, validations * n_v, lengths.tail(positions, shots), n, first=layer))
    else:
        val = batched(shape, lengths, n_v, answers=False, max_rows=64, max_tokens=DEFAULT_BATCH_TOKENS, shared=shared)
        c.add(val)  # the baseline

        def attempt(steps: int, validations: int) -> Cost:
            run = forward(shape, steps * b, n + a - 1, n + a - 1, logits=a)
            # backward through the blocks from the vector's on
            bwd = forward(shape, steps * b, n + a - 1, n + a - 1, first=layer, logits=a, grad=True)
            run.bwd_tokens += bwd.bwd_tokens
            run.bwd_flops += bwd.bwd_flops
            run.peak_tokens = b * 2 * (n + a - 1)
            return run.add(val.scaled(validations))
    if attempt_steps is not None:
        for taken in attempt_steps:
            c.add(attempt(taken, taken // per_epoch + 1))
        return c
    return c.add(attempt(steps, validations).scaled(attempts))


def prompts_cost(shape: Shape, lengths: Lengths, rows: int, shots: int = 0, demo_sets: int | None = None) -> Cost:
    """``rows`` prompts with ``shots`` demonstrations once in full, no gradient: with ``demo_sets`` blocks of
    demonstrations shared by their queries (each block once, its queries attending it), else each prompt with its
    own demonstrations."""
    rows = lengths.at_most(rows)
    if not shots:  # sorted by length, cut and padded as an evaluation set cuts them
        return batched(shape, lengths, rows, answers=False, max_rows=64, max_tokens=DEFAULT_BATCH_TOKENS,
                       shared=lengths.special)
    if not demo_sets:
        return full(shape, rows, lengths.prompt(shots))
    return full(shape, demo_sets, lengths.shared(shots)).add(
        forward(shape, rows, lengths.query, lengths.prompt(shots)))


def eval_cost(shape: Shape, lengths: Lengths, n_test: int, layer: int, n_vectors: int, shots: int = 0,
              prompts: bool = True, demo_sets: int | None = None, positions: Sequence[int] = (-1,)) -> Cost:
    """``n_test`` prompts once in full (``prompts``; :func:`prompts_cost`), then ``n_vectors`` vectors entering
    block ``layer`` at ``positions`` (each prompt's tail from its earliest injected position through blocks
    ``layer..L-1``)."""
    n_test = lengths.at_most(n_test)
    c = prompts_cost(shape, lengths, n_test, shots, demo_sets) if prompts else Cost()
    return c.add(forward(shape, n_test * n_vectors, lengths.tail(positions, shots), lengths.prompt(shots), first=layer))


def vanilla_tv_cost(shape: Shape, lengths: Lengths, config: Any, layers: Sequence[int]) -> Cost:
    """A Vanilla TV extracted (:func:`ltvlib.baselines.vanilla_tv.extract_vanilla_tv`: ``n_contexts x n_dummy``
    ICL prompts of ``shots`` demonstrations and as many zero-shot prompts, in full) and its layer chosen among
    ``layers`` (:func:`~ltvlib.baselines.vanilla_tv.select_layer`: ``n_dev`` zero-shot prompts once in full, then
    their last position from the block after each layer, where the vector replaces the stream)."""
    rows = config.n_contexts * config.n_dummy
    c = full(shape, rows, lengths.prompt(config.shots)).add(full(shape, rows, lengths.prompt(0)))
    c.add(full(shape, config.n_dev, lengths.prompt(0)))
    for layer in layers:
        c.add(forward(shape, config.n_dev, 1, lengths.prompt(0), first=min(layer + 1, shape.n_layers)))
    return c


def function_vector_cost(shape: Shape, lengths: Lengths, config: Any) -> Cost:
    """A function vector extracted (:func:`ltvlib.baselines.function_vector.extract_function_vector`): ``n_mean``
    clean prompts of ``shots`` demonstrations in full (the mean head outputs), ``n_ie`` corrupted ones up to their
    last token, then each corrupted prompt's last token through every block once as it is and once per head
    patched (the indirect effects)."""
    n = lengths.prompt(config.shots)
    c = full(shape, config.n_mean, n)
    c.add(forward(shape, config.n_ie, n - 1, n - 1, logits=0))
    return c.add(forward(shape, config.n_ie * (shape.n_layers * shape.n_heads + 1), 1, n))


LAST_TOKEN_BATCH = 64
"""Rows per batch of :class:`ltvlib.analysis.key_heads.LastTokenRunner` (each batch padded to its longest prompt)."""

OV_EVALUATIONS = 7
"""Test evaluations of :func:`ltvlib.study.ov.ov_experiment`: zero-shot, the LTV and its five replacements."""


def mlp_jvp_cost(shape: Shape, rows: float, layer: int) -> Cost:
    """:func:`ltvlib.analysis.ov.mlp_map` of one vector: a forward-mode derivative of every MLP branch from block
    ``layer`` on at ``rows`` recorded states (about three MLP forwards: the primal and its tangent)."""
    return Cost(fwd_flops=3 * rows * (shape.n_layers - layer) * 2 * 3 * shape.d_model * shape.d_ff)


def key_head_experiment_cost(shape: Shape, lengths: Lengths, n_queries: int, n_test: int, n_random: int) -> Cost:
    """:func:`~ltvlib.study.key_heads.key_head_experiment` of one LTV: its last-token runners (every prompt but its
    last token once, through every block; ``n_queries`` analysis queries and ``n_test`` test queries, batches of
    :data:`LAST_TOKEN_BATCH` padded to their longest), then the last token alone through every block: saliency
    (forward and backward), mean head outputs and attention on the analysis queries; on the test queries the LTV
    alone, zero-shot, and for each of the two head sets (all layers, after the injection layer) zero and mean
    ablation, each also on ``n_random`` random sets."""
    n_test = lengths.at_most(n_test)
    keys = _last_token_keys(lengths)
    c = full(shape, n_test + n_queries, keys - 1, logits=0)
    c.add(forward(shape, n_test * (2 + 2 * (2 + 2 * n_random)), 1, keys))
    c.add(forward(shape, n_queries, 1, keys, grad=True))  # saliency
    return c.add(forward(shape, n_queries * 2, 1, keys))  # mean head outputs, attention


def _last_token_keys(lengths: Lengths) -> float:
    return lengths.special + Lengths.batch_max(lengths.queries, LAST_TOKEN_BATCH)


def ov_key_heads_cost(shape: Shape, lengths: Lengths, layer: int, n_queries: int, n_test: int, n_random: int,
                      n_draws: int) -> Cost:
    """Chapter 04 on one task whose LTV (at block ``layer``, last position) learned: the key-head experiment
    (:func:`key_head_experiment_cost`), then on the same runners :func:`~ltvlib.study.ov.ov_experiment` (norm
    scales, attention and MLP states on the analysis queries, one MLP derivative, :data:`OV_EVALUATIONS` test
    evaluations) and :func:`~ltvlib.study.ov.ov_control_experiment` for each path (OV, MLP) and form (two): the
    LTV and ``n_draws`` random vectors evaluated; the MLP path also records its states and takes a derivative per
    vector."""
    c = key_head_experiment_cost(shape, lengths, n_queries, n_test, n_random)
    keys = _last_token_keys(lengths)
    c.add(forward(shape, lengths.at_most(n_test) * (OV_EVALUATIONS + 4 * (n_draws + 1)), 1, keys))
    c.add(forward(shape, n_queries * (3 + 2), 1, keys))  # the OV experiment's 3, the MLP controls' states 2
    return c.add(mlp_jvp_cost(shape, n_queries, layer).scaled(1 + 2 * (n_draws + 1)))


def shift_probes_cost(shape: Shape, lengths: Lengths, n_queries: int, n_test: int) -> Cost:
    """Chapter 05's two shift probes of a task (:class:`ltvlib.analysis.linearity.ShiftProbe`: ``n_queries``
    fitting queries, ``n_test`` test queries): every prompt but its last token once through every block, padded
    to the probe's longest, then the last token."""
    c = Cost()
    for rows in (n_queries, lengths.at_most(n_test)):
        keys = lengths.special + Lengths.batch_max(lengths.queries, rows)
        c.add(full(shape, rows, keys - 1, logits=0)).add(forward(shape, rows, 1, keys))
    return c


def linear_fit_cost(shape: Shape, lengths: Lengths, config: Any, layer: int, n_draws: int, *, n_queries: int,
                    n_test: int, fit_draws: bool = True, new_probes: bool = True) -> Cost:
    """Chapter 05 at one (task, layer, seed) on probes already built (:func:`shift_probes_cost`):
    :func:`~ltvlib.study.linearity.cached_linearity` and :func:`~ltvlib.study.linearity.cached_linearity_control`
    with ``n_draws`` random vectors (each refitting ``W`` unless ``fit_draws`` is False, as chapter 08 runs it);
    ``new_probes``: the control runs on probes built again after another task's (their queries without a vector
    computed again).

    Single-token rows from block ``layer`` on the fitting probe: the fit (``max(d, ceil(fit_factor d))``
    perturbations, ``n_heldout`` held-out ones, the queries without a vector and with the LTV), the LTV's shift
    again, the homogeneity scales other than 1, additivity (two vectors), and per draw its shift and, with a fit,
    its fit; on the test probe the queries without a vector and with the LTV, in both experiments. And the test
    queries evaluated twice from block 0 (the reconstruction before the final norm, and at the last block's
    input)."""
    d = shape.d_model
    n_fit = max(d, math.ceil(config.fit_factor * d))
    n_test = lengths.at_most(n_test)
    scales = sum(1 for a in config.scales if a != 1)
    fit_keys = lengths.special + Lengths.batch_max(lengths.queries, n_queries)
    test_keys = lengths.special + Lengths.batch_max(lengths.queries, n_test)
    fit_rows = n_fit + config.n_heldout + n_queries * (2 + 1 + scales + 2)
    fit_rows += n_queries * new_probes + n_draws * (n_queries + (n_fit + config.n_heldout + n_queries) * fit_draws)
    c = forward(shape, fit_rows, 1, fit_keys, first=layer)
    c.add(forward(shape, (3 + new_probes) * n_test, 1, test_keys, first=layer))
    # the test queries' final-norm states unembedded: five state sets for accuracy and logit difference each, four
    # for the shift accuracies
    c.add(Cost(fwd_flops=(2 * 5 + 4) * n_test * 2 * shape.d_model * shape.vocab))
    return c.add(eval_cost(shape, lengths, n_test, 0, 2, prompts=False))


class LTVCounter:
    """Counts each LTV a book run trains once (later chapters read it from the cache), each prompt set's first
    passes once per chapter, and each task's stream RMS once per book.

    The prompt store (:mod:`ltvlib.prompt_store`) lives in the chapter's kernel, so every chapter fills it anew
    (:meth:`new_chapter`). Within a chapter an entry is one task's training (and validation) prompts for one tail
    (the injected positions), number of shots, demonstration seed (with shots) and split: a new tail or split
    pays the prompts' first passes again, and so does a vector entering an earlier block than the entry keeps
    (the entry is rebuilt from that block). The stream RMS the fast recipe scales by is cached on disk per task
    and positions, so it is paid once per book. Entries the store evicts under its memory bound are not counted
    (that depends on the machine's memory): the count is a lower bound there."""

    def __init__(self, shape: Shape, lengths: Callable[[str], Lengths], run_sizes: Any) -> None:
        self.shape, self.lengths, self.run_sizes = shape, lengths, run_sizes
        self.trained: set[tuple] = set()
        self.prefilled: dict[tuple, int] = {}  # prompt-store entry -> the first block it keeps
        self.rms: set[tuple] = set()

    def new_chapter(self) -> None:
        """A new kernel: an empty prompt store (the trained vectors and the stream RMS stay cached on disk)."""
        self.prefilled.clear()

    def __call__(self, c: Cost, task: str, layer: int, seed: int, tag: str = "", *, recipe: Any = None,
                 n_train: int | None = None, n_val: int | None = None, shots: int = 0,
                 positions: Sequence[int] = (-1,), data: str = "") -> None:
        """Add to ``c`` the LTV of ``task`` at ``layer`` (its lowest block; ``tag`` tells apart LTVs the key would
        otherwise merge) unless it was counted before. ``data`` names training data other than the task's own
        split (chapter 07's directions): its prompts and stream statistic are counted apart."""
        from ..forward import tail_needed

        key = (task, layer, seed, tag, shots, tuple(positions))
        if key in self.trained:
            return
        self.trained.add(key)
        rs = self.run_sizes
        if n_train is None and n_val is None:  # the task's default split: a small task holds fewer queries
            n_train, n_val, _ = split_sizes(task, rs.n_train, rs.n_val)
        n_train, n_val = n_train or rs.n_train, n_val or rs.n_val
        recipe = recipe or rs.recipe
        # runs on the same data that differ only in seed (zero-shot), learning rate or tag share the store's prompts
        entry = (task, data, shots, seed if shots else None, tail_needed(positions), n_train, n_val,
                 recipe.val_queries)
        kept = self.prefilled.get(entry)
        prefill = kept is None or layer < kept
        if prefill:
            self.prefilled[entry] = layer
        # the stream statistic is cached on disk by the first training prompts, whatever the run
        rms = (task, data, tuple(positions), n_train, getattr(recipe, "lr_stream_statistic", "rms"))
        c.add(ltv_training_cost(self.shape, self.lengths(task), layer, recipe, n_train=n_train,
                                n_val=n_val, shots=shots, prefill=prefill, rms=rms not in self.rms,
                                positions=positions))
        self.rms.add(rms)


# ---------------------------------------------------------------------------------------------------------------
# the chapters


CHAPTERS = ("00", "01", "02", "03", "04", "05", "06", "07", "08")


def chapter_costs(shape: Shape, profile: str, *, tokenizer: Path | None = None) -> dict[str, Cost]:
    """Per chapter (in the book's run order), what it computes at ``profile`` on a model of ``shape``, its prompts
    counted with the ``tokenizer.json`` at ``tokenizer`` (:func:`tokenizer_file`)."""
    from ..study import plans as P
    from ..study.flexibility import late_settings, table1_settings

    L, mid = shape.n_layers, shape.n_layers // 2
    prof = P.get_profile(profile)
    rs = P.run_sizes(prof)
    n_test = rs.n_test or 500  # None = whole test split: the paper's are about 500 queries per task
    n_icl = rs.n_test_icl or n_test
    done: set[tuple] = set()  # extractions and test-prompt passes already counted: ("extract", task), ("prompts", ...)
    out: dict[str, Cost] = {}

    def lengths(task: str) -> Lengths:
        return dataclasses.replace(task_lengths(task, tokenizer), test_size=split_sizes(task, rs.n_train, rs.n_val)[2])

    ltv = LTVCounter(shape, lengths, rs)

    # 00: headline LTVs at the middle layer; zero-shot, ICL and LTV accuracy on every task
    c = Cost()
    ltv.new_chapter()
    ov = P.overview_plan(profile)
    for t in ov.ltv_tasks:
        for s in ov.seeds:
            ltv(c, t, mid, s)
    for t in ov.tasks:
        c.add(eval_cost(shape, lengths(t), n_test, mid, len(ov.seeds)))
        for k in ov.icl_shots:
            c.add(prompts_cost(shape, lengths(t), n_icl, k, rs.icl_demo_sets))
        done.update({("prompts", t, 0), *(("prompts", t, k) for k in ov.icl_shots)})
    out["00"] = c

    # 01: LTV layer sweeps, extracted vectors (task vector, function vector) and their curves
    c = Cost()
    ltv.new_chapter()
    ex = P.extracted_plan(profile, n_layers=L)
    for t, layers in ex.ltv_layers.items():
        for layer in layers:
            ltv(c, t, layer, ex.seeds[0])
    tv, fv = ex.extraction.vanilla_tv, ex.extraction.function_vector
    for t in ex.tasks:
        ln = lengths(t)
        c.add(vanilla_tv_cost(shape, ln, tv, ex.layers)).add(function_vector_cost(shape, ln, fv))
        done.add(("extract", t))
        for layer in ex.layers:
            c.add(eval_cost(shape, lengths(t), n_test, layer, 2 + (layer in ex.ltv_layers[t]), prompts=layer == ex.layers[0]))
    out["01"] = c

    # 02: Table 1's settings (positions, layers, ICL) and the late layers, each on its tasks and seeds
    c = Cost()
    ltv.new_chapter()
    fx = P.flexibility_plan(profile)
    fs = fx.sizes
    late = late_settings(L, fs.n_late) if fs.n_late != 0 else []
    for setting in table1_settings(L, layer_steps=fs.layer_steps, icl_shots=fs.icl_shots) + late:
        tasks = fs.tasks_of(setting.name, fx.tasks)
        first, shots = min(setting.layers), setting.shots
        seeds = fx.base_seeds if setting.name == "baseline" else fx.other_seeds
        for t in tasks:
            for s in seeds:
                ltv(c, t, first, s, tag=setting.name if setting.name != "baseline" else "", shots=shots,
                    positions=setting.positions)
            # the prompt alone, the LTVs (and on k-shot prompts the baseline's zero-shot-trained ones) and the
            # three extracted vectors moved there
            n_vectors = 1 + len(seeds) + (len(fx.base_seeds) if shots else 0) + 3
            c.add(eval_cost(shape, lengths(t), fx.n_test or n_test, first, n_vectors, shots=shots,
                            demo_sets=rs.icl_demo_sets, positions=setting.positions))
    out["02"] = c

    # 03: the race to convergence against parameter-efficient fine-tuning
    ltv.new_chapter()
    out["03"] = race_cost(shape, profile, lengths, ltv)

    # 04: each task's middle-layer LTV (chapter 00's), its OV reconstructions and controls, key heads and their
    # ablation; the chapter measures the tasks whose LTV learned, which the plan cannot know: all are counted
    c = Cost()
    ltv.new_chapter()
    kh = P.ov_key_heads_plan(profile)
    for t in (*kh.label_tasks, *kh.open_tasks):
        ltv(c, t, mid, 0)
        n_queries = min(kh.n_queries, split_sizes(t, rs.n_train, rs.n_val)[1])
        c.add(ov_key_heads_cost(shape, lengths(t), mid, n_queries, n_test, kh.n_random, kh.n_draws))
    out["04"] = c

    # 05: linearity: fits on held-out queries at each scale, random-vector controls
    c = Cost()
    ltv.new_chapter()
    lp = P.linearity_chapter_plan(profile, n_layers=L)
    lc = lp.config
    for t, layers in lp.layers.items():
        # the probes are built for the fits, again for the controls (after the other tasks'), and once more for
        # a task with other seeds; the test prompts are passed once
        nq = min(lc.n_queries, split_sizes(t, rs.n_train, rs.n_val)[0])
        seeds = lp.seeds(t)
        c.add(shift_probes_cost(shape, lengths(t), nq, n_test).scaled(2 + (len(seeds) > 1)))
        c.add(prompts_cost(shape, lengths(t), n_test))
        for layer in layers:
            for i, s in enumerate(seeds):
                ltv(c, t, layer, s)
                c.add(linear_fit_cost(shape, lengths(t), lc, layer, lp.n_draws, n_test=n_test, n_queries=nq,
                                      new_probes=i == 0))
    out["05"] = c

    # 06: LTVs across seeds and tasks, transfer between tasks; composition
    c = Cost()
    ltv.new_chapter()
    gp = P.generalization_plan(profile)
    gs = gp.sizes
    for t in gs.tasks:
        for s in gs.seeds_of(t):
            ltv(c, t, mid, s)
    c.add(transfer_cost(shape, gs, lengths, n_test, mid))
    c.add(composition_cost(shape, gp.composition, rs, ltv, tokenizer))
    out["06"] = c

    # 07: the myopic-reward behaviour task: both directions' LTVs and extracted vectors, every method's scores
    ltv.new_chapter()
    out["07"] = myopic_cost(shape, profile, lengths, ltv, tokenizer=tokenizer)

    # 08: chapters 01, 04 and 05's measurements on this model with chapter 08's sizes; what an earlier chapter
    # computed on this model is read from the cache (the sets above), so only the rest counts here
    ltv.new_chapter()
    out["08"] = across_models_cost(shape, profile, lengths, ltv, done)
    return out


def transfer_cost(shape: Shape, sizes: Any, lengths: Callable[[str], Lengths], n_test: int, layer: int) -> Cost:
    """Chapter 06's transfer matrix (:func:`ltvlib.study.generalization.transfer_matrix`) with ``sizes`` (a
    :class:`~ltvlib.study.sizes.GeneralizationSizes`): per target task its test prompts once in full (the chapter
    keeps them for every vector it evaluates there), then the last position from block ``layer`` for every vector
    evaluated on it (each trained seed of the target's own task, the transfer seeds of every other task) and, on
    RTE, the random vectors of the SNLI vector's norm."""
    c = Cost()
    for target in sizes.tasks:
        n_vectors = sum(len(sizes.seeds_of(s) if s == target else sizes.transfer_seeds) for s in sizes.tasks)
        if target == "rte" and "snli" in sizes.tasks:
            n_vectors += sizes.control_draws
        c.add(eval_cost(shape, lengths(target), n_test, layer, n_vectors))
    return c


@dataclass(frozen=True)
class FormLengths:
    """Tokens of the composed task's prompts (:class:`Lengths` of its test queries, with its training examples as
    demonstrations) and of every teacher-forced answer row the composition scores run: one per test query, form
    and spelling, in :class:`ltvlib.study.composition.FormScorer`'s order."""

    prompts: Lengths
    rows: tuple[tuple[int, int], ...]
    """(query index, answer tokens) per answer row."""


def form_lengths(data: Any, count: Count, special: int = 0) -> FormLengths:
    """:class:`FormLengths` of the composed task's splits in ``data`` (a
    :class:`~ltvlib.study.composition.CompositionData`) as ``count`` tokenises them (``special`` tokens before
    each prompt)."""
    from ..tasks import get_task
    from .composition import COMPOSED, FORMS

    task = get_task(COMPOSED)
    test = list(data.test)
    prompts = Lengths.of(task, test, count, special, demos=data.splits[COMPOSED].train)
    rows = tuple((i, max(1, count(task.format_answer(spelling))))
                 for i, forms in enumerate(data.forms) for form in FORMS for spelling in forms[form])
    return FormLengths(prompts, rows)


FORM_BATCH = 128
"""Answer rows per forward of the composition scores (``FormScorer.form_logprobs``' ``batch_size``)."""


def form_score_cost(shape: Shape, fl: FormLengths, *, shots: int, vector_scores: int, layer: int) -> Cost:
    """One :class:`ltvlib.study.composition.FormScorer` (test prompts with ``shots`` demonstrations each): its prompts
    once in full, then per score the last prompt token and every answer row (teacher-forced, :data:`FORM_BATCH`
    rows a forward, padded to the forward's longest answer) attending the cached prompt. Without a vector a score
    runs every block; ``vector_scores`` scores with a vector entering block ``layer`` run blocks ``layer..L-1``,
    after one pass through every block that keeps the tokens' states below it (the first such score)."""
    n = len(fl.prompts.queries)
    prompt = fl.prompts.prompt(shots)
    width = fl.prompts.special + shots * fl.prompts.demo + max(fl.prompts.queries)  # one padded batch
    c = forward(shape, n, width, width)

    def score(first: int, logits: bool) -> Cost:
        s = forward(shape, n, 1, prompt, first=first)
        for start in range(0, len(fl.rows), FORM_BATCH):
            chunk = fl.rows[start : start + FORM_BATCH]
            longest = max(a for _, a in chunk)
            s.add(forward(shape, len(chunk), longest, prompt + longest, first=first, logits=longest if logits else 1))
        return s

    c.add(score(0, True))  # the score without a vector
    if vector_scores:
        c.add(score(0, False))  # the states below the vector's block, kept
        c.add(score(layer, True).scaled(vector_scores))
    return c


def composition_cost(shape: Shape, sizes: Any, run_sizes: Any, ltv: LTVCounter, tokenizer: Path | None) -> Cost:
    """Chapter 06's composition (:func:`ltvlib.study.composition.composition_result` per seed of ``sizes``): the
    three middle-layer LTVs on the cleaned splits, then the composed test queries scored zero-shot, with each ICL
    shot count, and with every vector (each component LTV, their sum, a random vector of the sum's norm, the
    composed task's LTV and each pair of the scale grid)."""
    from .composition import TASKS, composition_data

    mid = shape.n_layers // 2
    data = composition_data(run_sizes, test_pairs=sizes.test_pairs)
    fl = form_lengths(data, *file_counter(tokenizer))
    c = Cost()
    for s in sizes.seeds:
        for t in TASKS:
            split = data.splits[t]
            ltv(c, t, mid, s, tag="composition", n_train=len(split.train), n_val=len(split.validation))
        # composition_result's vectors: each component LTV, their sum, the random control, the composed LTV
        c.add(form_score_cost(shape, fl, shots=0, vector_scores=5 + len(sizes.scales) ** 2, layer=mid))
        for k in sizes.icl_shots:
            c.add(form_score_cost(shape, fl, shots=k, vector_scores=0, layer=mid))
    return c


RACE_GRID = 3
"""Learning rates each method of chapter 03 tries with its first seed (:data:`ltvlib.study.peft_compare.LR_GRID`)."""


def race_field(profile: str, mid: int) -> dict[str, tuple[str, int, int]]:
    """Chapter 03's field in ``profile`` as the chapter races it: method -> (kind, the first block its gradients
    or changes reach, virtual tokens added to every prompt). A prefix trained at one layer still takes its
    backward pass through every block: its change enters the prefix encoder's output, which every block reads."""
    field = {"ltv": ("ltv", mid, 0), f"prefix-1-L{mid}": ("prefix", 0, 0), f"lora-r1-o{mid}": ("lora", mid, 0)}
    if profile in ("cpu", "paper"):
        field["prefix-1"] = ("prefix", 0, 0)
    if profile == "paper":  # prompt tuning and each adapter's default setting
        field |= {"prompt-1": ("prompt", 0, 1), "lora-r8-qv": ("lora", 0, 0), "prefix-20": ("prefix", 0, 0),
                  "prompt-20": ("prompt", 0, 20)}
    return field


def adapter_run_cost(shape: Shape, lengths: Lengths, first: int, virtual: int, schedule: Any, *, n_val: int,
                     n_test: int, eval_batch: int, steps: int | None = None, validations: int | None = None) -> Cost:
    """One adapter run of the race to its cap, as ``peft`` runs it: every step ``batch`` prompts with their answers
    (padded to the batch's longest) forward through every block (the adapter's model has no prompt cache) and
    backward through blocks ``first..L-1`` (the first block the adapter changes: nothing below needs a gradient); a
    validation before the first epoch and after each, then the test prompts, each set in full in batches of
    ``eval_batch`` in the split's order; ``virtual`` prompt-tuning tokens lengthen every prompt. ``steps`` and
    ``validations``: those the run took (default: the cap's)."""
    b = schedule.batch_size
    steps = schedule.epochs * math.ceil(schedule.samples_per_epoch / b) if steps is None else steps
    validations = schedule.epochs + 1 if validations is None else validations
    a_pad = Lengths.batch_max(lengths.answers, b)
    width = lengths.special + virtual + Lengths.batch_max(lengths.queries, b) + a_pad - 1
    c = forward(shape, steps * b, width, width, logits=a_pad)
    bwd = forward(shape, steps * b, width, width, first=first, logits=a_pad, grad=True)
    c.bwd_tokens, c.bwd_flops, c.peak_tokens = bwd.bwd_tokens, bwd.bwd_flops, b * width
    return c.add(in_batches(shape, lengths, n_val, eval_batch, virtual).scaled(validations)).add(
        in_batches(shape, lengths, n_test, eval_batch, virtual))


def in_batches(shape: Shape, lengths: Lengths, rows: int, batch: int, virtual: int = 0) -> Cost:
    """``rows`` prompts in full, no gradient, in batches of ``batch`` in the split's order (unsorted), each padded
    to its longest prompt; ``virtual`` tokens before every prompt."""
    c = Cost()
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        width = lengths.special + virtual + Lengths.batch_max(lengths.queries, n)
        c.add(forward(shape, n, width, width))
    return c


def memory_probe_cost(shape: Shape, lengths: Lengths, first: int, virtual: int, schedule: Any, *,
                      eval_batch: int) -> Cost:
    """Chapter 03's peak-memory measurement of one method on a CPU, in a fresh process: one prompt, one batch of
    ``eval_batch`` test prompts, then two training steps (:func:`ltvlib.analysis.peft_compare.measure_memory_here`)."""
    b = schedule.batch_size
    probe = dataclasses.replace(schedule, epochs=1, samples_per_epoch=2 * b)
    c = in_batches(shape, lengths, 1, 1, virtual).add(in_batches(shape, lengths, eval_batch, eval_batch, virtual))
    return c.add(adapter_run_cost(shape, lengths, first, virtual, probe, n_val=0, n_test=0, eval_batch=eval_batch))


def race_task_cost(shape: Shape, lengths: Lengths, task: str, sizes: Any, recipe: Any,
                   field: dict[str, tuple[str, int, int]], n_seeds: int, ltv: LTVCounter, *,
                   memory: bool = False) -> Cost:
    """Chapter 03's race on one task (:func:`ltvlib.study.peft_compare.tuned_race`): every method of ``field``
    (:func:`race_field`) trains :data:`RACE_GRID` learning rates with the first seed and the chosen one with each
    of the other ``n_seeds - 1``, each run to the cap of ``sizes`` (a
    :class:`~ltvlib.analysis.configs.CompareSizes`; early stopping only ends a run sooner). The LTV's runs by the
    library's trainer with ``recipe`` (``ltv``; the runs share the prompt store's prompts), each then tested on
    the race's test queries in a fresh evaluation set; the adapters' by :func:`adapter_run_cost`; with ``memory``, each method's
    fresh-process memory measurement (:func:`memory_probe_cost`)."""
    n_runs = RACE_GRID + n_seeds - 1
    n_test = lengths.at_most(sizes.n_test or 500)
    c = Cost()
    for kind, first, virtual in field.values():
        if kind == "ltv":
            for run in range(n_runs):
                ltv(c, task, first, run, tag=f"race-{run}", recipe=recipe, n_train=sizes.n_train, n_val=sizes.n_val)
            # each run tests on a fresh evaluation set: the test prompts' first pass again
            c.add(eval_cost(shape, lengths, n_test, first, 1).scaled(n_runs))
        else:
            c.add(adapter_run_cost(shape, lengths, first, virtual, sizes.schedule, n_val=sizes.n_val, n_test=n_test,
                                   eval_batch=sizes.eval_batch).scaled(n_runs))
        if memory:
            c.add(memory_probe_cost(shape, lengths, first, virtual, sizes.schedule,
                                    eval_batch=sizes.eval_batch))
    return c


def race_cost(shape: Shape, profile: str, lengths: Callable[[str], Lengths], ltv: LTVCounter) -> Cost:
    """Chapter 03 as it runs (``chapters/03_peft.py``): :func:`race_task_cost` on each task of the profile's plan,
    with the method field of :func:`race_field`, and each method's memory probe (run on a CPU only; counted on
    every device, a few forwards)."""
    from ..ltv import with_config
    from ..study import plans as P

    plan = P.peft_plan(profile)
    sched = plan.sizes.schedule
    recipe = with_config(plan.run_sizes.recipe, batch_size=sched.batch_size, epochs=sched.epochs,
                         samples_per_epoch=sched.samples_per_epoch)
    field = race_field(profile, shape.n_layers // 2)
    c = Cost()
    for t in plan.tasks:
        c.add(race_task_cost(shape, lengths(t), t, plan.sizes, recipe, field, len(plan.seeds), ltv, memory=True))
    return c


AB_BATCH = 64
"""Prompts per forward of chapter 07's letter scores (:func:`ltvlib.study.myopic.score_ab`'s ``batch_size``)."""

TEXT_BATCH = 32
"""Prompts per forward of chapter 07's option-text scores and greedy answers
(:func:`ltvlib.study.myopic.score_option_text`' and :func:`~ltvlib.study.myopic.greedy_option_answers`'
``batch_size``)."""


def myopic_lengths_of(task: str, test: Sequence[Any], pool: Sequence[Any], count: Count,
                      special: int = 0) -> tuple[Lengths, Lengths, Lengths]:
    """:class:`Lengths` of chapter 07's held-out items ``test`` (in the order they are scored) as ``count`` tokenises
    them, with demonstrations from ``pool`` (the task's training items): the A/B prompts (answer: the letter), and
    the option-text prompts (:func:`ltvlib.study.myopic.text_task`'s template, the options listed in their given
    order) with the text of option ``(A)`` and of option ``(B)`` as the answer (demonstrations rewritten by
    :func:`~ltvlib.study.myopic.text_demos`)."""
    from ..tasks import get_task
    from .myopic import layout_orders, parse_item, text_demos, text_query, text_task

    t, tt = get_task(task), text_task(task)
    ab = Lengths.of(t, test, count, special, demos=pool)
    items = [parse_item(e) for e in test]
    order = layout_orders("listed")[0]  # the other order lists the same lines: the same tokens
    queries = tuple(count(tt.format_query(text_query(it, order))) for it in items)
    demos = tuple(count(tt.format_demo(d) + tt.separator) for d in text_demos(pool, "listed"))
    text_a, text_b = (Lengths(queries, tuple(count(tt.format_answer(it.options[k])) for it in items), demos, special)
                      for k in (0, 1))
    return ab, text_a, text_b


@cache
def myopic_lengths(task: str, n_test: int | None, tokenizer: Path | None = None) -> tuple[Lengths, Lengths, Lengths]:
    """:func:`myopic_lengths_of` the letter-balanced held-out set of ``task``
    (:func:`ltvlib.study.myopic.balanced_test` of ``n_test`` items), with the first :data:`LENGTH_SAMPLE` training
    examples as demonstrations, counted with the ``tokenizer.json`` at ``tokenizer``."""
    from ..tasks import load_splits
    from .myopic import balanced_test

    pool = list(load_splits(task, n_train=600, n_val=0).train)[:LENGTH_SAMPLE]
    return myopic_lengths_of(task, balanced_test(task, n_test), pool, *file_counter(tokenizer))


def _myopic_batches(lengths: Lengths, answers: Sequence[int] | None, groups: int, size: int,
                    n: int | None = None) -> list[tuple[int, int, int]]:
    """Per forward of chapter 07's scorers: (prompts, the longest query, the longest answer or 1 without
    ``answers``). A set with ``groups`` demonstration blocks gives block ``g`` the items ``g, g + groups, ...``;
    each block's items (the first ``n`` items only) run ``size`` at a time in item order, left-padded to the
    longest."""
    m = len(lengths.queries) if n is None else n
    out = []
    for g in range(groups):
        index = list(range(g, m, groups))
        for start in range(0, len(index), size):
            chunk = index[start : start + size]
            out.append((len(chunk), max(lengths.queries[i] for i in chunk),
                        max(answers[i] for i in chunk) if answers is not None else 1))
    return out


def scored_set_cost(shape: Shape, lengths: Lengths, *, options: Sequence[Sequence[int] | None] = (None,),
                    shots: int = 0, demo_sets: int | None = None, batch_size: int = AB_BATCH, plain: bool = True,
                    states: bool = False, layers: Sequence[int] = ()) -> Cost:
    """One prompt set of chapter 07 (an :class:`~ltvlib.evaluate.EvalSet` of the held-out items, or one order of an
    :class:`~ltvlib.study.myopic.OptionTextSet`) scored as :func:`~ltvlib.study.myopic.score_ab` (``options`` =
    ``(None,)``: the next token only) or :func:`~ltvlib.study.myopic.score_option_text` (``options``: per option,
    its answer tokens per item, teacher-forced) score it, in :func:`_myopic_batches` of ``batch_size``:

    - ``plain``: the set built and scored without a vector: the shared prefix (special tokens and, with ``shots``,
      each of ``demo_sets`` demonstration blocks) once; each batch's prompts in full with the first option's tokens
      but its last; then each option's tail (the last prompt token and the option's tokens) through every block.
    - ``states``: each option's tail once more through every block, keeping the streams there (the first vector a
      cached set meets).
    - ``layers``: per vector entering block ``layer`` (at the last prompt token; a block output at ``layer`` runs
      from that block too), each option's tail through blocks ``layer..L-1``."""
    groups = demo_sets if shots and demo_sets else 1
    shared = lengths.shared(shots)
    c = full(shape, groups, shared) if plain and shared else Cost()
    for k, answers in enumerate(options):
        for rows, width, a in _myopic_batches(lengths, answers, groups, batch_size):
            keys = shared + width - 1 + a
            if plain:
                if k == 0:  # the prompts' keys and values, kept for every later option and vector
                    c.add(forward(shape, rows, width + a - 1, shared + width + a - 1))
                c.add(forward(shape, rows, a, keys, logits=a))
            if states:
                c.add(forward(shape, rows, a, keys))
            for layer in layers:
                c.add(forward(shape, rows, a, keys, first=layer, logits=a))
    return c


def greedy_answers_cost(shape: Shape, lengths: Lengths, n: int, new_tokens: int, *, shots: int = 0,
                        demo_sets: int | None = None, batch_size: int = TEXT_BATCH) -> Cost:
    """:func:`ltvlib.study.myopic.greedy_option_answers` of the first ``n`` prompts of ``lengths``: each batch's
    prompts in full after their shared prefix (computed with the set), then ``new_tokens - 1`` single tokens each
    attending the prompt and the tokens before it (the last one's logits need no further pass; every answer
    runs all ``new_tokens``)."""
    groups = demo_sets if shots and demo_sets else 1
    shared = lengths.shared(shots)
    c = Cost()
    for rows, width, _ in _myopic_batches(lengths, None, groups, batch_size, n):
        c.add(forward(shape, rows, width, shared + width))
        c.add(forward(shape, rows * (new_tokens - 1), 1, shared + width + new_tokens / 2))
    return c


def behaviour_cell_cost(shape: Shape, ab: Lengths, text: tuple[Lengths, Lengths], *, shots: int = 0,
                        demo_sets: int | None = None, layer: int | None = None, states: bool = False,
                        judged: int = 0, new_tokens: int = 0) -> Cost:
    """One :func:`ltvlib.study.myopic.behaviour_scores` call after its vector exists (``ab``, ``text``:
    :func:`myopic_lengths`): the A/B prompts as given and with the options swapped (:data:`AB_BATCH` a forward),
    the option-text prompts in both orders with each option's text (:data:`TEXT_BATCH`), and greedy answers of
    ``new_tokens`` to the first ``judged`` option-text prompts (options in their given order).

    - ``layer`` None: zero-shot (``shots`` 0: the sets every vector reuses, built here) or ICL (``shots``
      demonstrations in ``demo_sets`` blocks: sets of its own, the A/B ones not cached): every set
      :func:`scored_set_cost`'s ``plain``.
    - ``layer``: a vector entering block ``layer`` on the zero-shot sets (scored before): each set's tails from
      ``layer``, with the streams' pass when ``states`` (the first vector); greedy answers run the whole prompt."""
    def both(lengths: Lengths, options: Sequence[Sequence[int] | None], batch_size: int) -> Cost:
        # two sets alike: the A/B items as given and swapped, or the option text in both orders
        return scored_set_cost(shape, lengths, options=options, shots=shots, demo_sets=demo_sets,
                               batch_size=batch_size, plain=layer is None, states=states and layer is not None,
                               layers=() if layer is None else (layer,)).scaled(2)

    c = both(ab, (None,), AB_BATCH).add(both(text[0], (text[0].answers, text[1].answers), TEXT_BATCH))
    if judged:
        c.add(greedy_answers_cost(shape, text[0], judged, new_tokens, shots=shots, demo_sets=demo_sets))
    return c


def myopic_cost(shape: Shape, profile: str, lengths: Callable[[str], Lengths], ltv: LTVCounter, *,
                tokenizer: Path | None = None, seeds: Sequence[int] = (0,)) -> Cost:
    """Chapter 07 as it runs (``chapters/07_myopic.py``: :func:`ltvlib.study.myopic.myopic_behaviour` with the
    chapter's one seed, ``seeds``, then each direction's LTV, read from the cache; it shows no free generations, so
    :func:`~ltvlib.study.myopic.generation_examples` is not counted) in ``profile``: for each direction and seed,
    the LTV (``ltv``; its recipe, training and letter-balanced validation sizes from the plan), the Vanilla TV
    (extracted, its layer chosen among the sweep layers and the middle one) and the function vector, with
    :func:`~ltvlib.study.myopic.extraction_configs`; then every :func:`behaviour_cell_cost`: zero-shot once, each
    ICL shot count per direction, and per direction the Vanilla TV in both forms at its layer (chosen at run time:
    counted at the candidates' median), the function vector at its layer, the LTV and ``random_draws`` random
    vectors at the middle block. Greedy answers are judged for the plan's ``judge_methods`` on its first
    ``judge_items`` items. The held-out prompts' lengths come from :func:`myopic_lengths` with ``tokenizer``; the
    training prompts' (demonstrations, extraction) from ``lengths``."""
    from ..study import plans as P
    from .ltvs import sweep_with_middle
    from .myopic import DIRECTIONS, extraction_configs, method_names

    L, mid = shape.n_layers, shape.n_layers // 2
    mp = P.myopic_plan(profile)
    ms, rs = mp.sizes, mp.run_sizes
    ab, text_a, text_b = myopic_lengths(ms.task, ms.n_test, tokenizer)
    text = (text_a, text_b)
    train = lengths(ms.task)
    vtv, fv = extraction_configs(rs, ms)
    candidates = sweep_with_middle(L, rs)
    tv_layer = statistics.median_low(candidates)
    fv_layer = fv.layer if fv.layer is not None else L // 3
    judged = set(ms.judge_methods or method_names(ms))
    n_judge = len(ab.queries) if ms.judge_items is None else ms.judge_items

    def cell(method: str, **kw: Any) -> Cost:
        return behaviour_cell_cost(shape, ab, text, judged=n_judge if method in judged else 0,
                                   new_tokens=ms.judge_new_tokens, **kw)

    c = cell("zero_shot")
    vectors = [("vanilla_tv", tv_layer), ("vanilla_tv_difference", tv_layer), ("function_vector", fv_layer),
               ("ltv", mid), *(("random", mid) for _ in range(ms.random_draws))]
    first = True  # no vector has met the zero-shot sets' streams yet
    for s in seeds:
        for d in DIRECTIONS:
            ltv(c, ms.task, mid, s, tag=f"myopic-{d}", recipe=with_patience(rs.recipe, ms.ltv_patience),
                n_train=ms.ltv_n_train, n_val=ms.ltv_n_val, data=f"myopic-{d}")
            c.add(vanilla_tv_cost(shape, train, vtv, candidates)).add(function_vector_cost(shape, train, fv))
            for k in ms.icl_shots:
                c.add(cell(f"icl{k}", shots=k, demo_sets=rs.icl_demo_sets))
            for method, layer in vectors:
                # a vector at block 0 reruns the tails through every block without keeping their streams
                c.add(cell(method, layer=layer, states=first and layer > 0))
                first = first and layer == 0
    return c


def across_models_cost(shape: Shape, profile: str, lengths: Callable[[str], Lengths], ltv: LTVCounter,
                       done: set[tuple]) -> Cost:
    """Chapter 08 on one model (``chapters/08_across_models.py``): the middle-layer table (zero-shot and ICL prompts,
    both extracted vectors extracted and scored at their layers, the headline LTVs), the LTV layer sweep with the
    extracted vectors' curves, the key-head ablation against random heads and the linear fits with one random
    control, each with the sizes of :func:`ltvlib.study.plans.across_models_plan`. ``ltv`` counts an LTV unless it
    was counted before; ``done`` holds the extractions and test-prompt passes already counted (chapters 00 and 01
    on the book's model; empty for a second model, whose chapter 08 is a run of its own)."""
    from ..study import plans as P

    L, mid = shape.n_layers, shape.n_layers // 2
    prof = P.get_profile(profile)
    rs = P.run_sizes(prof)
    n_test = rs.n_test or 500
    n_icl = rs.n_test_icl or n_test
    ap = P.across_models_plan(profile)
    at = ap.layers(L)
    ex = P.extracted_plan(profile, n_layers=L).extraction
    tv, fv = ex.vanilla_tv, ex.function_vector
    c = Cost()
    for t in ap.tasks["table"]:
        ln = lengths(t)
        for k in (0, *ap.icl_shots):
            if ("prompts", t, k) not in done:
                c.add(prompts_cost(shape, ln, n_icl if k else n_test, k, rs.icl_demo_sets))
                done.add(("prompts", t, k))
        if ("extract", t) not in done:
            c.add(vanilla_tv_cost(shape, ln, tv, at.extracted[t])).add(function_vector_cost(shape, ln, fv))
            done.add(("extract", t))
        for s in P.headline_seeds(prof):
            ltv(c, t, mid, s)
        for layer in at.extracted[t]:
            c.add(eval_cost(shape, ln, n_test, layer, 2, prompts=False))
        c.add(eval_cost(shape, ln, n_test, mid, 1, prompts=False))
    for t in ap.tasks["sweep"]:
        for layer in at.sweep_ltv[t]:
            ltv(c, t, layer, 0)
            c.add(eval_cost(shape, lengths(t), n_test, layer, 1, prompts=False))
        for layer in at.table:
            c.add(eval_cost(shape, lengths(t), n_test, layer, 2, prompts=False))
    sz = ap.sizes
    for t in ap.tasks["key_heads"]:
        ltv(c, t, mid, 0)
        n_queries = min(sz.n_key_queries, split_sizes(t, rs.n_train, rs.n_val)[1])
        c.add(key_head_experiment_cost(shape, lengths(t), n_queries, n_test, sz.n_random))
    lc = ap.linearity
    tasks = ap.tasks["linearity"]
    for t in tasks:
        # the probes are built for the fits and, after the other tasks', again for the one unfitted control
        nq = min(lc.n_queries, split_sizes(t, rs.n_train, rs.n_val)[0])
        c.add(shift_probes_cost(shape, lengths(t), nq, n_test).scaled(1 + (len(tasks) > 1)))
        c.add(prompts_cost(shape, lengths(t), n_test))
        for layer in at.linearity[t]:
            ltv(c, t, layer, 0)
            c.add(linear_fit_cost(shape, lengths(t), lc, layer, 1, n_test=n_test, n_queries=nq, fit_draws=False,
                                  new_probes=len(tasks) > 1))
    return c


def second_model_floor(model: str, profile: str = "cpu") -> Cost:
    """Chapter 08 on ``model`` as a second model of the book (nothing of it cached by other chapters)."""
    from ..study import plans as P

    shape, tok = model_shape(model), tokenizer_file(model)
    rs = P.run_sizes(P.get_profile(profile))

    def lengths(task: str) -> Lengths:
        return dataclasses.replace(task_lengths(task, tok), test_size=split_sizes(task, rs.n_train, rs.n_val)[2])

    counter = LTVCounter(shape, lengths, rs)
    return across_models_cost(shape, profile, lengths, counter, set())


def with_patience(recipe: Any, patience: int | None) -> Any:
    from ..ltv import with_config

    return recipe if patience is None else with_config(recipe, patience=patience)


def memory_gb(shape: Shape, cost: Cost, *, store_gib: float = 2.0) -> float:
    """Weights in bf16, the prompt store's cached keys and values (its 2 GiB bound, scaled from SmolLM2's
    per-token size to this model's) and the activations of the largest backward (:attr:`Cost.peak_tokens`:
    about 20 values of width d per token and block held for it, in bf16)."""
    weights = 2 * shape.n_params
    smol = 2 * 30 * 3 * 64 * 4  # SmolLM2-135M in fp32: the bound's reference
    store = store_gib * 2**30 * max(1.0, shape.kv_bytes_per_token / smol)
    acts = 20 * 2 * shape.d_model * shape.n_layers * cost.peak_tokens
    return (weights + store + acts) / 1e9


def render(shape: Shape, profile: str, gpu: str, mfu: float, costs: dict[str, Cost]) -> str:
    """The cost table (markdown) with a header naming the model, the GPU and the utilisation."""
    peak, mem, about = GPUS[gpu]
    rate = peak * mfu
    lines = [(f"model {shape.name}: {shape.n_params / 1e9:.2f} B parameters, {shape.n_layers} layers, "
              f"d={shape.d_model}, vocab {shape.vocab}; profile {profile}"),
             f"GPU {gpu}: {about}; at {mfu:.0%} of peak = {rate / 1e12:.0f} TFLOP/s",
             "backward = activation gradients only (frozen weights): about 1x the forward of the blocks above the vector",
             "",
             f"| chapter | forward tokens | backward tokens | FLOPs | GPU memory (GB) | GPUs | {gpu} GPU-hours |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    total = Cost()
    for ch, c in costs.items():
        gb = memory_gb(shape, c)
        lines.append(f"| {ch} | {c.fwd_tokens:,.0f} | {c.bwd_tokens:,.0f} | {c.flops:.3g} | {gb:,.0f} | "
                     f"{math.ceil(gb / mem)} | {c.flops / rate / 3600:,.2f} |")
        total.add(c)
    gb = memory_gb(shape, total)
    lines.append(f"| book | {total.fwd_tokens:,.0f} | {total.bwd_tokens:,.0f} | {total.flops:.3g} | {gb:,.0f} | "
                 f"{math.ceil(gb / mem)} | {total.flops / rate / 3600:,.2f} |")
    return "\n".join(lines)


def book_floor(model: str = "smollm2-135m", profile: str = "cpu", others: Sequence[str] = ("gemma3-270m",)) -> float:
    """The whole book's counted FLOPs (the arithmetic floor of a run): every chapter on ``model`` and chapter 08 on
    each of ``others`` (chapter 08's second models)."""
    costs = chapter_costs(model_shape(model), profile, tokenizer=tokenizer_file(model))
    return sum(c.flops for c in costs.values()) + sum(second_model_floor(m, profile).flops for m in others)
