"""Key heads of a task vector: saliency, ablation at the last position, attention statistics.

Everything here looks at the **last prompt position**, where the paper injects its vectors and reads the
answer. A :class:`LastTokenRunner` computes the keys and values of every prompt token but the last once
(no vector injected at the last position can change them, attention being causal) and then runs only the
last token, so each measurement below costs one single-token forward per query.

- :func:`head_saliency`: ``S(l, h) = |a_{l,h} . dp(gold)/da_{l,h}|``, with ``a_{l,h}`` the output of query head
  ``h`` of layer ``l`` at the last position (its slice of the ``o_proj`` input, ``(head_dim,)``), the vector
  injected, ``p(gold)`` the probability of the gold answer's first token; ``|.|`` per query, then averaged
  over queries (the paper, Yang et al. 2026, section on key heads). :func:`top_heads` keeps the top fraction
  (10 % in the paper).
- :func:`ablate_heads`: a context manager that writes zeros (``mode="zero"``) or a mean output
  (``mode="mean"``) into the chosen heads' ``o_proj``-input slices at one prompt position (default the last);
  hooks are removed on exit, also after an error, and must have fired.
- :func:`attention_stats`: per head, the attention the last position pays to the first real token (the
  "sink"; left padding is skipped) and to itself (the final position).

The chapter-level helpers built on these (:mod:`ltvlib.study.key_heads`: ``cached_saliency``,
``key_head_experiment``) cache their results with :func:`ltvlib.cache.cached_json`, keyed by the vector, the
query sets and the source of the code they depend on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from ..heads import HeadPatch, check_head, head_outputs, o_proj
from ..hooks import Hook, first_input, hooked, with_first_input
from ..inject import VectorEdit, inject, resolve_positions
from ..kv_cache import KVPrefix, compute_prefix, forward_tokens
from ..memo import memo
from ..prompts import answer_ids, encode_prompts, pad_left
from ..sites import attention, check_layer
from ..stats import wilson_interval
from ..tasks import Example, Task, get_task

if TYPE_CHECKING:
    from ..models import LoadedModel

AblationMode = Literal["zero", "mean"]
Head = tuple[int, int]

# --------------------------------------------------------------------------------------------------------
# Running the last prompt token over a cached prefix
# --------------------------------------------------------------------------------------------------------


@dataclass
class LastTokenBatch:
    """One batch of prompts, ready to run its last token.

    Attributes:
        index: which examples of the runner (rows of this batch).
        ids: ``(batch, 1)`` last prompt token of each row.
        mask: ``(batch, prefix_len + 1)`` attention mask of the *whole* prompt (left-padded prefix, then the
            last token); pass it with ``offset`` to :func:`ltvlib.inject.inject` and to :func:`ablate_heads`.
        offset: ``prefix_len``, the prompt columns held in the KV cache.
        prefix: cached keys/values of every token but the last.
        gold: ``(batch,)`` first token of each gold answer.
    """

    index: list[int]
    ids: Tensor
    mask: Tensor
    offset: int
    prefix: KVPrefix
    gold: Tensor


class LastTokenRunner:
    """Zero-shot prompts of a task whose prefixes (all tokens but the last) are computed once.

    Only the last token is run afterwards, so hooks inside :meth:`forward` see tensors of sequence length
    1, and that column is every row's last prompt position.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        task: task or its name (gives the template and the answer format).
        examples: queries with gold answers.
        batch_size: rows per forward.

    Raises:
        ValueError: no examples, or a prompt of a single token (it has no prefix).
    """

    def __init__(self, lm: LoadedModel, task: Task | str, examples: Sequence[Example], *, batch_size: int = 64) -> None:
        self.lm = lm
        self.task = get_task(task) if isinstance(task, str) else task
        self.examples = list(examples)
        if not self.examples:
            raise ValueError(f"no examples for task {self.task.name!r}")
        prompts = encode_prompts(lm.tokenizer, self.task, self.examples)
        rows = prompts.full_rows()
        short = [i for i, r in enumerate(rows) if len(r) < 2]
        if short:
            raise ValueError(f"prompts {short[:5]} of task {self.task.name!r} have a single token: no prefix to cache")
        gold = [ids[0] for ids in answer_ids(lm.tokenizer, self.task, [e.output for e in self.examples])]
        self.batches: list[LastTokenBatch] = []
        pad = lm.tokenizer.pad_token_id
        for start in range(0, len(rows), batch_size):
            index = list(range(start, min(start + batch_size, len(rows))))
            ids, mask = pad_left([rows[i][:-1] for i in index], pad, lm.device)
            prefix = compute_prefix(lm, ids, mask)
            last = torch.tensor([[rows[i][-1]] for i in index], device=lm.device)
            whole = torch.cat([mask, torch.ones_like(last)], dim=1)
            self.batches.append(LastTokenBatch(
                index=index, ids=last, mask=whole, offset=mask.shape[1], prefix=prefix,
                gold=torch.tensor([gold[i] for i in index], device=lm.device),
            ))

    def __len__(self) -> int:
        return len(self.examples)

    def forward(self, batch: LastTokenBatch, edits: Sequence[VectorEdit] = ()) -> Tensor:
        """Logits ``(batch, vocab)`` at the last prompt position, with ``edits`` injected (each at its site, in its
        mode; positions resolved against the whole prompt)."""
        with inject(self.lm, edits, attention_mask=batch.mask, offset=batch.offset):
            logits, _ = forward_tokens(self.lm, batch.ids, torch.ones_like(batch.ids), prefix=batch.prefix)
        return logits[:, -1]


def last_token_runner(lm: LoadedModel, task: str, examples: Sequence[Example]) -> LastTokenRunner:
    """A :class:`LastTokenRunner`, kept in the model's memo (:mod:`ltvlib.memo`) for its last four (task,
    examples)."""
    return memo(lm, "key_heads.runners", (task, tuple(examples)), lambda: LastTokenRunner(lm, task, examples), keep=4)


# --------------------------------------------------------------------------------------------------------
# Head sets
# --------------------------------------------------------------------------------------------------------


def check_heads(lm: LoadedModel, heads: Sequence[Head]) -> list[Head]:
    """Validate a head set: non-empty, each ``(layer, head)`` in range, no duplicates.

    Returns:
        The heads with layers normalised to ``[0, n_layers)``, in the given order.

    Raises:
        ValueError: empty set, out-of-range layer or head, or a duplicate; the message names it.
    """
    geo = lm.geometry
    heads = list(heads)
    if not heads:
        raise ValueError("the head set is empty: give at least one (layer, head) pair")
    out = []
    for pair in heads:
        if len(pair) != 2:
            raise ValueError(f"head {pair!r} is not a (layer, head) pair")
        out.append((check_layer(int(pair[0]), geo.n_layers), check_head(int(pair[1]), geo.n_heads)))
    if len(set(out)) != len(out):
        raise ValueError(f"the head set repeats a head: {heads}")
    return out


def top_heads(saliency: Tensor, fraction: float = 0.1, *, min_layer: int = 0) -> list[Head]:
    """The ``round(fraction * n_layers * n_heads)`` (at least one) most salient heads, best first.

    Args:
        saliency: ``(n_layers, n_heads)``.
        fraction: share of *all* heads, in ``(0, 1]``; the paper's key heads are the top 10 %.
        min_layer: choose only among heads of layers ``>= min_layer`` (e.g. the injection layer: the heads
            that can read the vector); the count stays a share of all heads, capped at the candidates.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction {fraction!r} must lie in (0, 1]")
    n_layers, n_heads = saliency.shape
    if not 0 <= min_layer < n_layers:
        raise ValueError(f"min_layer {min_layer!r} must lie in [0, {n_layers - 1}]")
    k = min(max(1, round(fraction * n_layers * n_heads)), (n_layers - min_layer) * n_heads)
    order = torch.argsort(saliency[min_layer:].flatten(), descending=True, stable=True)[:k].tolist()
    return [(min_layer + i // n_heads, i % n_heads) for i in order]


def random_heads(lm: LoadedModel, n: int, seed: int, *, exclude: Sequence[Head] = (), min_layer: int = 0) -> list[Head]:
    """``n`` heads drawn uniformly without replacement (seeded) from the heads of layers ``>= min_layer`` that
    are not in ``exclude``."""
    geo = lm.geometry
    skip = set(map(tuple, exclude))
    pool = [(l, h) for l in range(min_layer, geo.n_layers) for h in range(geo.n_heads) if (l, h) not in skip]
    if not 1 <= n <= len(pool):
        raise ValueError(f"cannot draw {n} random heads from {len(pool)} candidates")
    return sorted(random.Random(seed).sample(pool, n))


# --------------------------------------------------------------------------------------------------------
# Where the key heads sit: the U shape against the uniform distribution over post-injection layers
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UShapeTest:
    """Do the key heads after the injection layer crowd into its first and last thirds?

    Only heads of layers ``>= layer`` count (block ``layer``'s attention already reads the vector; earlier
    heads cannot). Those ``m = n_layers - layer`` layers are cut into thirds by rank ``r = l' - layer``:
    third ``floor(3 r / m)``. Under the null, the key heads are a uniformly random set of heads of those
    layers, so the count in the two outer thirds is hypergeometric (population ``m * n_heads`` heads, of
    which ``outer_layers * n_heads`` are in the outer thirds, ``n`` drawn without replacement).

    Attributes:
        layer, n_layers, n_heads: the injection layer and the model's shape.
        n: key heads at layers ``>= layer`` (the ones tested); ``n_before``: key heads before it (left out).
        thirds_layers: layers per third (first, middle, last).
        counts: key heads per third; ``expected``: their expectation under the null (``n`` times the third's
            share of the layers).
        outer: key heads in the first and last thirds; ``expected_fraction``: the outer thirds' share of the
            layers (2/3 when ``m`` is a multiple of 3).
        fraction: ``outer / n``; ``fraction_low``, ``fraction_high``: its 95 % Wilson interval.
        effect: ``fraction - expected_fraction``, with ``effect_low``, ``effect_high`` (the Wilson interval
            shifted by the constant expectation): the verdict input.
        p_value: exact one-sided hypergeometric ``P(X >= outer)`` under the null.
        chi2, chi2_p: Pearson's goodness of fit of ``counts`` to ``expected`` (2 degrees of freedom, survival
            ``exp(-chi2 / 2)``); an approximation, poor when an expected count is below about 5.
    """

    layer: int
    n_layers: int
    n_heads: int
    n: int
    n_before: int
    thirds_layers: tuple[int, int, int]
    counts: tuple[int, int, int]
    expected: tuple[float, float, float]
    outer: int
    expected_fraction: float
    fraction: float
    fraction_low: float
    fraction_high: float
    effect: float
    effect_low: float
    effect_high: float
    p_value: float
    chi2: float
    chi2_p: float

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


def hypergeometric_sf(k: int, population: int, successes: int, draws: int) -> float:
    """Exact ``P(X >= k)`` for ``X`` hypergeometric: ``draws`` without replacement from ``population`` items,
    ``successes`` of them marked."""
    if not 0 <= successes <= population or not 0 <= draws <= population:
        raise ValueError(f"hypergeometric needs 0 <= successes, draws <= population, got {successes}, {draws}, {population}")
    total = math.comb(population, draws)
    top = min(successes, draws)
    tail = sum(math.comb(successes, i) * math.comb(population - successes, draws - i) for i in range(max(k, 0), top + 1))
    return tail / total


def u_shape_test(heads: Sequence[Head], layer: int, n_layers: int, n_heads: int) -> UShapeTest:
    """The U-shape statistic of a key-head set (see :class:`UShapeTest`).

    Args:
        heads: ``(layer, head)`` pairs, e.g. :func:`top_heads` of the saliency (any layers; those before
            ``layer`` are counted in ``n_before`` and left out).
        layer: the injection layer (non-negative).
        n_layers, n_heads: the model's shape.

    Raises:
        ValueError: fewer than 3 layers from ``layer`` on (no thirds), a head out of range or repeated, or no
            key head at layers ``>= layer``.
    """
    if not 0 <= layer < n_layers:
        raise ValueError(f"injection layer {layer} out of range [0, {n_layers - 1}]")
    m = n_layers - layer
    if m < 3:
        raise ValueError(f"the U shape needs at least 3 layers from the injection layer {layer} on, got {m}")
    pairs = [(int(l), int(h)) for l, h in heads]
    bad = [p for p in pairs if not (0 <= p[0] < n_layers and 0 <= p[1] < n_heads)]
    if bad or len(set(pairs)) != len(pairs):
        raise ValueError(f"key heads must be distinct (layer, head) pairs within ({n_layers}, {n_heads}); "
                         f"bad: {bad[:5] or 'a repeated head'}")
    after = [l for l, _ in pairs if l >= layer]
    if not after:
        raise ValueError(f"no key head at or after the injection layer {layer}")
    third = [3 * r // m for r in range(m)]
    sizes = tuple(third.count(t) for t in range(3))
    counts = tuple(sum(1 for l in after if third[l - layer] == t) for t in range(3))
    n = len(after)
    expected = tuple(n * s / m for s in sizes)
    outer = counts[0] + counts[2]
    p0 = (sizes[0] + sizes[2]) / m
    lo, hi = wilson_interval(outer, n)
    chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected))
    p = hypergeometric_sf(outer, m * n_heads, (sizes[0] + sizes[2]) * n_heads, n)
    return UShapeTest(
        layer=layer, n_layers=n_layers, n_heads=n_heads, n=n, n_before=len(pairs) - n,
        thirds_layers=sizes, counts=counts, expected=expected, outer=outer,  # type: ignore[arg-type]
        expected_fraction=p0, fraction=outer / n, fraction_low=lo, fraction_high=hi, effect=outer / n - p0,
        effect_low=lo - p0, effect_high=hi - p0, p_value=p, chi2=chi2, chi2_p=math.exp(-chi2 / 2),
    )


# --------------------------------------------------------------------------------------------------------
# Ablation
# --------------------------------------------------------------------------------------------------------


@contextmanager
def ablate_heads(
    lm: LoadedModel,
    heads: Sequence[Head],
    *,
    attention_mask: Tensor,
    mode: AblationMode = "zero",
    means: Tensor | None = None,
    position: int = -1,
    offset: int = 0,
) -> Iterator[None]:
    """Zero or mean-ablate heads at one prompt position while the ``with`` body runs forwards.

    The site is the head's slice of the ``o_proj`` input (``ltvlib.heads``), *replaced* by zeros or by
    ``means[layer, head]``; other heads, other positions and the rest of the forward are untouched.

    Args:
        lm: the model.
        heads: ``(layer, head)`` pairs (query-head indices).
        attention_mask: ``(batch, prompt_len)`` mask of the whole prompt (including a cached prefix).
        mode: ``"zero"`` or ``"mean"``.
        means: ``(n_layers, n_heads, head_dim)`` mean head outputs (see :func:`mean_head_outputs`); required
            for ``mode="mean"``.
        position: prompt position (``-1`` = last token; see :mod:`ltvlib.inject`).
        offset: prompt columns held in the KV cache.

    Raises:
        ValueError: empty or out-of-range head set, unknown mode, missing or misshapen ``means``.
        HookNotFiredError: (on exit) no forward went through an ablated layer.
    """
    heads = check_heads(lm, heads)
    geo = lm.geometry
    if mode not in ("zero", "mean"):
        raise ValueError(f"unknown ablation mode {mode!r}; allowed: 'zero', 'mean'")
    if mode == "mean":
        expected = (geo.n_layers, geo.n_heads, geo.head_dim)
        if means is None or tuple(means.shape) != expected:
            got = None if means is None else tuple(means.shape)
            raise ValueError(f"mean ablation needs means of shape {expected}, got {got}")
    patches = []
    for layer, head in heads:
        value = means[layer, head] if mode == "mean" else torch.zeros(geo.head_dim)  # type: ignore[index]
        patches.append(HeadPatch(layer, head, position, value.to(lm.device)))
    with head_outputs(lm, patches=patches, attention_mask=attention_mask, offset=offset, mode="replace"):
        yield


@torch.no_grad()
def mean_head_outputs(lm: LoadedModel, runner: LastTokenRunner, edits: Sequence[VectorEdit] = ()) -> Tensor:
    """Mean output of every head at the last position over the runner's queries, ``edits`` injected.

    Returns:
        ``(n_layers, n_heads, head_dim)``.
    """
    geo = lm.geometry
    total = torch.zeros(geo.n_layers, geo.n_heads, geo.head_dim, dtype=torch.float64, device=lm.device)
    layers = list(range(geo.n_layers))
    for batch in runner.batches:
        with head_outputs(lm, record=layers) as rec:
            runner.forward(batch, edits)
        total += torch.stack([rec[l][:, -1].double().sum(0) for l in layers])
    return (total / len(runner)).to(lm.dtype)


@torch.no_grad()
def head_accuracy(
    lm: LoadedModel,
    runner: LastTokenRunner,
    edits: Sequence[VectorEdit] = (),
    *,
    heads: Sequence[Head] | None = None,
    mode: AblationMode = "zero",
    means: Tensor | None = None,
) -> dict[str, Any]:
    """First-token accuracy (argmax over the whole vocabulary) with ``edits`` injected and ``heads`` ablated
    at the last position (None: nothing ablated).

    Returns:
        ``{"accuracy", "gold_prob" (mean), "correct" (per query), "n"}``; for classification tasks also
        ``"label_accuracy"`` and ``"label_correct"``: the argmax over the first tokens of the label words only
        (as :func:`ltvlib.evaluate.evaluate` reports it), else None.
    """
    correct: list[bool] = []
    label_correct: list[bool] = []
    labels = label_first_tokens(lm, runner.task)
    gold_prob = 0.0
    for batch in runner.batches:
        if heads is None:
            logits = runner.forward(batch, edits)
        else:
            with ablate_heads(lm, heads, attention_mask=batch.mask, offset=batch.offset, mode=mode, means=means):
                logits = runner.forward(batch, edits)
        logits = logits.float()
        correct += (logits.argmax(-1) == batch.gold).tolist()
        if labels is not None:
            ids = torch.tensor(labels, device=logits.device)
            label_correct += (ids[logits[:, ids].argmax(-1)] == batch.gold).tolist()
        gold_prob += float(logits.softmax(-1).gather(1, batch.gold[:, None]).sum())
    n = len(correct)
    return {"accuracy": sum(correct) / n, "gold_prob": gold_prob / n, "correct": correct, "n": n,
            "label_accuracy": sum(label_correct) / n if labels is not None else None,
            "label_correct": label_correct if labels is not None else None}


def label_first_tokens(lm: LoadedModel, task: Task) -> list[int] | None:
    """First tokens of a classification task's label words (in label order), None for open-vocabulary tasks.

    Raises:
        ValueError: two labels share their first token (a label-restricted argmax could not tell them apart).
    """
    if not task.labels:
        return None
    first = [ids[0] for ids in answer_ids(lm.tokenizer, task, task.labels)]
    if len(set(first)) != len(first):
        raise ValueError(f"labels {task.labels} of task {task.name!r} share first tokens {first}")
    return first


# --------------------------------------------------------------------------------------------------------
# Saliency
# --------------------------------------------------------------------------------------------------------


@contextmanager
def _probe_last_column(lm: LoadedModel, probes: dict[int, Tensor]) -> Iterator[dict[int, Tensor]]:
    """Add ``probes[layer]`` (``(batch, n_heads * head_dim)``, zeros that require grad) to the ``o_proj`` input
    at the last column of the forward, and capture that input (detached); hooks removed and checked."""
    captured: dict[int, Tensor] = {}

    def make(layer: int) -> Any:
        def pre_hook(module: Any, args: tuple, kwargs: dict) -> Any:
            x = first_input(args, kwargs)
            captured[layer] = x[:, -1].detach()
            x = torch.cat([x[:, :-1], (x[:, -1] + probes[layer].to(x.dtype))[:, None]], dim=1)
            return with_first_input(args, kwargs, x)

        return pre_hook

    hooks = [Hook(o_proj(lm, layer), "pre", make(layer), f"layer {layer}") for layer in probes]
    with hooked(hooks, what="saliency hooks (o_proj input)"):
        yield captured


def head_saliency(lm: LoadedModel, runner: LastTokenRunner, edits: Sequence[VectorEdit] = ()) -> Tensor:
    """Gradient-times-activation saliency of every head at the last position, ``edits`` injected.

    ``S(l, h) = mean over queries of |a_{l,h} . dp(gold)/da_{l,h}|`` where ``a_{l,h}`` is head ``h``'s slice of
    layer ``l``'s ``o_proj`` input at the last prompt position and ``p(gold)`` the softmax probability of the
    gold answer's first token there. One forward and backward per batch gives every head at once.

    Returns:
        ``(n_layers, n_heads)`` float tensor.
    """
    geo = lm.geometry
    width = geo.n_heads * geo.head_dim
    total = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    for batch in runner.batches:
        b = len(batch.index)
        probes = {l: torch.zeros(b, width, device=lm.device, dtype=lm.dtype, requires_grad=True)
                  for l in range(geo.n_layers)}
        edits_here = [replace(e, vector=e.vector.detach()) for e in edits]  # keeps each edit's site and mode
        with torch.enable_grad(), _probe_last_column(lm, probes) as acts:
            logits = runner.forward(batch, edits_here)
            p = logits.float().softmax(-1).gather(1, batch.gold[:, None])
            p.sum().backward()
        for l in range(geo.n_layers):
            grad = probes[l].grad
            assert grad is not None
            s = (acts[l].float() * grad.float()).view(b, geo.n_heads, geo.head_dim).sum(-1).abs()
            total[l] += s.sum(0).double().cpu()
    return (total / len(runner)).float()


# --------------------------------------------------------------------------------------------------------
# Attention statistics
# --------------------------------------------------------------------------------------------------------


@contextmanager
def eager_attention(lm: LoadedModel) -> Iterator[None]:
    """Switch the model to eager attention (which returns attention probabilities) for the ``with`` body."""
    before = lm.model.config._attn_implementation
    lm.model.set_attn_implementation("eager")
    try:
        yield
    finally:
        lm.model.set_attn_implementation(before)


@dataclass(frozen=True)
class AttentionStats:
    """Attention of the last prompt position, per head, averaged over queries.

    Attributes:
        first: ``(n_layers, n_heads)`` mass on each prompt's first real token (padding skipped).
        final: ``(n_layers, n_heads)`` mass on the last position itself.
        n: number of queries.
    """

    first: Tensor
    final: Tensor
    n: int


@torch.no_grad()
def attention_stats(lm: LoadedModel, runner: LastTokenRunner, edits: Sequence[VectorEdit] = ()) -> AttentionStats:
    """Where the last position's attention goes, per head, with ``edits`` injected.

    Runs with eager attention (the probabilities are the second output of each attention module). The first
    real token is found from the prompt's attention mask, so left padding never counts as the first token;
    padded columns get zero probability from the mask. For prompts of one token, first and final coincide.
    """
    geo = lm.geometry
    first = torch.zeros(geo.n_layers, geo.n_heads, dtype=torch.float64)
    final = torch.zeros_like(first)
    for batch in runner.batches:
        probs: dict[int, Tensor] = {}
        hooks = []
        for l in range(geo.n_layers):
            def hook(module: Any, args: tuple, kwargs: dict, output: Any, l: int = l, probs: dict = probs) -> None:
                if not isinstance(output, tuple) or output[1] is None:
                    raise RuntimeError(f"attention of layer {l} returned no probabilities (not eager?)")
                probs[l] = output[1][:, :, -1].detach()  # (batch, n_heads, key_len)

            hooks.append(Hook(attention(lm, l), "post", hook, f"layer {l}"))
        with hooked(hooks, what="attention hooks"), eager_attention(lm):
            runner.forward(batch, edits)
        first_col = resolve_positions(batch.mask, [0])[:, 0]
        rows = torch.arange(len(batch.index), device=first_col.device)
        for l in range(geo.n_layers):
            w = probs[l].double()
            first[l] += w[rows, :, first_col].sum(0).cpu()
            final[l] += w[:, :, -1].sum(0).cpu()
    n = len(runner)
    return AttentionStats(first=(first / n).float(), final=(final / n).float(), n=n)
