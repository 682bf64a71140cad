"""What a book run costs before it runs: ``python -m ltvlib.book plan --model M --profile P``.

From the model's config alone (no weights; :mod:`ltvlib.flops`) and the book's own plans (:mod:`ltvlib.study.plans`:
per chapter its tasks, seeds, layers and sizes; the LTV recipes of :mod:`ltvlib.ltv`: steps, batch sizes, prefix
caching), it counts per chapter the tokens the chapter runs forward and backward, their FLOPs, the GPU memory a
run needs and the GPU-hours on a named GPU at a stated utilisation. Prompt lengths are counted with the model's
own tokenizer when its ``tokenizer.json`` is on this machine, else with SmolLM2's (Llama 3's counts are within a
few per cent on these English prompts).

How one LTV training is counted (the unit most chapters repeat), as :func:`ltvlib.ltv.train_ltv` runs it:

- ``fast`` recipe (prefix caching): the stream's size at the sites (the first 32 training prompts in one padded
  batch, once per task and statistic);
  each training prompt with its teacher-forced answer tokens and each validation prompt once in full, no
  gradient (once per task and prompt kind: later vectors reuse them); the validation prompts once more without a
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
- Evaluation: each test prompt once in full per (task, prompt kind), then the last position through blocks
  ``layer..L-1`` per vector evaluated; ICL prompts carry their k demonstrations.

FLOPs are counted as ``torch.utils.flop_counter`` counts them (:mod:`ltvlib.flops`: matrix products, attention,
the unembedding at every position whose logits are computed; backward = activation gradients only, about 1x the
forward of the blocks above the vector). The other chapters' measurements (extraction, head ablation, linearity
fits, generation) are counted the same way from their plan sizes. Chapter 08 counts what it computes on this model
that no earlier chapter did; ``--second-models`` adds a row for each of its other models, where nothing is cached.
Every trained vector is counted once, in the first chapter (in run order) that trains it: later chapters read it
from the cache.
"""

from __future__ import annotations

import argparse
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
    def of(cls, task: Any, examples: Sequence[Any], count: Count, special: int = 0) -> Lengths:
        """The lengths of ``examples`` of ``task`` (a :class:`~ltvlib.tasks.Task`) as ``count`` tokenises them
        (without special tokens; ``special`` of them before each prompt)."""
        return cls(tuple(count(task.format_query(e.input)) for e in examples),
                   tuple(count(task.format_answer(e.output)) for e in examples),
                   tuple(count(task.format_demo(e) + task.separator) for e in examples), special)


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
                      prefill: bool = True, positions: Sequence[int] = (-1,)) -> Cost:
    """One LTV trained with its vectors entering block ``layer`` (the lowest of its layers) at ``positions``
    with ``recipe`` (a :class:`~ltvlib.ltv.TrainConfig`) on prompts of ``lengths``: ``steps`` and
    ``validations`` (per attempt; default: the schedule's maximum) and ``attempts`` (the first run and its
    retries). ``prefill=False`` leaves out the prompts' first passes (paid by an earlier LTV of the same task and
    prompt kind in the process). Every step and validation recomputes each prompt's tail from its earliest
    injected position (:meth:`Lengths.tails`; a training batch is padded to its longest tail)."""
    q, a, shared = lengths.query, lengths.answer, lengths.shared(shots)
    n = shared + q
    per_epoch = math.ceil(recipe.samples_per_epoch / recipe.batch_size)
    steps = recipe.epochs * per_epoch if steps is None else steps
    validations = recipe.epochs + 1 if validations is None else validations
    n_v = min(n_val, recipe.val_queries) if recipe.val_queries else n_val
    b = recipe.batch_size
    c = Cost()
    if recipe.prefix_cache:
        if prefill:
            if recipe.relative_to_stream:
                # one forward for the RMS (the initial range), another when the step follows another statistic
                passes = 1 + (getattr(recipe, "lr_stream_statistic", "rms") != "rms")
                width = shared + Lengths.batch_max(lengths.queries, RMS_PROMPTS)
                c.add(full(shape, 1, width).scaled(RMS_PROMPTS * passes))
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
        per_attempt = forward(shape, steps * b, tail - 1 + a_pad, keys, first=layer, logits=a_pad, grad=True)
        per_attempt.peak_tokens = b * (a_pad + keys)
        per_attempt.add(forward(shape, validations * n_v, lengths.tail(positions, shots), n, first=layer))
    else:
        val = batched(shape, lengths, n_v, answers=False, max_rows=64, max_tokens=DEFAULT_BATCH_TOKENS, shared=shared)
        c.add(val)  # the baseline
        per_attempt = forward(shape, steps * b, n + a - 1, n + a - 1, logits=a)
        # backward through the blocks from the vector's on
        bwd = forward(shape, steps * b, n + a - 1, n + a - 1, first=layer, logits=a, grad=True)
        per_attempt.bwd_tokens += bwd.bwd_tokens
        per_attempt.bwd_flops += bwd.bwd_flops
        per_attempt.peak_tokens = b * 2 * (n + a - 1)
        per_attempt.add(val.scaled(validations))
    return c.add(per_attempt.scaled(attempts))


