"""Per-head attention outputs: record them, patch them, project them into the residual stream.

The site is ``head_outputs`` (see :mod:`ltvlib.sites`): the input of block ``l``'s ``o_proj``, i.e. the
attention heads' outputs concatenated *before* the output projection, shape ``(batch, seq, n_heads *
head_dim)``. Query head ``h`` owns columns ``h * head_dim : (h + 1) * head_dim``; with grouped-query
attention each *query* head still has its own slice (heads that share keys and values differ by their
queries), so a head is always a query-head index in ``[0, n_heads)``. Sizes come from the config
(:class:`ltvlib.sites.HeadGeometry`), never from ``d_model // n_heads``.

Hooks are forward *pre*-hooks on ``o_proj``; they are removed on exit even after an error and must have
fired, otherwise :class:`~ltvlib.hooks.HookNotFiredError` is raised (an intervention that silently did
nothing is the baselines' most common bug).

Positions follow :mod:`ltvlib.inject`: negative values count back from each row's last real token, others
from its first real token, resolved from the attention mask of the whole prompt; ``offset`` is the number of
prompt columns already in a KV cache.

What a head *writes into the residual stream* (:func:`head_writes`, :func:`head_projection`) follows the site
table's path from ``o_proj`` to the stream, including the attention-output norm of Gemma 2/3.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from .hooks import Hook, first_input, hooked, with_first_input
from .inject import resolve_positions
from .sites import attn_output_norm, check_layer, inverse_rms, norm_gain, o_proj

if TYPE_CHECKING:
    from .models import LoadedModel

__all__ = [
    "HeadMode", "HeadPatch", "attention_output_inverse_rms", "check_head", "head_outputs", "head_projection",
    "head_writes", "o_proj", "patch_heads", "record_heads",
]

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


def check_head(head: int, n_heads: int) -> int:
    """Validate a query-head index; raises ``ValueError`` naming the allowed range."""
    if not isinstance(head, int) or isinstance(head, bool) or not 0 <= head < n_heads:
        raise ValueError(f"head {head!r} is out of range: the model has query heads 0..{n_heads - 1} per layer")
    return head


@contextmanager
def head_outputs(
    lm: LoadedModel,
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
        assert attention_mask is not None and all_rows is not None  # patches without a mask raised above
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
        assert attention_mask is not None  # recording at positions without a mask raised above
        rec_cols = resolve_positions(attention_mask, list(record_positions)) - offset  # (batch, n_pos)

    layers = sorted(set(by_layer) | set(record_layers))
    captured: dict[int, Tensor] = {}
    hd = geo.head_dim

    def hook(module: Any, args: tuple, kwargs: dict, layer: int) -> Any:
        x = first_input(args, kwargs)
        b, s, _ = x.shape
        if batch is not None and b != batch:
            raise ValueError(f"head hooks prepared for batch {batch} but the forward has batch {b}")
        changed = False
        if layer in by_layer:
            x = x.clone().view(b, s, geo.n_heads, hd)  # out of place: the caller's tensor stays untouched
            for rows, cols, head, value in by_layer[layer]:
                rows, cols = rows.to(x.device), cols.to(x.device)  # the block's device under a device map
                if bool(((cols < 0) | (cols >= s)).any()):
                    raise ValueError(
                        f"a patched position falls outside the {s} tokens of this forward (offset {offset}): "
                        "it lies in the cached prefix"
                    )
                v = value.to(device=x.device, dtype=x.dtype)
                x[rows, cols, head] = v if mode == "replace" else x[rows, cols, head] + v
            x = x.view(b, s, geo.n_heads * hd)
            changed = True
        if layer in record_layers:
            heads = x.detach().view(b, s, geo.n_heads, hd)
            if rec_cols is not None:
                heads = heads[torch.arange(b, device=heads.device)[:, None], rec_cols.to(heads.device)]
            captured[layer] = heads.clone() if rec_cols is None else heads
        return with_first_input(args, kwargs, x) if changed else None

    hooks = []
    for layer in layers:

        def pre_hook(module: Any, args: tuple, kwargs: dict, layer: int = layer) -> Any:
            return hook(module, args, kwargs, layer)

        hooks.append(Hook(o_proj(lm, layer), "pre", pre_hook, f"layer {layer}"))
    with hooked(hooks, what="head-output hooks (o_proj input)"):
        yield captured


@contextmanager
def record_heads(
    lm: LoadedModel, layers: Sequence[int], *, attention_mask: Tensor | None = None, positions: Sequence[int] | None = None,
    offset: int = 0,
) -> Iterator[dict[int, Tensor]]:
    """Capture head outputs at ``layers``: ``{layer: (batch, seq or len(positions), n_heads, head_dim)}``."""
    with head_outputs(lm, record=layers, attention_mask=attention_mask, record_positions=positions,
                      offset=offset) as captured:
        yield captured


@contextmanager
def patch_heads(
    lm: LoadedModel, patches: Sequence[HeadPatch], *, attention_mask: Tensor, offset: int = 0, mode: HeadMode = "replace"
) -> Iterator[None]:
    """Write (or add) values into head output slices while the ``with`` body runs forwards."""
    if not patches:
        raise ValueError("patch_heads needs at least one HeadPatch")
    with head_outputs(lm, patches=patches, attention_mask=attention_mask, offset=offset, mode=mode):
        yield


def _head_weight(lm: LoadedModel, layer: int) -> Tensor:
    """``W_O`` of ``layer`` split per query head: ``(d_model, n_heads, head_dim)``."""
    geo = lm.geometry
    return o_proj(lm, layer).weight.detach().view(geo.d_model, geo.n_heads, geo.head_dim)


def _compute_dtype(w: Tensor) -> torch.dtype:
    return torch.promote_types(w.dtype, torch.float32)  # bf16 weights are read in float32


def attention_output_inverse_rms(lm: LoadedModel, layer: int, outputs: Tensor) -> Tensor | None:
    """``1 / rms(a)`` of the attention output ``a = o_proj(outputs)`` as block ``layer``'s attention-output norm
    computes it (``rms(a) = sqrt(mean(a^2) + eps)``), or None for an architecture without that norm.

    Args:
        outputs: ``(..., n_heads, head_dim)``, every head's output at the same tokens.

    Returns:
        ``(...)`` in float64, or None.
    """
    norm = attn_output_norm(lm, layer)
    if norm is None:
        return None
    proj = o_proj(lm, layer)
    a = proj(outputs.flatten(-2).to(device=proj.weight.device, dtype=proj.weight.dtype))
    return inverse_rms(a, norm)


def head_writes(lm: LoadedModel, layer: int, outputs: Tensor) -> Tensor:
    """What each head of block ``layer`` writes into the residual stream, given every head's output there.

    **Definition.** Let ``z_h`` be head ``h``'s output (its ``head_dim`` slice of the ``o_proj`` input),
    ``t_h = W_O[:, slice(h)] z_h`` its term of the attention output ``a = sum_h t_h`` (+ the ``o_proj`` bias,
    none in the supported families).

    - Llama, Mistral, Qwen2: the block adds ``a`` to the stream; head ``h`` writes ``t_h``.
    - Gemma 2/3: the block adds ``N(a) = g * a / rms(a)`` (the attention-output norm, ``g`` its gain
      ``1 + weight``, ``rms(a) = sqrt(mean(a^2) + eps)``). Head ``h`` writes ``g * t_h / rms(a)``: its term of
      the norm's numerator, divided by the norm's factor at the *actual* attention output of that token.

    In both cases the heads' writes sum exactly to what the attention block adds to the residual stream, so
    a sum over a subset of heads is that subset's share of it. The ``1 / rms(a)`` factor is treated as a
    fixed scale of the token, as :mod:`ltvlib.analysis.ov` treats the pre-attention norm; this is not the Jacobian of
    ``N`` (whose terms ``J_N t_h`` sum to zero over all heads, ``N`` being scale-invariant).

    Args:
        outputs: ``(..., n_heads, head_dim)``: every head's output at the same tokens (e.g. a capture of
            :func:`record_heads`).

    Returns:
        ``(..., n_heads, d_model)`` in float32 (float64 for a float64 model), on the model's device.
    """
    geo = lm.geometry
    if outputs.shape[-2:] != (geo.n_heads, geo.head_dim):
        raise ValueError(
            f"head outputs of shape {tuple(outputs.shape)}: expected (..., {geo.n_heads}, {geo.head_dim}), every "
            "head of the layer at the same tokens"
        )
    w = _head_weight(lm, layer)
    dtype = _compute_dtype(w)
    z = outputs.to(device=w.device, dtype=dtype)
    terms = torch.einsum("...hk,dhk->...hd", z, w.to(dtype))
    scale = attention_output_inverse_rms(lm, layer, outputs)
    if scale is None:
        return terms
    gain = norm_gain(attn_output_norm(lm, layer), lm.table).to(dtype)  # type: ignore[arg-type]
    return terms * gain * scale.to(dtype)[..., None, None]


def head_projection(lm: LoadedModel, layer: int, head: int, value: Tensor, *, inverse_rms: Tensor | float | None = None,
                    ) -> Tensor:
    """What head ``head`` of ``layer`` writes into the residual stream when its output is ``value``.

    ``W_O[:, h * head_dim:(h + 1) * head_dim] @ value``, and on architectures with an attention-output norm
    (Gemma 2/3) ``g * (that) * inverse_rms``, the definition of :func:`head_writes`. There the write depends on
    every head's output at the token (through ``rms`` of their sum), so ``inverse_rms`` (e.g. from
    :func:`attention_output_inverse_rms`) is required; where the attention output is added as is it must be
    None. The ``o_proj`` bias (none in the supported families) is left out: it does not belong to any one head.

    Args:
        value: ``(head_dim,)`` or ``(..., head_dim)``.
        inverse_rms: a number or a tensor broadcastable to ``value.shape[:-1]``.

    Returns:
        ``(d_model,)`` or ``(..., d_model)``.

    Raises:
        ValueError: head out of range, a value of the wrong size, ``inverse_rms`` missing where the
            architecture normalises the attention output or given where it does not.
    """
    geo = lm.geometry
    h = check_head(head, geo.n_heads)
    if value.shape[-1] != geo.head_dim:
        raise ValueError(f"head value has size {value.shape[-1]}, expected head_dim={geo.head_dim}")
    w = _head_weight(lm, layer)[:, h]
    dtype = _compute_dtype(w)
    out = value.to(device=w.device, dtype=dtype) @ w.to(dtype).T
    norm = attn_output_norm(lm, layer)
    if norm is None:
        if inverse_rms is not None:
            raise ValueError(f"family {lm.table.family!r} adds the attention output as is: inverse_rms must be None")
        return out
    if inverse_rms is None:
        raise ValueError(
            f"family {lm.table.family!r} normalises the attention output ({lm.table.attn_output_norm}), so what a "
            "head writes depends on every head's output at the token: pass inverse_rms "
            "(attention_output_inverse_rms), or use head_writes"
        )
    scale = torch.as_tensor(inverse_rms, device=w.device).to(dtype)
    return out * norm_gain(norm, lm.table).to(dtype) * (scale[..., None] if scale.dim() else scale)
