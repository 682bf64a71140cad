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
  vector (the run's baseline: a full pass, then the last position through every block). Then each step runs
  ``batch`` rows of the tail (the injected last position and the answer tokens, padded to the longest answer in
  the batch, attending the batch's longest prefix) through blocks ``layer..L-1``, forward and backward; each
  validation (before the first epoch and after each) runs the last position of the validation prompts through
  the same blocks.
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
fits, generation) are counted the same way from their plan sizes; chapter 08 counts only this model's share (its
other models are runs of their own). Every trained vector is counted once, in the first chapter (in run order)
that trains it: later chapters read it from the cache.
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
                      prefill: bool = True) -> Cost:
    """One LTV trained at ``layer`` (last position) with ``recipe`` (a :class:`~ltvlib.ltv.TrainConfig`) on
    prompts of ``lengths``: ``steps`` and ``validations`` (per attempt; default: the schedule's maximum) and
    ``attempts`` (the first run and its retries). ``prefill=False`` leaves out the prompts' first passes (paid by
    an earlier LTV of the same task and prompt kind in the process)."""
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
        if layer > 0:  # the baseline: the validation prompts' cache holds blocks layer.. only
            c.add(batched(shape, lengths, n_v, answers=False, max_rows=64, max_tokens=DEFAULT_BATCH_TOKENS,
                          shared=shared))
        c.add(forward(shape, n_v, 1, n))
        a_pad = Lengths.batch_max(lengths.answers, b)
        keys = shared + Lengths.batch_max(lengths.queries, b) - 1 + a_pad
        per_attempt = forward(shape, steps * b, a_pad, keys, first=layer, logits=a_pad, grad=True)
        per_attempt.peak_tokens = b * (a_pad + keys)
        per_attempt.add(forward(shape, validations * n_v, 1, n, first=layer))
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
              prompts: bool = True, demo_sets: int | None = None) -> Cost:
    """``n_test`` prompts once in full (``prompts``; :func:`prompts_cost`), then ``n_vectors`` vectors at
    ``layer`` (last position)."""
    c = prompts_cost(shape, lengths, n_test, shots, demo_sets) if prompts else Cost()
    return c.add(forward(shape, n_test * n_vectors, 1, lengths.prompt(shots), first=layer))


# ---------------------------------------------------------------------------------------------------------------
# the chapters


CHAPTERS = ("00", "01", "02", "03", "04", "05", "06", "07", "08")