def prompts_cost(shape: Shape, lengths: Lengths, rows: int, shots: int = 0, demo_sets: int | None = None) -> Cost:
    """``rows`` prompts with ``shots`` demonstrations once in full, no gradient: with ``demo_sets`` blocks of
    demonstrations shared by their queries (each block once, its queries attending it), else each prompt with its
    own demonstrations."""
    if not demo_sets or not shots:
        return full(shape, rows, lengths.prompt(shots))
    return full(shape, demo_sets, lengths.shared(shots)).add(
        forward(shape, rows, lengths.query, lengths.prompt(shots)))


def eval_cost(shape: Shape, lengths: Lengths, n_test: int, layer: int, n_vectors: int, shots: int = 0,
              prompts: bool = True, demo_sets: int | None = None, positions: Sequence[int] = (-1,)) -> Cost:
    """``n_test`` prompts once in full (``prompts``; :func:`prompts_cost`), then ``n_vectors`` vectors entering
    block ``layer`` at ``positions`` (each prompt's tail from its earliest injected position through blocks
    ``layer..L-1``)."""
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


def key_head_cost(shape: Shape, lengths: Lengths, n_queries: int) -> Cost:
    """Key-head saliency (gradients to every head over ``n_queries`` prompts) and the ablation of each head in turn
    (the last position of each prompt through every block)."""
    n = lengths.prompt(0)
    c = forward(shape, n_queries, n, n, grad=True)
    return c.add(forward(shape, n_queries * shape.n_layers * shape.n_heads, 1, n))


def linear_fit_cost(shape: Shape, lengths: Lengths, config: Any, layer: int, n_controls: int) -> Cost:
    """The linear map's fit and held-out checks at ``layer`` (every scale and perturbation size over the fitting and
    held-out queries, the last position from ``layer``), for the LTV and ``n_controls`` random vectors."""
    q = config.n_queries * config.fit_factor + config.n_heldout
    rows = q * (len(config.scales) + len(config.lambdas)) * (1 + n_controls)
    return forward(shape, rows, 1, lengths.prompt(0), first=layer)


