"""What a book run costs before it runs: ``python -m ltvlib.book plan --model M --profile P``.

From the model's config alone (no weights) and the book's own plans (:mod:`ltvlib.study.plans`: per chapter its
tasks, seeds, layers and sizes; the LTV recipes of :mod:`ltvlib.ltv`: steps, batch sizes, prefix caching), it
counts per chapter the tokens the chapter runs forward and backward, their FLOPs, the GPU memory a run needs
and the GPU-hours on a named GPU at a stated utilisation.

How tokens are counted (one LTV training, the unit most chapters repeat):

- ``fast`` recipe (prefix caching): each training and validation prompt once in full (no gradient); then each
  step runs ``batch`` rows of the tail (the injected last position and the teacher-forced answer tokens)
  through blocks ``layer..L-1`` only, forward and backward; each validation (every epoch and before the first)
  runs the last position of the validation prompts through the same blocks.
- ``paper`` recipe (the released one: batch 1, full forwards): every step runs the whole prompt and answer
  through every block, and backward through blocks ``layer..L-1``; each validation runs every validation prompt
  in full.
- Steps are the schedule's maximum (``epochs x ceil(samples / batch)``): early stopping only ends a run sooner,
  so the counts are upper bounds for training (:func:`ltv_training_cost` takes the steps and validations a run
  actually made, which is what the measured check uses).
- Evaluation: each test prompt once in full per (task, prompt kind), then the last position through blocks
  ``layer..L-1`` per vector evaluated; ICL prompts carry their k demonstrations.

FLOPs: ``2 x N_block`` per token and block (the matrix products of the frozen weights) plus attention
``4 x heads x head_dim x n_query x n_key`` (QK and AV over the whole key range, as torch's flop counter counts a
causal kernel; real kernels skip about half of it), plus the unembedding ``2 x d x vocab`` per position whose
logits are kept. **Backward**: activation gradients only (the weights are frozen: an LTV's gradient is the
stream's), so ``2 x N_block`` per token and block, attention twice its forward, and the unembedding once: about
1x the forward of the same blocks, not the 2x of weight training. The other chapters' measurements (extraction,
head ablation, linearity fits, generation) are counted the same way from their plan sizes; chapter 08 counts
only this model's share (its other models are runs of their own). Every trained vector is counted once, in the
first chapter (in run order) that trains it: later chapters read it from the cache.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

GPUS: dict[str, tuple[float, float, str]] = {
    "h100": (989e12, 80, "NVIDIA H100 SXM, bf16 dense tensor peak 989 TFLOP/s, 80 GB"),
    "h200": (989e12, 141, "NVIDIA H200 SXM, bf16 dense tensor peak 989 TFLOP/s, 141 GB"),
    "a100": (312e12, 80, "NVIDIA A100 SXM 80GB, bf16 dense tensor peak 312 TFLOP/s"),
    "l40s": (362e12, 48, "NVIDIA L40S, bf16 dense tensor peak 362 TFLOP/s, 48 GB"),
}
"""GPU name -> (bf16 dense peak FLOP/s, memory in GB, description)."""

SHAPE_ALIASES = {"llama-8b": "llama-3.1-8b", "llama-3.1-8b": "llama-3.1-8b", "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
                 "32b": "qwen2.5-32b", "qwen-32b": "qwen2.5-32b", "qwen2.5-32b": "qwen2.5-32b",
                 "llama-32b": "qwen2.5-32b", "70b": "llama-3-70b", "llama-70b": "llama-3-70b",
                 "llama-3-70b": "llama-3-70b", "meta-llama/Meta-Llama-3-70B": "llama-3-70b"}
"""Shape names ``--model`` accepts besides registry names, folders and Hugging Face ids (the shapes are
:data:`ltvlib.models.RANDOM_SHAPES`; ``llama-32b`` is the Qwen2.5-32B shape: there is no Llama 32B)."""

VOCAB = {"llama-3.1-8b": 128256, "qwen2.5-32b": 152064, "llama-3-70b": 128256, "smollm2-135m": 49152,
         "gemma3-270m": 262144, "tiny-llama": 49152}
"""The published vocabulary of each built-in shape (a random model of that shape uses its tokenizer's)."""


@dataclass(frozen=True)
class Shape:
    """What the cost needs from a model's config."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int
    tied: bool

    @property
    def block_params(self) -> int:
        """Weights of one decoder block's matrix products: Q, K, V, O and a gated MLP (norms left out)."""
        attn = self.d_model * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        return attn + 3 * self.d_model * self.d_ff

    @property
    def n_params(self) -> int:
        return self.n_layers * self.block_params + self.vocab * self.d_model * (1 if self.tied else 2)

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * 2  # keys and values, bf16


def shape_from_config(config: Any, name: str) -> Shape:
    config = getattr(config, "text_config", None) or config
    heads = config.num_attention_heads
    return Shape(name=name, n_layers=config.num_hidden_layers, d_model=config.hidden_size, n_heads=heads,
                 n_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                 head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                 d_ff=config.intermediate_size, vocab=config.vocab_size,
                 tied=bool(getattr(config, "tie_word_embeddings", False)))


def model_shape(model: str) -> Shape:
    """The shape of ``model``: a built-in shape (``llama-8b``, ``32b``, ``70b``, ...), a registry name, a local
    folder or a Hugging Face id (its config only: ``AutoConfig``, from the local cache when offline)."""
    from ..models import MODEL_REGISTRY, RANDOM_PREFIX, RANDOM_SHAPES

    key = model[len(RANDOM_PREFIX):].partition("@")[0] if model.startswith(RANDOM_PREFIX) else model
    key = SHAPE_ALIASES.get(key, key)
    if key in RANDOM_SHAPES and (key not in MODEL_REGISTRY or model != key):
        from transformers import AutoConfig

        model_type, fields = RANDOM_SHAPES[key]
        return shape_from_config(AutoConfig.for_model(model_type, vocab_size=VOCAB.get(key, 49152), **fields), key)
    if key in MODEL_REGISTRY:
        from transformers import AutoConfig

        from ..cache import cache_root

        folder = cache_root() / "models" / key
        if (folder / "config.json").is_file():
            return shape_from_config(AutoConfig.from_pretrained(folder), key)
        model_type, fields = RANDOM_SHAPES[key]
        return shape_from_config(AutoConfig.for_model(model_type, vocab_size=VOCAB[key], **fields), key)
    from transformers import AutoConfig

    source = Path(model).expanduser()
    try:
        config = AutoConfig.from_pretrained(source if source.is_dir() else model)
    except OSError as exc:
        raise ValueError(f"no config for {model!r}: use a registry name ({', '.join(MODEL_REGISTRY)}), a shape "
                         f"({', '.join(sorted(SHAPE_ALIASES))}), a local folder or a cached Hugging Face id") from exc
    return shape_from_config(config, model)


# ---------------------------------------------------------------------------------------------------------------
# prompt lengths


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """SmolLM2's tokenizer when it is here (Llama 3's counts are within a few per cent on these English
    prompts), else None (then four characters make a token)."""
    from transformers import AutoTokenizer

    from ..cache import cache_root

    folder = cache_root() / "models" / "smollm2-135m"
    if (folder / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(folder)
    return None


def _count(text: str) -> int:
    tok = _tokenizer()
    return len(tok(text, add_special_tokens=False).input_ids) if tok is not None else max(1, round(len(text) / 4))


@dataclass(frozen=True)
class Lengths:
    """Mean tokens of a task's zero-shot query, its answer and one demonstration (with separator)."""

    query: float
    answer: float
    demo: float

    def prompt(self, shots: int = 0) -> float:
        return self.query + shots * self.demo


@cache
def task_lengths(task: str) -> Lengths:
    from ..tasks import get_task, load_splits

    t = get_task(task)
    ex = list(load_splits(task, n_train=600, n_val=0).train)[:200]
    q = statistics.fmean(_count(t.format_query(e.input)) for e in ex)
    a = statistics.fmean(_count(t.format_answer(e.output)) for e in ex)
    d = statistics.fmean(_count(t.format_demo(e) + t.separator) for e in ex)
    return Lengths(q, a, d)


# ---------------------------------------------------------------------------------------------------------------
# costs


@dataclass
class Cost:
    """Tokens and FLOPs: forward (with and without gradient) and backward."""

    fwd_tokens: float = 0.0
    bwd_tokens: float = 0.0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    peak_tokens: float = 0.0  # the largest batch x sequence one forward holds (activations)
    units: list[str] = field(default_factory=list)

    @property
    def flops(self) -> float:
        return self.fwd_flops + self.bwd_flops

    def add(self, other: Cost) -> Cost:
        self.fwd_tokens += other.fwd_tokens
        self.bwd_tokens += other.bwd_tokens
        self.fwd_flops += other.fwd_flops
        self.bwd_flops += other.bwd_flops
        self.peak_tokens = max(self.peak_tokens, other.peak_tokens)
        return self


def forward(shape: Shape, rows: float, n_query: float, n_key: float, *, first: int = 0, logits: float = 1,
            grad: bool = False) -> Cost:
    """``rows`` sequences of ``n_query`` new tokens attending ``n_key`` keys each, through blocks
    ``first..L-1``, ``logits`` unembedded positions per row; ``grad``: plus the activation-gradient backward."""
    blocks = shape.n_layers - first
    attn = 4 * shape.n_heads * shape.head_dim * n_query * n_key
    f = rows * (blocks * (2 * shape.block_params * n_query + attn) + 2 * shape.d_model * shape.vocab * logits)
    c = Cost(fwd_tokens=rows * n_query, fwd_flops=f, peak_tokens=n_query + n_key)
    if grad:
        c.bwd_tokens = rows * n_query
        c.bwd_flops = rows * (blocks * (2 * shape.block_params * n_query + 2 * attn)
                              + 2 * shape.d_model * shape.vocab * logits)
    return c


def full(shape: Shape, rows: float, n: float, logits: float = 1) -> Cost:
    """``rows`` prompts of ``n`` tokens, every block, no gradient."""
    return forward(shape, rows, n, n, logits=logits)


def ltv_training_cost(shape: Shape, task: str, layer: int, recipe: Any, *, n_train: int, n_val: int,
                      steps: int | None = None, validations: int | None = None, shots: int = 0,
                      prefill: bool = True) -> Cost:
    """One LTV trained on ``task`` at ``layer`` (last position) with ``recipe`` (a :class:`~ltvlib.ltv.TrainConfig`):
    ``steps`` and ``validations`` default to the schedule's maximum; ``prefill=False`` leaves out the prompts'
    one full pass (already paid by an earlier LTV of the same task in the process)."""
    ln = task_lengths(task)
    n, a = ln.prompt(shots), ln.answer
    per_epoch = math.ceil(recipe.samples_per_epoch / recipe.batch_size)
    steps = recipe.epochs * per_epoch if steps is None else steps
    validations = recipe.epochs + 1 if validations is None else validations
    n_v = min(n_val, recipe.val_queries) if recipe.val_queries else n_val
    c = Cost()
    if recipe.prefix_cache:
        if prefill:
            c.add(full(shape, n_train, n + a)).add(full(shape, n_v, n))
        c.add(forward(shape, steps * recipe.batch_size, 1 + a, n + a, first=layer, logits=a, grad=True))
        c.add(forward(shape, validations * n_v, 1, n, first=layer))
    else:
        c.add(forward(shape, steps * recipe.batch_size, n + a, n + a, logits=a, first=0))
        # backward through the blocks from the vector's on
        bwd = forward(shape, steps * recipe.batch_size, n + a, n + a, first=layer, logits=a, grad=True)
        c.bwd_tokens += bwd.bwd_tokens
        c.bwd_flops += bwd.bwd_flops
        c.add(full(shape, validations * n_v, n))
    return c


def eval_cost(shape: Shape, task: str, n_test: int, layer: int, n_vectors: int, shots: int = 0,
              prompts: bool = True) -> Cost:
    """``n_test`` prompts of ``task`` once in full (``prompts``), then ``n_vectors`` vectors at ``layer``."""
    n = task_lengths(task).prompt(shots)
    c = full(shape, n_test, n) if prompts else Cost()
    return c.add(forward(shape, n_test * n_vectors, 1, n, first=layer))


# ---------------------------------------------------------------------------------------------------------------
# the chapters


CHAPTERS = ("00", "01", "02", "03", "04", "05", "06", "07", "08")


def chapter_costs(shape: Shape, profile: str) -> dict[str, Cost]:
    """Per chapter (in the book's run order), what it computes at ``profile`` on a model of ``shape``."""
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

    def ltv(c: Cost, task: str, layer: int, seed: int, tag: str = "", *, recipe_: Any = None, n_train: int | None = None,
            n_val: int | None = None, shots: int = 0) -> None:
        key = (task, layer, seed, tag, shots)
        if key in trained:
            return
        trained.add(key)
        pkey = (task, shots, tag if recipe_ is not None else "")
        c.add(ltv_training_cost(shape, task, layer, recipe_ or recipe, n_train=n_train or rs.n_train,
                                n_val=n_val or rs.n_val, shots=shots, prefill=pkey not in prefilled))
        prefilled.add(pkey)

    # 00: headline LTVs at the middle layer; zero-shot, ICL and LTV accuracy on every task
    c = Cost()
    ov = P.overview_plan(profile)
    for t in ov.ltv_tasks:
        for s in ov.seeds:
            ltv(c, t, mid, s)
    for t in ov.tasks:
        c.add(eval_cost(shape, t, n_test, mid, len(ov.seeds)))
        for k in ov.icl_shots:
            c.add(full(shape, n_icl, task_lengths(t).prompt(k)))
    out["00"] = c

    # 01: LTV layer sweeps, extracted vectors (task vector, function vector) and their curves
    c = Cost()
    ex = P.extracted_plan(profile, n_layers=L)
    for t, layers in ex.ltv_layers.items():
        for layer in layers:
            ltv(c, t, layer, ex.seeds[0])
    tv, fv = ex.extraction.vanilla_tv, ex.extraction.function_vector
    for t in ex.tasks:
        ln = task_lengths(t)
        c.add(full(shape, tv.n_contexts, ln.prompt(tv.shots)))  # context states
        c.add(full(shape, tv.n_dev * len(ex.layers), ln.prompt(0)))  # layer choice on dev queries
        c.add(full(shape, fv.n_mean, ln.prompt(fv.shots)))  # mean head outputs
        c.add(forward(shape, fv.n_ie * L * shape.n_heads, 1, ln.prompt(fv.shots)))  # indirect effect per head
        for layer in ex.layers:
            c.add(eval_cost(shape, t, n_test, layer, 2 + (layer in ex.ltv_layers[t]), prompts=layer == ex.layers[0]))
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
            c.add(eval_cost(shape, t, fx.n_test or n_test, min(layers), len(seeds), shots=shots, prompts=False))
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
        c.add(full(shape, len(pf.seeds) * len(methods) * (cs.n_test or n_test), task_lengths(t).prompt(0)))
    out["03"] = c

    # 04: mechanism LTVs, OV reconstructions, key-head saliency and ablation (one head at a time, last position)
    c = Cost()
    kh = P.ov_key_heads_plan(profile)
    for t, mlayers in P.mechanism_plan(L, prof).items():
        for layer in mlayers:
            ltv(c, t, layer, 0)
            c.add(eval_cost(shape, t, n_test, layer, 2 + kh.n_random * kh.n_draws, prompts=False))
    for t in (*kh.label_tasks, *kh.open_tasks):
        n = task_lengths(t).prompt(0)
        c.add(forward(shape, kh.n_queries, n, n, grad=True))  # saliency: gradients to every head
        c.add(forward(shape, kh.n_queries * L * shape.n_heads, 1, n))  # ablation of each head
    out["04"] = c

    # 05: linearity: fits on held-out queries at each scale, random-vector controls
    c = Cost()
    lp = P.linearity_chapter_plan(profile, n_layers=L)
    lc = lp.config
    for t, layers in lp.layers.items():
        n = task_lengths(t).prompt(0)
        for layer in layers:
            ltv(c, t, layer, 0)
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
        c.add(eval_cost(shape, t, n_test, mid, len(gs.tasks) + gs.control_draws, prompts=False))
    comp = gp.composition
    for s in comp.seeds:
        for t in ("english_french", "gender_masc_fem"):
            ltv(c, t, mid, s)
    c.add(forward(shape, n_test * len(comp.scales) * len(comp.seeds), 1, task_lengths("antonym").prompt(0), first=mid))
    out["06"] = c

    # 07: the myopic-reward behaviour task: LTV, ICL, generated answers
    c = Cost()
    mp = P.myopic_plan(profile)
    ms = mp.sizes
    ltv(c, ms.task, mid, 0, recipe_=with_patience(recipe, ms.ltv_patience), n_train=ms.ltv_n_train, n_val=ms.ltv_n_val)
    ln = task_lengths(ms.task)
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
        c.add(eval_cost(shape, t, n_test, mid, 1))
    for t in ap.tasks["sweep"]:
        for layer in P.sweep_ltv_layers(L, prof, t):
            ltv(c, t, layer, 0)
    for t in ap.tasks["key_heads"]:
        c.add(forward(shape, ap.sizes.n_key_queries * L * shape.n_heads, 1, task_lengths(t).prompt(0)))
    out["08"] = c
    return out


def with_patience(recipe: Any, patience: int | None) -> Any:
    from ..ltv import with_config

    return recipe if patience is None else with_config(recipe, patience=patience)


def memory_gb(shape: Shape, cost: Cost, *, store_gib: float = 2.0) -> float:
    """Weights in bf16, the prompt store's cached keys and values (its 2 GiB bound, scaled from SmolLM2's
    per-token size to this model's) and the activations of the largest forward (about 20 values of width d per
    token and block held for the backward)."""
    weights = 2 * shape.n_params
    smol = 2 * 30 * 3 * 64 * 4  # SmolLM2-135M in fp32: the bound's reference
    store = store_gib * 2**30 * max(1.0, shape.kv_bytes_per_token / smol)
    acts = 20 * 2 * shape.d_model * shape.n_layers * cost.peak_tokens * 16  # batch 16
    return (weights + store + acts) / 1e9


def render(shape: Shape, profile: str, gpu: str, mfu: float, costs: dict[str, Cost]) -> str:
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
    return sum(c.flops for c in chapter_costs(model_shape(model), profile).values())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ltvlib.book plan", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--model", default="smollm2-135m",
                    help="registry name, Hugging Face id, local folder or shape (llama-8b, 32b, 70b)")
    ap.add_argument("--profile", default="paper", choices=("smoke", "cpu", "paper"))
    ap.add_argument("--gpu", default="h100", choices=sorted(GPUS))
    ap.add_argument("--mfu", type=float, default=0.4, help="fraction of the GPU's bf16 dense peak reached")
    ap.add_argument("--chapters", nargs="*", default=None, help="only these chapters (e.g. 00 03)")
    ap.add_argument("--cpu-gflops", type=float, default=None,
                    help="also print the whole book's seconds at this CPU rate (GFLOP/s)")
    args = ap.parse_args(argv)
    if not 0 < args.mfu <= 1:
        ap.error("--mfu must lie in (0, 1]")
    shape = model_shape(args.model)
    costs = chapter_costs(shape, args.profile)
    if args.chapters:
        costs = {k: v for k, v in costs.items() if k in args.chapters}
    print(render(shape, args.profile, args.gpu, args.mfu, costs))
    if args.cpu_gflops:
        total = sum(c.flops for c in costs.values())
        print(f"\nat {args.cpu_gflops:g} GFLOP/s: {total / args.cpu_gflops / 1e9:,.0f} s")
    return 0
