"""The size of the residual stream where a vector is added: what a stream-relative LTV recipe scales by.

Adam moves every coordinate by about the learning rate per step whatever the gradient's size, so a fixed
learning rate suits one stream size only: SmolLM2-135M's stream entering block 0 has an RMS of about 0.12
per coordinate, 6.1 at block 15 and 29 at block 29, and Gemma-3-270M's is about 28 times SmolLM2's. A
recipe with ``relative_to_stream`` (:class:`ltvlib.ltv.TrainConfig`) multiplies its learning rate and
initial range by :func:`site_stream_rms` of each vector's site.

The measurement: the residual stream entering block ``layer`` (``block_input``, where LTVs are added) at
each trained prompt position, on the zero-shot prompts of the first ``n`` training queries, with no vector
injected; ``sqrt(mean over prompts of |h|^2 / d_model)`` per (layer, position). One forward measures every
layer at once (a layer sweep pays for it once; each layer's value is the same float as measured alone). It is
cached in memory and on disk (``results/stream-rms/``), keyed by the model's name, dtype and a fingerprint of
its weights, the positions and the prompts' token ids.

The typical coordinate (``statistic="median"``): the median over coordinates of each coordinate's RMS over the
prompts. Both models carry a few *massive* coordinates (Sun et al., 2024, "Massive activations in large language
models") that dominate the RMS: entering Gemma-3-270M's last block one coordinate has an RMS of about 31,000
against a stream RMS of 1,302 and a median coordinate of 229 (SST-2 training prompts); SmolLM2-135M's 606 against
29.2 and 10.1. The RMS over the median is 5.7 there on Gemma and 2.9 on SmolLM2, 10.8 and 3.4 at their middle
layers: the RMS says little about the size of the coordinates an Adam step moves, which is about the learning
rate on every coordinate whatever the gradient's size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .cache import cached_json
from .inject import record_residual, resolve_positions
from .prompts import encode_prompts, pad_left
from .tasks import Example, Task

if TYPE_CHECKING:
    from .models import LoadedModel

STATISTICS = ("rms", "median")
"""What :func:`site_stream_scale` measures: ``"rms"``, the root mean square over prompts and coordinates;
``"median"``, the median over coordinates of each coordinate's RMS over prompts (the typical coordinate, blind to a
few massive ones)."""

RMS_PROMPTS = 32
"""Training prompts the stream RMS is measured on (the RMS varies by a few percent between prompts)."""

_MEMORY: dict[str, tuple[tuple[float, ...], ...]] = {}


def clear_memory() -> None:
    """Forget the stream scales measured in this process (the on-disk cache stays): the next call measures or
    reads them again, e.g. after a model's weights were changed in place under the same name."""
    _MEMORY.clear()


def weights_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of 16 values spread over every parameter: tells apart two models that share a name (the
    tests' tiny models, a model whose weights were edited) without reading all the weights. Spread, not the
    first values: an embedding's first row is often its all-zero padding row."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        flat = p.detach().reshape(-1)
        head = flat[:: max(1, flat.numel() // 16)][:16].double().cpu()
        h.update(name.encode())
        h.update(repr([round(float(v), 9) for v in head]).encode())
    return h.hexdigest()[:16]


def _prompts_fingerprint(rows: Sequence[Sequence[int]]) -> str:
    return hashlib.sha256(repr([list(r) for r in rows]).encode()).hexdigest()[:16]


@torch.no_grad()
def site_stream_rms(
    lm: LoadedModel, task: Task, train: Sequence[Example], layers: Sequence[int], positions: Sequence[int],
    *, n: int = RMS_PROMPTS,
) -> tuple[float, ...]:
    """RMS per coordinate of the residual stream at each (layer, position) site, layer-major
    (:func:`site_stream_scale` with ``statistic="rms"``)."""
    return site_stream_scale(lm, task, train, layers, positions, n=n)


@torch.no_grad()
def site_stream_scale(
    lm: LoadedModel, task: Task, train: Sequence[Example], layers: Sequence[int], positions: Sequence[int],
    *, statistic: str = "rms", n: int = RMS_PROMPTS,
) -> tuple[float, ...]:
    """The size of the residual stream at each (layer, position) site, layer-major: its RMS per coordinate, or
    its typical coordinate (``statistic``, one of :data:`STATISTICS`).

    Args:
        lm: the model (:func:`ltvlib.models.load_model`).
        task: the task whose prompt format is used; train: its training queries (the first ``n`` are used).
        layers: block indices (the stream *entering* each block); positions: prompt positions
            (negative from the last token).
        statistic: ``"rms"`` or ``"median"`` (:data:`STATISTICS`).

    Returns:
        ``len(layers) * len(positions)`` floats; entry ``i * len(positions) + j`` is layer ``layers[i]`` at
        position ``positions[j]`` (the order of :class:`ltvlib.ltv.LearnedTaskVector`'s rows).
    """
    if statistic not in STATISTICS:
        raise ValueError(f"unknown stream statistic {statistic!r}; allowed: {', '.join(STATISTICS)}")
    rows = encode_prompts(lm.tokenizer, task, list(train)[:n]).full_rows()
    key = {
        "model": lm.name, "dtype": str(next(lm.model.parameters()).dtype), "weights": weights_fingerprint(lm.model),
        "layers": "all", "positions": list(positions), "prompts": _prompts_fingerprint(rows),
    }
    if statistic != "rms":  # the RMS's entries keep the key they were stored under
        key["statistic"] = statistic
    memo = repr(sorted(key.items()))
    if memo not in _MEMORY:
        every = list(range(lm.n_layers))

        def compute() -> dict[str, Any]:
            ids, mask = pad_left(rows, lm.tokenizer.pad_token_id, lm.device)
            cols = resolve_positions(mask, positions)  # (batch, positions)
            with record_residual(lm, every) as rec:
                lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
            out = []
            for layer in every:
                h = rec[layer].double()
                at = h.gather(1, cols[..., None].expand(-1, -1, h.shape[-1]))  # (batch, positions, d)
                if statistic == "rms":
                    out.append([float(v) for v in at.pow(2).mean(dim=(0, 2)).sqrt()])
                else:  # each coordinate's RMS over prompts, then the median over coordinates: (positions,)
                    out.append([float(v) for v in at.pow(2).mean(dim=0).sqrt().median(dim=-1).values])
            return {statistic: out}

        _MEMORY[memo] = tuple(tuple(v) for v in cached_json("stream-rms", key, compute)[statistic])
    value = tuple(v for layer in layers for v in _MEMORY[memo][layer % lm.n_layers])
    if not all(v > 0 for v in value):
        raise ValueError(f"the residual stream of {lm.name} has zero {statistic} at a site of layers {list(layers)}, "
                         f"positions {list(positions)}: {value}")
    return value