class LTVCounter:
    """Counts each LTV a book run trains once (later chapters read it from the cache) and each task's prompt
    passes once per prompt kind (later LTVs of the process reuse them)."""

    def __init__(self, shape: Shape, lengths: Callable[[str], Lengths], run_sizes: Any) -> None:
        self.shape, self.lengths, self.run_sizes = shape, lengths, run_sizes
        self.trained: set[tuple] = set()
        self.prefilled: set[tuple] = set()

    def __call__(self, c: Cost, task: str, layer: int, seed: int, tag: str = "", *, recipe: Any = None,
                 n_train: int | None = None, n_val: int | None = None, shots: int = 0,
                 positions: Sequence[int] = (-1,)) -> None:
        """Add to ``c`` the LTV of ``task`` at ``layer`` (``tag`` tells apart LTVs the key would otherwise merge)
        unless it was counted before."""
        key = (task, layer, seed, tag, shots)
        if key in self.trained:
            return
        self.trained.add(key)
        pkey = (task, shots, tag if recipe is not None else "")
        rs = self.run_sizes
        c.add(ltv_training_cost(self.shape, self.lengths(task), layer, recipe or rs.recipe,
                                n_train=n_train or rs.n_train, n_val=n_val or rs.n_val, shots=shots,
                                prefill=pkey not in self.prefilled, positions=positions))
        self.prefilled.add(pkey)


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
    recipe = rs.recipe
    n_test = rs.n_test or 500  # None = whole test split: the paper's are about 500 queries per task
    n_icl = rs.n_test_icl or n_test
    done: set[tuple] = set()  # extractions and test-prompt passes already counted: ("extract", task), ("prompts", ...)
    out: dict[str, Cost] = {}

    def lengths(task: str) -> Lengths:
        return task_lengths(task, tokenizer)

    ltv = LTVCounter(shape, lengths, rs)

    # 00: headline LTVs at the middle layer; zero-shot, ICL and LTV accuracy on every task
    c = Cost()
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
    out["03"] = race_cost(shape, profile, lengths, ltv)

    # 04: mechanism LTVs, OV reconstructions, key-head saliency and ablation (one head at a time, last position)
    c = Cost()
    kh = P.ov_key_heads_plan(profile)
    for t, mlayers in P.mechanism_plan(L, prof).items():
        for layer in mlayers:
            ltv(c, t, layer, 0)
            c.add(eval_cost(shape, lengths(t), n_test, layer, 2 + kh.n_random * kh.n_draws, prompts=False))
    for t in (*kh.label_tasks, *kh.open_tasks):
        c.add(key_head_cost(shape, lengths(t), kh.n_queries))
    out["04"] = c

    # 05: linearity: fits on held-out queries at each scale, random-vector controls
    c = Cost()
    lp = P.linearity_chapter_plan(profile, n_layers=L)
    lc = lp.config
    for t, layers in lp.layers.items():
        for layer in layers:
            for s in lp.seeds(t):
                ltv(c, t, layer, s)
                c.add(linear_fit_cost(shape, lengths(t), lc, layer, lp.n_draws))
    out["05"] = c

    # 06: LTVs across seeds and tasks, transfer between tasks; composition
    c = Cost()
    gp = P.generalization_plan(profile)
    gs = gp.sizes
    fewer = dict(gs.fewer_seeds)
    for t in gs.tasks:
        for s in fewer.get(t, gs.seeds):
            ltv(c, t, mid, s)
        c.add(eval_cost(shape, lengths(t), n_test, mid, len(gs.tasks) + gs.control_draws, prompts=False))
    comp = gp.composition
    for s in comp.seeds:
        for t in ("english_french", "gender_masc_fem"):
            ltv(c, t, mid, s)
    c.add(forward(shape, n_test * len(comp.scales) * len(comp.seeds), 1, lengths("antonym").prompt(0), first=mid))
    out["06"] = c

    # 07: the myopic-reward behaviour task: LTV, ICL, generated answers
    c = Cost()
    mp = P.myopic_plan(profile)
    ms = mp.sizes
    ltv(c, ms.task, mid, 0, recipe=with_patience(recipe, ms.ltv_patience), n_train=ms.ltv_n_train, n_val=ms.ltv_n_val)
    ln = lengths(ms.task)
    for k in (0, *ms.icl_shots):
        c.add(full(shape, ms.n_test or n_test, ln.prompt(k)))
    n_gen = (ms.n_test or n_test) * ms.n_generations * len(ms.judge_methods or (0, 0, 0, 0))
    c.add(forward(shape, n_gen * ms.max_new_tokens, 1, ln.prompt(0) + ms.max_new_tokens / 2))
    out["07"] = c

    # 08: chapters 01, 04 and 05's measurements on this model with chapter 08's sizes; what an earlier chapter
    # computed on this model is read from the cache (the sets above), so only the rest counts here
    out["08"] = across_models_cost(shape, profile, lengths, ltv, done)
    return out


RACE_GRID = 3
"""Learning rates each method of chapter 03 tries with its first seed (:data:`ltvlib.study.peft_compare.LR_GRID`)."""


def race_field(profile: str, mid: int) -> dict[str, tuple[str, int, int]]:
    """Chapter 03's field in ``profile`` as the chapter races it: method -> (kind, the first block its gradients
    or changes reach, virtual tokens added to every prompt)."""
    field = {"ltv": ("ltv", mid, 0), f"prefix-1-L{mid}": ("prefix", mid, 0), f"lora-r1-o{mid}": ("lora", mid, 0)}
    if profile in ("cpu", "paper"):
        field["prefix-1"] = ("prefix", 0, 0)
    if profile == "paper":  # prompt tuning and each adapter's default setting
        field |= {"prompt-1": ("prompt", 0, 1), "lora-r8-qv": ("lora", 0, 0), "prefix-20": ("prefix", 0, 0),
                  "prompt-20": ("prompt", 0, 20)}
    return field


def adapter_run_cost(shape: Shape, lengths: Lengths, first: int, virtual: int, schedule: Any, *, n_val: int,
                     n_test: int) -> Cost:
    """One adapter run of the race to its cap: every step ``batch`` prompts with their answers forward and backward
    through blocks ``first..L-1`` (the blocks below see no change: their states are counted once, in
    :func:`race_cost`), a validation before the first epoch and after each (``n_val`` prompts from block
    ``first``), then the test prompts; ``virtual`` prompt-tuning tokens lengthen every prompt."""
    b = schedule.batch_size
    steps = schedule.epochs * math.ceil(schedule.samples_per_epoch / b)
    n = lengths.prompt(0) + virtual
    width = n + Lengths.batch_max(lengths.answers, b) - 1
    c = forward(shape, steps * b, width, width, first=first, logits=Lengths.batch_max(lengths.answers, b), grad=True)
    c.peak_tokens = b * width
    c.add(forward(shape, (schedule.epochs + 1) * n_val + n_test, n, n, first=first))
    return c