def chapter_costs(shape: Shape, profile: str, *, tokenizer: Path | None = None) -> dict[str, Cost]:
    """Per chapter (in the book's run order), what it computes at ``profile`` on a model of ``shape``, its prompts
    counted with the ``tokenizer.json`` at ``tokenizer`` (:func:`tokenizer_file`)."""
    from ..study import plans as P
    from ..study.flexibility import table1_settings

    L, mid = shape.n_layers, shape.n_layers // 2
    prof = P.get_profile(profile)
    rs = P.run_sizes(prof)
    recipe = rs.recipe
    n_test = rs.n_test or 500  # None = whole test split: the paper's are about 500 queries per task
    n_icl = rs.n_test_icl or n_test
    trained: set[tuple] = set()
    prefilled: set[tuple] = set()
    out: dict[str, Cost] = {}

    def lengths(task: str) -> Lengths:
        return task_lengths(task, tokenizer)

    def ltv(c: Cost, task: str, layer: int, seed: int, tag: str = "", *, recipe_: Any = None, n_train: int | None = None,
            n_val: int | None = None, shots: int = 0) -> None:
        key = (task, layer, seed, tag, shots)
        if key in trained:
            return
        trained.add(key)
        pkey = (task, shots, tag if recipe_ is not None else "")
        c.add(ltv_training_cost(shape, lengths(task), layer, recipe_ or recipe, n_train=n_train or rs.n_train,
                                n_val=n_val or rs.n_val, shots=shots, prefill=pkey not in prefilled))
        prefilled.add(pkey)

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
        c.add(full(shape, tv.n_contexts, ln.prompt(tv.shots)))  # context states
        c.add(full(shape, tv.n_dev * len(ex.layers), ln.prompt(0)))  # layer choice on dev queries
        c.add(full(shape, fv.n_mean, ln.prompt(fv.shots)))  # mean head outputs
        c.add(forward(shape, fv.n_ie * L * shape.n_heads, 1, ln.prompt(fv.shots)))  # indirect effect per head
        for layer in ex.layers:
            c.add(eval_cost(shape, lengths(t), n_test, layer, 2 + (layer in ex.ltv_layers[t]), prompts=layer == ex.layers[0]))
    out["01"] = c

    # 02: Table 1's settings (positions, layers, ICL), each on its tasks and seeds
    c = Cost()
    fx = P.flexibility_plan(profile)
    fs = fx.sizes
    for setting in table1_settings(L, layer_steps=fs.layer_steps, icl_shots=fs.icl_shots):
        tasks = fs.setting_tasks.get(setting.name, fx.tasks)
        layers = tuple(getattr(setting, "layers", [mid]) or [mid])
        shots = getattr(setting, "shots", 0) or 0
        seeds = fx.base_seeds if setting.name == "baseline" else fx.other_seeds
        for t in tasks:
            for s in seeds:
                ltv(c, t, min(layers), s, tag=setting.name if setting.name != "baseline" else "", shots=shots)
            c.add(eval_cost(shape, lengths(t), fx.n_test or n_test, min(layers), len(seeds), shots=shots, prompts=False))
    out["02"] = c

    # 03: the LTV against parameter-efficient fine-tuning (each method trained like an LTV on its schedule)
    c = Cost()
    pf = P.peft_plan(profile)
    cs = pf.sizes
    # the race: the equal-budget four (LTV, 1 prompt token, 1 prefix token, rank-1 LoRA at the middle layer) and
    # the usual three (LoRA r8 on q/k/v/o, 10 prefix and 10 prompt tokens); adapters other than the LTV and the
    # middle-layer LoRA take gradients through every block
    methods = {"ltv": mid, "prompt-1": 0, "prefix-1": 0, "lora-r1": mid, "lora-r8": 0, "prefix-10": 0, "prompt-10": 0}
    for t in pf.tasks:
        for s in pf.seeds:
            for m, first in methods.items():
                ltv(c, t, first, s, tag=f"peft-{m}", recipe_=cs.schedule, n_train=cs.n_train, n_val=cs.n_val)
        c.add(full(shape, len(pf.seeds) * len(methods) * (cs.n_test or n_test), lengths(t).prompt(0)))
    out["03"] = c

    # 04: mechanism LTVs, OV reconstructions, key-head saliency and ablation (one head at a time, last position)
    c = Cost()
    kh = P.ov_key_heads_plan(profile)
    for t, mlayers in P.mechanism_plan(L, prof).items():
        for layer in mlayers:
            ltv(c, t, layer, 0)
            c.add(eval_cost(shape, lengths(t), n_test, layer, 2 + kh.n_random * kh.n_draws, prompts=False))
    for t in (*kh.label_tasks, *kh.open_tasks):
        n = lengths(t).prompt(0)
        c.add(forward(shape, kh.n_queries, n, n, grad=True))  # saliency: gradients to every head
        c.add(forward(shape, kh.n_queries * L * shape.n_heads, 1, n))  # ablation of each head
    out["04"] = c

    # 05: linearity: fits on held-out queries at each scale, random-vector controls
    c = Cost()
    lp = P.linearity_chapter_plan(profile, n_layers=L)
    lc = lp.config
    for t, layers in lp.layers.items():
        n = lengths(t).prompt(0)
        for layer in layers:
            for s in lp.seeds(t):
                ltv(c, t, layer, s)
                q = lc.n_queries * lc.fit_factor + lc.n_heldout
                c.add(forward(shape, q * (len(lc.scales) + len(lc.lambdas)) * (1 + lp.n_draws), 1, n, first=layer))
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
    ltv(c, ms.task, mid, 0, recipe_=with_patience(recipe, ms.ltv_patience), n_train=ms.ltv_n_train, n_val=ms.ltv_n_val)
    ln = lengths(ms.task)
    for k in (0, *ms.icl_shots):
        c.add(full(shape, ms.n_test or n_test, ln.prompt(k)))
    n_gen = (ms.n_test or n_test) * ms.n_generations * len(ms.judge_methods or (0, 0, 0, 0))
    c.add(forward(shape, n_gen * ms.max_new_tokens, 1, ln.prompt(0) + ms.max_new_tokens / 2))
    out["07"] = c

    # 08: this model's share of the across-models table (the other models are runs of their own)
    c = Cost()
    ap = P.across_models_plan(profile)
    for t in ap.tasks["table"]:
        for s in P.headline_seeds(prof):
            ltv(c, t, mid, s)
        c.add(eval_cost(shape, lengths(t), n_test, mid, 1))
    for t in ap.tasks["sweep"]:
        for layer in P.sweep_ltv_layers(L, prof, t):
            ltv(c, t, layer, 0)
    for t in ap.tasks["key_heads"]:
        c.add(forward(shape, ap.sizes.n_key_queries * L * shape.n_heads, 1, lengths(t).prompt(0)))
    out["08"] = c
    return out


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


def book_floor(model: str = "smollm2-135m", profile: str = "cpu") -> float:
    """The whole book's counted FLOPs (the arithmetic floor of a run)."""
    return sum(c.flops for c in chapter_costs(model_shape(model), profile, tokenizer=tokenizer_file(model)).values())


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
    print(render(shape, args.profile, args.gpu, args.mfu, costs))
    if args.cpu_gflops:
        total = sum(c.flops for c in costs.values())
        print(f"\nat {args.cpu_gflops:g} GFLOP/s: {total / args.cpu_gflops / 1e9:,.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
