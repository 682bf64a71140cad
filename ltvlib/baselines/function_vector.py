"""Function Vectors (Todd et al., *Function Vectors in Large Language Models*, ICLR 2024).

Recipe (defaults in :class:`FunctionVectorConfig`):

1. **Mean head outputs and writes.** Over ``n_mean`` clean ``shots``-shot prompts (query and demonstrations
   drawn from the training split, template ``Q: {x}\\nA: {y}\\n\\n``), average every head's output at the
   last token (the ``head_outputs`` site, before ``o_proj``, :mod:`ltvlib.heads`; ``(n_layers, n_heads,
   head_dim)``) and what it writes into the residual stream there (:func:`ltvlib.heads.head_writes`;
   ``(n_layers, n_heads, d_model)``).
2. **Causal indirect effect.** On ``n_ie`` prompts whose demonstration labels are shuffled, replace one
   head's last-token output by its mean and measure the gain in probability of the gold answer's first
   token: ``IE(l, h) = mean over prompts of p(gold | patched) - p(gold | corrupted)``.
3. **Function vector.** ``FV = sum over the top-k heads of their mean write``, a ``(d_model,)`` vector *added*
   to the residual stream at the *output* of one block (default ``L // 3``) at the last prompt position.
   Todd et al. sum the heads' mean outputs in the residual stream's space. In Llama, Mistral and Qwen2 a
   head's write is ``W_O[:, slice(h)] @ output``, so the sum is ``W_O[:, slice(h)] @ mean(l, h)``; Gemma 3
   normalises the attention output before adding it, and a head's write is ``g * W_O[:, slice(h)] @ output
   / rms(attention output)`` at each prompt (:func:`ltvlib.heads.head_writes`), averaged over prompts. Left
   out, that norm made Gemma-3-270M's Antonym vector 300 times too small (|FV| 24.6 against 7332 with
   n_mean=20, n_ie=5; the stream entering block 7 has norm about 3500).

Every patch in step 2 is at the last token, which cannot change the keys and values of earlier tokens. So
the *cached* path computes each corrupted prompt's prefix once and runs all ``n_layers * n_heads`` patched
copies (plus the unpatched one) as positions of one sequence after that prefix, each attending the prefix and
itself only (:func:`ltvlib.kv_cache.forward_alternatives`); the *full* path is the
straightforward one (one full forward per head at batch size 1). Both give the same numbers
(``tests/test_function_vector.py``; ``bench/fv_head_scan.py`` compares them on the default model).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
from torch import Tensor

from ..cache import atomic_write_bytes, code_version
from ..heads import HeadPatch, check_head, head_outputs, head_writes
from ..inject import Mode, Site, VectorEdit
from ..kv_cache import KVPrefix, compute_prefix, forward_alternatives, forward_tokens
from ..prompts import EncodedPrompts, answer_ids, encode_prompts, pad_left, sample_demos
from ..sites import check_layer
from ..task_vector import apply_edits, placement_metadata
from ..tasks import Example, Task, get_task

if TYPE_CHECKING:
    from ..models import LoadedModel

IEMethod = Literal["cached", "full"]


@dataclass(frozen=True)
class FunctionVectorConfig:
    """Function-vector extraction; defaults are Todd et al. (2024).

    Attributes:
        shots: demonstrations per prompt (10 in the paper).
        n_mean: clean prompts averaged for the mean head outputs (100 in the paper; their public code matched
            this only after a later fix).
        n_ie: corrupted (shuffled-label) prompts for the indirect effect (25 in the paper).
        k: heads summed into the vector. The paper uses 10 for GPT-J (28 x 16 = 448 heads, about 2 %) and
            models of similar size, and more heads for its largest models; with 30 x 9 = 270 heads in
            SmolLM2-135M, 10 heads is about 4 %. Scale ``k`` with the number of heads when comparing models.
        layer: default injection layer (block output); None = ``n_layers // 3`` (the paper's layer 9 of 28
            for GPT-J, about a third of the depth).
        seed: seeds the prompts (queries, demonstrations and label shuffles).
    """

    shots: int = 10
    n_mean: int = 100
    n_ie: int = 25
    k: int = 10
    layer: int | None = None
    seed: int = 0


@dataclass
class FunctionVector:
    """An extracted function vector and how it was made.

    Attributes:
        vector: ``(d_model,)``, added at the output of block ``layer`` at the last prompt position.
        heads: the top-k ``(layer, head)`` pairs, best first.
        layer: default injection layer (block output).
        indirect_effect: ``(n_layers, n_heads)`` mean indirect effect of every head.
        mean_outputs: ``(n_layers, n_heads, head_dim)`` mean head outputs on clean prompts.
        mean_writes: ``(n_layers, n_heads, d_model)`` mean of what each head writes into the residual stream
            at the last token of the clean prompts (:func:`ltvlib.heads.head_writes`); ``vector`` is the sum
            of its rows for ``heads``.
        model, task, config: provenance; seconds: extraction wall time.
    """

    vector: Tensor
    heads: tuple[tuple[int, int], ...]
    layer: int
    indirect_effect: Tensor
    mean_outputs: Tensor
    mean_writes: Tensor
    model: str
    task: str
    config: FunctionVectorConfig
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    site: ClassVar[Site] = "block_output"
    mode: ClassVar[Mode] = "add"

    def edits(self, layer: int | None = None, scale: float = 1.0) -> list[VectorEdit]:
        """The vector as an injection at the last token: ``scale`` times it added to the output of block
        ``layer`` (default: the FV's own layer). Positional (``fv.edits(5, 2.0)``) or keyword
        (:class:`~ltvlib.task_vector.TaskVector`) arguments."""
        return [VectorEdit(self.layer if layer is None else layer, -1, scale * self.vector, site="block_output",
                           mode="add")]

    def apply(self, lm: LoadedModel, *, layer: int | None = None, scale: float = 1.0) -> AbstractContextManager[None]:
        """A context manager adding the vector in every prompt forward inside it (:func:`ltvlib.inject.apply`
        over :meth:`edits`); its hooks are removed on exit."""
        return apply_edits(lm, self.edits(layer=layer, scale=scale))

    def metadata(self) -> dict[str, Any]:
        return {
            "heads": [list(h) for h in self.heads], "layer": self.layer, "model": self.model, "task": self.task,
            "config": asdict(self.config), "seconds": self.seconds, "timings": self.timings,
        }

    def save(self, path: str | Path) -> Path:
        """Tensors as safetensors, the rest as JSON string metadata (atomically)."""
        from safetensors.torch import save

        tensors = {"vector": self.vector, "indirect_effect": self.indirect_effect, "mean_outputs": self.mean_outputs,
                   "mean_writes": self.mean_writes}
        tensors = {k: v.detach().float().cpu().contiguous() for k, v in tensors.items()}
        meta = {"function_vector": json.dumps(self.metadata()), "code_version": code_version(),
                **placement_metadata(self.edits())}
        return atomic_write_bytes(path, save(tensors, metadata=meta))

    @classmethod
    def load(cls, path: str | Path) -> FunctionVector:
        """Read a file written by :meth:`save` (files without the placement keys read as before).

        Raises:
            ValueError: the file's ``site`` or ``mode`` is not a function vector's (block output, add).
        """
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            stored = f.metadata()
            meta = json.loads(stored["function_vector"])
            tensors = {k: f.get_tensor(k) for k in ("vector", "indirect_effect", "mean_outputs", "mean_writes")}
        for key, want in (("site", cls.site), ("mode", cls.mode)):
            if stored.get(key, want) != want:
                raise ValueError(f"{path}: a function vector goes to {key} {want!r}, the file says {stored[key]!r}")
        meta["config"] = FunctionVectorConfig(**meta["config"])
        meta["heads"] = tuple(tuple(h) for h in meta["heads"])
        return cls(**tensors, **meta)


def _chunks(lengths: Sequence[int], max_tokens: int, max_rows: int = 64) -> list[list[int]]:
    """Index groups (similar lengths together) whose padded size stays under ``max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = max([lengths[j] for j in current] + [lengths[i]])
        if current and (width * (len(current) + 1) > max_tokens or len(current) >= max_rows):
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def clean_prompts(lm: LoadedModel, task: Task, pool: Sequence[Example], *, shots: int, n: int, seed: int) -> EncodedPrompts:
    """``n`` clean ``shots``-shot prompts: a query from ``pool`` and demonstrations from the rest of it."""
    rng = random.Random(f"fv-clean-{seed}")
    queries = [rng.choice(pool) for _ in range(n)]
    demos = [sample_demos(pool, shots, rng, exclude=q.input) for q in queries]
    return encode_prompts(lm.tokenizer, task, queries, demos=demos)


def corrupted_prompts(
    lm: LoadedModel, task: Task, pool: Sequence[Example], *, shots: int, n: int, seed: int
) -> tuple[EncodedPrompts, list[int]]:
    """``n`` prompts whose demonstration labels are shuffled among the demonstrations, and the gold first
    token of each query's true answer."""
    rng = random.Random(f"fv-corrupt-{seed}")
    queries = [rng.choice(pool) for _ in range(n)]
    demos = []
    for q in queries:
        ds = sample_demos(pool, shots, rng, exclude=q.input)
        labels = [d.output for d in ds]
        rng.shuffle(labels)
        demos.append([Example(d.input, y) for d, y in zip(ds, labels)])
    prompts = encode_prompts(lm.tokenizer, task, queries, demos=demos)
    gold = [ids[0] for ids in answer_ids(lm.tokenizer, task, [q.output for q in queries])]
    return prompts, gold


@dataclass(frozen=True)
class HeadMeans:
    """Means over prompts at the last token, per head.

    Attributes:
        outputs: ``(n_layers, n_heads, head_dim)`` head outputs (the ``o_proj`` input slices).
        writes: ``(n_layers, n_heads, d_model)`` what each head writes into the residual stream
            (:func:`ltvlib.heads.head_writes` at each prompt, then the mean).
    """

    outputs: Tensor
    writes: Tensor


@torch.no_grad()
def head_means(lm: LoadedModel, prompts: EncodedPrompts, *, max_tokens: int = 4096) -> HeadMeans:
    """Mean over prompts of every head's output and write at the last token (one forward per chunk)."""
    rows = prompts.full_rows()
    geo = lm.geometry
    layers = list(range(geo.n_layers))
    outputs = torch.zeros(geo.n_layers, geo.n_heads, geo.head_dim, dtype=torch.float64)
    writes = torch.zeros(geo.n_layers, geo.n_heads, geo.d_model, dtype=torch.float64)
    for group in _chunks([len(r) for r in rows], max_tokens):
        ids, mask = pad_left([rows[i] for i in group], lm.tokenizer.pad_token_id, lm.device)
        with head_outputs(lm, record=layers, attention_mask=mask, record_positions=[-1]) as cap:
            forward_tokens(lm, ids, mask)
        outputs += torch.stack([cap[l][:, 0].double().sum(0).cpu() for l in layers])
        writes += torch.stack([head_writes(lm, l, cap[l][:, 0]).double().sum(0).cpu() for l in layers])
    return HeadMeans(outputs=(outputs / len(rows)).float(), writes=(writes / len(rows)).float())


def mean_head_outputs(lm: LoadedModel, prompts: EncodedPrompts, *, max_tokens: int = 4096) -> Tensor:
    """Mean over prompts of every head's output at the last token: ``(n_layers, n_heads, head_dim)``."""
    return head_means(lm, prompts, max_tokens=max_tokens).outputs


def _prefixes(lm: LoadedModel, rows: Sequence[Sequence[int]], max_tokens: int) -> Iterator[tuple[int, KVPrefix]]:
    """Per prompt, the unpadded keys/values of all its tokens but the last (batch 1 each), computed a chunk
    of prompts at a time so that only one chunk is held in memory."""
    for group in _chunks([len(r) - 1 for r in rows], max_tokens):
        heads = [rows[i][:-1] for i in group]
        ids, mask = pad_left(heads, lm.tokenizer.pad_token_id, lm.device)
        kv = compute_prefix(lm, ids, mask)
        for b, i in enumerate(group):
            start = kv.length - len(heads[b])
            yield i, KVPrefix(
                [k[b : b + 1, :, start:] for k in kv.keys], [v[b : b + 1, :, start:] for v in kv.values],
                kv.attention_mask[b : b + 1, start:], kv.next_position[b : b + 1],
            )


def _gold_prob(logits: Tensor, gold: int) -> Tensor:
    return logits[:, -1].float().softmax(-1)[:, gold]


@torch.no_grad()
def indirect_effects(
    lm: LoadedModel,
    prompts: EncodedPrompts,
    gold: Sequence[int],
    means: Tensor,
    *,
    method: IEMethod = "cached",
    heads: Sequence[tuple[int, int]] | None = None,
    max_cache_bytes: int = 512 * 2**20,
    max_tokens: int = 4096,
) -> Tensor:
    """Indirect effect of patching each head's mean output into the last token of each prompt.

    Args:
        prompts: corrupted prompts; gold: the gold first token of each.
        means: ``(n_layers, n_heads, head_dim)`` mean head outputs.
        method: ``"cached"`` (each prompt's prefix once, then the heads' patched copies of its last token as
            positions of one sequence after it, up to 512 per pass) or ``"full"`` (one full forward per head and
            prompt at batch size 1: the reference).
        heads: the ``(layer, head)`` pairs to measure (default: all).
        max_cache_bytes: cached path only: bound on the keys/values materialised per batched pass.

    Returns:
        ``(n_prompts, n_heads_measured)``: ``p(gold | head patched) - p(gold | corrupted)`` per prompt.
    """
    geo = lm.geometry
    pairs = [(check_layer(l, geo.n_layers), check_head(h, geo.n_heads)) for l, h in heads] if heads is not None else [
        (l, h) for l in range(geo.n_layers) for h in range(geo.n_heads)
    ]
    if not pairs:
        raise ValueError("no heads to measure")
    rows = prompts.full_rows()
    out = torch.zeros(len(rows), len(pairs))
    if method == "full":
        for i, row in enumerate(rows):
            ids = torch.tensor([row], device=lm.device)
            mask = torch.ones_like(ids)
            base = _gold_prob(forward_tokens(lm, ids, mask)[0], gold[i])
            for j, (l, h) in enumerate(pairs):
                with head_outputs(lm, patches=[HeadPatch(l, h, -1, means[l, h].to(lm.device))], attention_mask=mask):
                    p = _gold_prob(forward_tokens(lm, ids, mask)[0], gold[i])
                out[i, j] = (p - base).item()
        return out
    if method != "cached":
        raise ValueError(f"unknown method {method!r}; allowed: 'cached', 'full'")
    per_token = 2 * geo.n_layers * geo.n_kv_heads * geo.head_dim * lm.dtype.itemsize
    for i, prefix in _prefixes(lm, rows, max_tokens):
        # job 0 of the first pass is the unpatched prompt; every other job patches one head. The jobs of a pass are
        # positions of one sequence after the prompt's cached prefix (forward_alternatives): the prefix's keys and
        # values are read once per pass, not copied once per job.
        jobs: list[int | None] = [None, *range(len(pairs))]
        per_pass = max(2, min(512, max_cache_bytes // per_token - prefix.length))
        probs = torch.zeros(len(jobs))
        for start in range(0, len(jobs), per_pass):
            block = jobs[start : start + per_pass]
            n = len(block)
            full_mask = torch.cat([prefix.attention_mask, torch.ones((1, n), dtype=torch.long, device=lm.device)], 1)
            patches = [
                HeadPatch(pairs[j][0], pairs[j][1], r - n, means[pairs[j]].to(lm.device), rows=[0])
                for r, j in enumerate(block) if j is not None
            ]
            tokens = torch.full((n,), rows[i][-1], device=lm.device)
            with head_outputs(lm, patches=patches, attention_mask=full_mask, offset=prefix.length):
                logits = forward_alternatives(lm, tokens, prefix)
            probs[start : start + n] = logits.float().softmax(-1)[:, gold[i]].cpu()
        out[i] = probs[1:] - probs[0]
    return out


def top_heads(indirect_effect: Tensor, k: int) -> tuple[tuple[int, int], ...]:
    """The ``k`` ``(layer, head)`` pairs with the largest mean indirect effect, best first (ties by index)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    flat = indirect_effect.flatten()
    order = sorted(range(flat.numel()), key=lambda i: (-float(flat[i]), i))[:k]
    n_heads = indirect_effect.shape[1]
    return tuple((i // n_heads, i % n_heads) for i in order)


def build_function_vector(lm: LoadedModel, writes: Tensor, heads: Sequence[tuple[int, int]]) -> Tensor:
    """``sum over (l, h) in heads of writes[l, h]``: a ``(d_model,)`` float32 vector on the model's device.

    Args:
        writes: ``(n_layers, n_heads, d_model)`` mean head writes (:attr:`HeadMeans.writes`).

    Raises:
        ValueError: writes of the wrong shape (e.g. mean head *outputs*), an empty head set, or a layer or
            head out of range.
    """
    geo = lm.geometry
    if tuple(writes.shape) != (geo.n_layers, geo.n_heads, geo.d_model):
        raise ValueError(
            f"writes of shape {tuple(writes.shape)}: expected the mean head writes, ({geo.n_layers}, {geo.n_heads}, "
            f"{geo.d_model}) (HeadMeans.writes; head outputs are projected into the stream by heads.head_writes)"
        )
    if not heads:
        raise ValueError("a function vector needs at least one head; the head set is empty")
    total = torch.zeros(lm.d_model, dtype=torch.float64)
    for l, h in heads:
        layer, head = check_layer(l, lm.n_layers), check_head(h, geo.n_heads)
        total += writes[layer, head].double().cpu()
    return total.float().to(lm.device)


def extract_function_vector(
    lm: LoadedModel,
    task: Task | str,
    pool: Sequence[Example],
    config: FunctionVectorConfig = FunctionVectorConfig(),
    *,
    method: IEMethod = "cached",
) -> FunctionVector:
    """Extract a function vector of ``task`` from demonstrations drawn from ``pool`` (the training split).

    Raises:
        ValueError: a pool too small for ``config.shots`` demonstrations plus a query, an empty head set.
    """
    task = get_task(task)
    if len(pool) <= config.shots:
        raise ValueError(f"task {task.name!r}: the pool has {len(pool)} examples, need more than {config.shots}")
    start = time.perf_counter()
    clean = clean_prompts(lm, task, pool, shots=config.shots, n=config.n_mean, seed=config.seed)
    means = head_means(lm, clean)
    t_mean = time.perf_counter() - start
    corrupted, gold = corrupted_prompts(lm, task, pool, shots=config.shots, n=config.n_ie, seed=config.seed)
    ie = indirect_effects(lm, corrupted, gold, means.outputs, method=method).mean(0).view(lm.n_layers, lm.geometry.n_heads)
    heads = top_heads(ie, config.k)
    layer = check_layer(config.layer, lm.n_layers) if config.layer is not None else lm.n_layers // 3
    vector = build_function_vector(lm, means.writes, heads).cpu()
    seconds = time.perf_counter() - start
    return FunctionVector(
        vector=vector, heads=heads, layer=layer, indirect_effect=ie, mean_outputs=means.outputs,
        mean_writes=means.writes, model=lm.name,
        task=task.name, config=config, seconds=seconds,
        timings={"mean_outputs": t_mean, "indirect_effect": seconds - t_mean},
    )