def race_cost(shape: Shape, profile: str, lengths: Callable[[str], Lengths], ltv: LTVCounter) -> Cost:
    """Chapter 03 as it runs (``chapters/03_peft.py``): on each task every method of :func:`race_field` trains
    :data:`RACE_GRID` learning rates with the first seed and the chosen one with every other seed, each run to the
    schedule's cap (early stopping only ends a run sooner); the LTV's runs by the library's trainer (``ltv``), the adapters' by :func:`adapter_run_cost`; the
    prompts' states below each adapter's first block once per task."""
    from ..ltv import with_config
    from ..study import plans as P

    plan = P.peft_plan(profile)
    cs = plan.sizes
    sched = cs.schedule
    recipe = with_config(plan.run_sizes.recipe, batch_size=sched.batch_size, epochs=sched.epochs,
                         samples_per_epoch=sched.samples_per_epoch)
    mid = shape.n_layers // 2
    n_runs = RACE_GRID + len(plan.seeds) - 1
    c = Cost()
    for t in plan.tasks:
        ln = lengths(t)
        n_test = cs.n_test or 500
        rows = cs.n_train + (sched.epochs + 1) * cs.n_val + n_test
        # the prompts once through the blocks below the middle one (first = L - mid counts mid blocks), which no
        # middle-layer method changes
        c.add(forward(shape, rows, ln.prompt(0), ln.prompt(0), first=shape.n_layers - mid, logits=0))
        for name, (kind, first, virtual) in race_field(profile, mid).items():
            if kind == "ltv":
                for run in range(n_runs):
                    ltv(c, t, first, run, tag=f"race-{run}", recipe=recipe, n_train=cs.n_train, n_val=cs.n_val)
                c.add(eval_cost(shape, ln, n_test, first, n_runs, prompts=False))
            else:
                c.add(adapter_run_cost(shape, ln, first, virtual, sched, n_val=cs.n_val, n_test=n_test)
                      .scaled(n_runs))
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
        c.add(key_head_cost(shape, lengths(t), sz.n_key_queries))
        c.add(eval_cost(shape, lengths(t), n_test, 0, 1 + sz.n_random, prompts=False))  # key heads, random heads
    lc = ap.linearity
    for t in ap.tasks["linearity"]:
        for layer in at.linearity[t]:
            ltv(c, t, layer, 0)
            c.add(linear_fit_cost(shape, lengths(t), lc, layer, 1))  # one random control
    return c


def second_model_floor(model: str, profile: str = "cpu") -> Cost:
    """Chapter 08 on ``model`` as a second model of the book (nothing of it cached by other chapters)."""
    from ..study import plans as P

    shape, tok = model_shape(model), tokenizer_file(model)

    def lengths(task: str) -> Lengths:
        return task_lengths(task, tok)

    counter = LTVCounter(shape, lengths, P.run_sizes(P.get_profile(profile)))
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ltvlib.book plan",
                                 description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--model", default="smollm2-135m",
                    help="registry name, Hugging Face id, local folder or shape (llama-8b, 32b, 70b)")
    ap.add_argument("--profile", default="paper", choices=("smoke", "cpu", "paper"))
    ap.add_argument("--gpu", default="h100", type=str.lower, choices=sorted(GPUS))
    ap.add_argument("--utilisation", "--mfu", dest="mfu", type=float, default=0.4,
                    help="fraction of the GPU's bf16 dense peak reached (default 0.4)")
    ap.add_argument("--chapters", nargs="*", default=None, help="only these chapters (e.g. 00 03)")
    ap.add_argument("--second-models", nargs="*", default=(),
                    help="also count chapter 08 on these models (its second models, e.g. gemma3-270m), a row each")
    ap.add_argument("--cpu-gflops", type=float, default=None,
                    help="also print the whole book's seconds at this CPU rate (GFLOP/s)")
    args = ap.parse_args(argv)
    if not 0 < args.mfu <= 1:
        ap.error(f"--utilisation must lie in (0, 1], got {args.mfu}")
    try:
        shape = model_shape(args.model)
    except ValueError as exc:
        ap.error(str(exc))
    costs = chapter_costs(shape, args.profile, tokenizer=tokenizer_file(args.model))
    if args.chapters:
        unknown = sorted(set(args.chapters) - set(costs))
        if unknown:
            ap.error(f"unknown chapters {unknown}; the chapters are {', '.join(costs)}")
        costs = {k: v for k, v in costs.items() if k in args.chapters}
    for other in args.second_models:
        try:
            costs[f"08 on {other}"] = second_model_floor(other, args.profile)
        except ValueError as exc:
            ap.error(str(exc))
    print(render(shape, args.profile, args.gpu, args.mfu, costs))
    if args.cpu_gflops:
        total = sum(c.flops for c in costs.values())
        print(f"\nat {args.cpu_gflops:g} GFLOP/s: {total / args.cpu_gflops / 1e9:,.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
