"""Per-head attention outputs: record them, patch them, project them into the residual stream.

The site is ``head_outputs`` (see :mod:`ltvlib.sites`): the input of ``layers[l].self_attn.o_proj``, i.e. the
attention heads' outputs concatenated *before* the output projection, shape ``(batch, seq, n_heads *
head_dim)``. Query head ``h`` owns columns ``h * head_dim : (h + 1) * head_dim``; with grouped-query
attention each *query* head still has its own slice (heads that share keys and values differ by their
queries), so a head is always a query-head index in ``[0, n_heads)``. Sizes come from the config
(:class:`ltvlib.sites.HeadGeometry`), never from ``d_model // n_heads``.

Hooks are forward *pre*-hooks on ``o_proj``; they are removed on exit even after an error and must have
fired, otherwise :class:`~ltvlib.inject.HookNotFiredError` is raised (an intervention that silently did
nothing is the baselines' most common bug).

Positions follow :mod:`ltvlib.inject`: negative values count back from each row's last real token, others
from its first real token, resolved from the attention mask of the whole prompt; ``offset`` is the number of
prompt columns already in a KV cache.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from .inject import HookNotFiredError, resolve_positions
from .sites import check_layer, decoder_layers, get_module

HeadMode = Literal["replace", "add"]


@dataclass(frozen=True)
class HeadPatch:
    """A value written into one head's output slice at one prompt position.

    Attributes:
        layer: decoder block (negative counts from the end).
        head: query-head index in ``[0, n_heads)``.
        position: prompt position (``-1`` = last token).
        value: ``(head_dim,)`` for every selected row, or ``(n_rows, head_dim)`` one per selected row.
        rows: batch rows the patch applies to (None = all rows). Lets one batched forward patch a
            different head in each block of rows.
    """

    layer: int
    head: int
    position: int
    value: Tensor
    rows: Sequence[int] | Tensor | None = None


def o_proj(lm: Any, layer: int) -> torch.nn.Module:
    """The output projection of block ``layer`` (module path from the architecture table)."""
    blocks = decoder_layers(lm.model)
    return get_module(blocks[check_layer(layer, len(blocks))], lm.table.o_proj)


def check_head(head: int, n_heads: int) -> int:
    """Validate a query-head index; raises ``ValueError`` naming the allowed range."""
    if not isinstance(head, int) or isinstance(head, bool) or not 0 <= head < n_heads:
        raise ValueError(f"head {head!r} is out of range: the model has query heads 0..{n_heads - 1} per layer")
    return head


@contextmanager
def head_outputs(
    lm: Any,
    *,
    record: Sequence[int] = (),
    patches: Sequence[HeadPatch] = (),
    attention_mask: Tensor | None = None,
    record_positions: Sequence[int] | None = None,
    offset: int = 0,
    mode: HeadMode = "replace",
) -> Iterator[dict[int, Tensor]]:
    """Record and/or patch per-head outputs (the ``o_proj`` input) while the ``with`` body runs forwards.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        record: layers whose head outputs are captured (after any patch at that layer).
        patches: values written into head slices (``mode="replace"``) or added to them (``"add"``).
        attention_mask: ``(batch, prompt_len)`` mask of the whole prompt in absolute columns (including a
            cached prefix); needed for patches and for ``record_positions``.
        record_positions: capture only these prompt positions; None captures every column of the forward.
        offset: prompt columns already in the KV cache (absolute column ``c`` is column ``c - offset`` here).
        mode: ``"replace"`` (``o_h <- v``) or ``"add"`` (``o_h <- o_h + v``).

    Yields:
        ``{layer: tensor}``, filled by the forwards: ``(batch, seq, n_heads, head_dim)``, or
        ``(batch, len(record_positions), n_heads, head_dim)`` with ``record_positions``. A later forward
        overwrites an earlier one's capture.

    Raises:
        ValueError: layer, head, position, mode or value shape out of range; patches without a mask.
        HookNotFiredError: (on exit) a hook never ran.
    """
    if mode not in ("replace", "add"):
        raise ValueError(f"unknown mode {mode!r}; allowed: 'replace', 'add'")
    geo = lm.geometry
    n_layers = geo.n_layers
    if (patches or record_positions is not None) and attention_mask is None:
        raise ValueError("patching heads or recording at positions needs the prompt's attention_mask")
    device = attention_mask.device if attention_mask is not None else lm.device
    batch = attention_mask.shape[0] if attention_mask is not None else None
    all_rows = torch.arange(batch, device=device) if batch is not None else None

    by_layer: dict[int, list[tuple[Tensor, Tensor, int, Tensor]]] = {}
    for p in patches:
        layer = check_layer(p.layer, n_layers)
        head = check_head(p.head, geo.n_heads)
        rows = all_rows if p.rows is None else torch.as_tensor(p.rows, dtype=torch.long, device=device)
        value = p.value
        if value.shape[-1] != geo.head_dim or value.dim() not in (1, 2) or (
            value.dim() == 2 and value.shape[0] != len(rows)
        ):
            raise ValueError(
                f"head patch value of shape {tuple(value.shape)} at layer {p.layer}, head {p.head}: expected "
                f"({geo.head_dim},) or ({len(rows)}, {geo.head_dim})"
            )
        cols = resolve_positions(attention_mask, [p.position])[:, 0][rows] - offset
        by_layer.setdefault(layer, []).append((rows, cols, head, value.expand(len(rows), -1)))
    record_layers = [check_layer(l, n_layers) for l in record]
    rec_cols = None
    if record_positions is not None:
        rec_cols = resolve_positions(attention_mask, list(record_positions)) - offset  # (batch, n_pos)

    hooked = sorted(set(by_layer) | set(record_layers))
    fired = dict.fromkeys(hooked, 0)
    captured: dict[int, Tensor] = {}
    hd = geo.head_dim

    def hook(module: Any, args: tuple, kwargs: dict, layer: int) -> Any:
        x = args[0] if args else kwargs["hidden_states"]
        b, s, _ = x.shape
        if batch is not None and b != batch:
            raise ValueError(f"head hooks prepared for batch {batch} but the forward has batch {b}")
        fired[layer] += 1
        changed = False
        if layer in by_layer:
            x = x.clone().view(b, s, geo.n_heads, hd)  # out of place: the caller's tensor stays untouched
            for rows, cols, head, value in by_layer[layer]:
                if bool(((cols < 0) | (cols >= s)).any()):
                    raise ValueError(
                        f"a patched position falls outside the {s} tokens of this forward (offset {offset}): "
                        "it lies in the cached prefix"
                    )
                v = value.to(x.dtype)
                x[rows, cols, head] = v if mode == "replace" else x[rows, cols, head] + v
            x = x.view(b, s, geo.n_heads * hd)
            changed = True
        if layer in record_layers:
            heads = x.detach().view(b, s, geo.n_heads, hd)
            if rec_cols is not None:
                heads = heads[torch.arange(b, device=heads.device)[:, None], rec_cols]
            captured[layer] = heads.clone() if rec_cols is None else heads
        if not changed:
            return None
        if args:
            return (x, *args[1:]), kwargs
        kwargs["hidden_states"] = x
        return args, kwargs

    handles = []
    try:
        for layer in hooked:

            def pre_hook(module: Any, args: tuple, kwargs: dict, layer: int = layer) -> Any:
                return hook(module, args, kwargs, layer)

            handles.append(o_proj(lm, layer).register_forward_pre_hook(pre_hook, with_kwargs=True))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
    silent = [layer for layer, n in fired.items() if n == 0]
    if silent:
        raise HookNotFiredError(f"head-output hooks (o_proj input) at layers {silent} never fired")


@contextmanager
def record_heads(
    lm: Any, layers: Sequence[int], *, attention_mask: Tensor | None = None, positions: Sequence[int] | None = None,
    offset: int = 0,
) -> Iterator[dict[int, Tensor]]:
    """Capture head outputs at ``layers``: ``{layer: (batch, seq or len(positions), n_heads, head_dim)}``."""
    with head_outputs(lm, record=layers, attention_mask=attention_mask, record_positions=positions,
                      offset=offset) as captured:
        yield captured


@contextmanager
def patch_heads(
    lm: Any, patches: Sequence[HeadPatch], *, attention_mask: Tensor, offset: int = 0, mode: HeadMode = "replace"
) -> Iterator[None]:
    """Write (or add) values into head output slices while the ``with`` body runs forwards."""
    if not patches:
        raise ValueError("patch_heads needs at least one HeadPatch")
    with head_outputs(lm, patches=patches, attention_mask=attention_mask, offset=offset, mode=mode):
        yield


def head_projection(lm: Any, layer: int, head: int, value: Tensor) -> Tensor:
    """What head ``head`` of ``layer`` writes into the residual stream when its output is ``value``.

    ``W_O[:, h * head_dim:(h + 1) * head_dim] @ value``; the ``o_proj`` bias (none in Llama, Qwen2 or
    Gemma 3) is left out because it does not belong to any one head.

    Args:
        value: ``(head_dim,)`` or ``(..., head_dim)``.

    Returns:
        ``(d_model,)`` or ``(..., d_model)``.
    """
    geo = lm.geometry
    h = check_head(head, geo.n_heads)
    if value.shape[-1] != geo.head_dim:
        raise ValueError(f"head value has size {value.shape[-1]}, expected head_dim={geo.head_dim}")
    w = o_proj(lm, layer).weight[:, h * geo.head_dim : (h + 1) * geo.head_dim]
    return value.to(w.dtype) @ w.T
