"""Add or replace vectors in the residual stream, and record it, with hooks that always clean up.

Where a vector goes is stated by three things:

- the *site*: ``"block_input"`` (the residual stream entering decoder block ``layer``, a forward pre-hook;
  the paper's site, ``hidden_states[layer]`` in Hugging Face numbering) or ``"block_output"`` (leaving it,
  ``hidden_states[layer + 1]``);
- the *position* in the prompt: negative values count back from the prompt's last real token (``-1`` is the
  last token), non-negative values count from its first real token (``0`` is the first, e.g. BOS). Both
  are resolved per row from the attention mask, so left padding (or padding between a shared prefix and
  the queries) never shifts them;
- the *mode*: ``"add"`` (``h <- h + v``) or ``"replace"`` (``h <- v``).

A vector is ``(d_model,)`` (the same for every row) or ``(batch, d_model)``. The decoder blocks are found
through the model's site table (:func:`ltvlib.sites.block`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from .sites import block, check_layer

Site = Literal["block_input", "block_output"]
Mode = Literal["add", "replace"]


@dataclass(frozen=True)
class VectorEdit:
    """One vector at one (layer, prompt position).

    Attributes:
        layer: decoder block index (negative counts from the end).
        position: prompt position (see the module docstring).
        vector: ``(d_model,)`` or ``(batch, d_model)``; may require grad (the hooks are differentiable).
    """

    layer: int
    position: int
    vector: Tensor


def resolve_positions(attention_mask: Tensor, positions: Sequence[int]) -> Tensor:
    """Column of each prompt position in each row.

    Args:
        attention_mask: ``(batch, seq)``, 1 for real tokens, 0 for padding anywhere in the row.
        positions: prompt positions (negative from the last real token, non-negative from the first).

    Returns:
        ``(batch, len(positions))`` long tensor of column indices.

    Raises:
        ValueError: a position lies outside some row's prompt; the message names it and the row's length.
    """
    real = attention_mask.bool()
    lengths = real.sum(-1)
    rank = real.long().cumsum(-1) - 1  # index of each real token among the real tokens of its row
    cols = []
    for p in positions:
        shortest = int(lengths.min())
        if not -shortest <= p < shortest:
            raise ValueError(
                f"position {p} is outside the prompt: the shortest prompt in the batch has {shortest} tokens, "
                f"so positions must lie in [{-shortest}, {shortest - 1}]"
            )
        target = p if p >= 0 else lengths + p  # (batch,) or int
        target = torch.as_tensor(target, device=attention_mask.device).expand(real.shape[0])
        hit = real & (rank == target[:, None])
        cols.append(hit.float().argmax(-1))
    return torch.stack(cols, -1)


class HookNotFiredError(RuntimeError):
    """A hook that should have changed the forward pass never ran."""


@contextmanager
def inject(
    lm: Any,
    edits: Sequence[VectorEdit],
    *,
    attention_mask: Tensor,
    site: Site = "block_input",
    mode: Mode = "add",
    offset: int = 0,
) -> Iterator[None]:
    """Add (or write) vectors into the residual stream while the ``with`` body runs forwards.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        edits: the vectors, each at its (layer, position).
        attention_mask: ``(batch, prompt_len)`` mask of the *whole* prompt in absolute columns, including
            any cached prefix; it locates the positions.
        site: ``"block_input"`` or ``"block_output"`` of ``edit.layer``.
        mode: ``"add"`` or ``"replace"``.
        offset: number of prompt columns already in the KV cache, so that absolute column ``c`` is
            column ``c - offset`` of the tokens this forward processes.

    Raises:
        ValueError: unknown site or mode, a layer or position out of range, or a vector of the wrong size.
        HookNotFiredError: (on exit) a hook never ran, i.e. the intervention silently did nothing.
    """
    if site not in ("block_input", "block_output"):
        raise ValueError(f"unknown site {site!r}; allowed: 'block_input', 'block_output'")
    if mode not in ("add", "replace"):
        raise ValueError(f"unknown mode {mode!r}; allowed: 'add', 'replace'")
    batch = attention_mask.shape[0]
    by_layer: dict[int, list[tuple[Tensor, Tensor]]] = {}
    for edit in edits:
        layer = check_layer(edit.layer, lm.n_layers)
        vec = edit.vector
        if vec.shape[-1] != lm.d_model or vec.dim() not in (1, 2) or (vec.dim() == 2 and vec.shape[0] != batch):
            raise ValueError(
                f"vector of shape {tuple(vec.shape)} at layer {edit.layer}: expected ({lm.d_model},) or "
                f"({batch}, {lm.d_model})"
            )
        cols = resolve_positions(attention_mask, [edit.position])[:, 0] - offset
        by_layer.setdefault(layer, []).append((cols, vec.expand(batch, -1)))
    fired = dict.fromkeys(by_layer, 0)
    rows = torch.arange(batch, device=attention_mask.device)

    def edit_hidden(layer: int, hidden: Tensor) -> Tensor:
        if hidden.shape[0] != batch:
            raise ValueError(f"injection prepared for batch {batch} but the forward has batch {hidden.shape[0]}")
        hidden = hidden.clone()  # out of place for autograd; the caller's tensor stays untouched
        for cols, vec in by_layer[layer]:
            if bool(((cols < 0) | (cols >= hidden.shape[1])).any()):
                raise ValueError(
                    f"an injected position falls outside the {hidden.shape[1]} tokens of this forward "
                    f"(offset {offset}): it lies in the cached prefix"
                )
            v = vec.to(hidden.dtype)
            hidden[rows, cols] = v if mode == "replace" else hidden[rows, cols] + v
        fired[layer] += 1
        return hidden

    handles = []
    try:
        for layer in by_layer:
            module = block(lm, layer)
            if site == "block_input":

                def pre_hook(module: Any, args: tuple, kwargs: dict, layer: int = layer) -> Any:
                    if args:
                        return (edit_hidden(layer, args[0]), *args[1:]), kwargs
                    kwargs["hidden_states"] = edit_hidden(layer, kwargs["hidden_states"])
                    return args, kwargs

                handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
            else:

                def post_hook(module: Any, args: tuple, output: Any, layer: int = layer) -> Any:
                    # transformers 5 blocks return a tensor; older ones a tuple whose first item is the state.
                    if isinstance(output, tuple):
                        return (edit_hidden(layer, output[0]), *output[1:])
                    return edit_hidden(layer, output)

                handles.append(module.register_forward_hook(post_hook))
        yield
    finally:
        for handle in handles:
            handle.remove()
    silent = [layer for layer, n in fired.items() if n == 0]
    if silent:
        raise HookNotFiredError(f"injection hooks at layers {silent} ({site}) never fired: no forward ran through them")


@contextmanager
def record_residual(lm: Any, layers: Sequence[int], *, site: Site = "block_input") -> Iterator[dict[int, Tensor]]:
    """Capture the residual stream at ``layers``; yields ``{layer: (batch, seq, d_model)}`` filled by forwards.

    A later forward overwrites an earlier one's capture. Hooks are removed on exit and must have fired.
    """
    captured: dict[int, Tensor] = {}
    handles = []
    try:
        for raw in layers:
            layer = check_layer(raw, lm.n_layers)
            if site == "block_input":

                def pre(module: Any, args: tuple, kwargs: dict, layer: int = layer) -> None:
                    captured[layer] = (args[0] if args else kwargs["hidden_states"]).detach()

                handles.append(block(lm, layer).register_forward_pre_hook(pre, with_kwargs=True))
            else:

                def post(module: Any, args: tuple, output: Any, layer: int = layer) -> None:
                    captured[layer] = (output[0] if isinstance(output, tuple) else output).detach()

                handles.append(block(lm, layer).register_forward_hook(post))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
    missing = [check_layer(layer, lm.n_layers) for layer in layers if check_layer(layer, lm.n_layers) not in captured]
    if missing:
        raise HookNotFiredError(f"recording hooks at layers {missing} never fired")
