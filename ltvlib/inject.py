"""Add or replace vectors in the residual stream, and record it, with hooks that always clean up.

A :class:`VectorEdit` says where its vector goes:

- the *layer*: decoder block index (negative counts from the end);
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

Two context managers put edits into forwards:

- :func:`inject` (``attention_mask`` of the whole prompt given, ``offset`` columns already cached): every
  forward inside it is edited at the same resolved columns; for the batched paths (training, evaluation,
  resuming at a block with :func:`~ltvlib.kv_cache.forward_from_layer`);
- :func:`apply` (no mask argument): positions are resolved per forward from the mask the model itself
  receives, and only prompt forwards are edited, so it also wraps ``model.generate``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch
from torch import Tensor

from .hooks import Hook, HookNotFiredError, first_input, first_output, hooked, with_first_input, with_first_output
from .sites import block, check_layer, text_model

if TYPE_CHECKING:
    from .models import LoadedModel

Site = Literal["block_input", "block_output"]
Mode = Literal["add", "replace"]
SITES: tuple[str, ...] = get_args(Site)
MODES: tuple[str, ...] = get_args(Mode)

__all__ = ["MODES", "SITES", "HookNotFiredError", "Mode", "Site", "VectorEdit", "apply", "inject", "record_residual",
           "resolve_positions"]


@dataclass(frozen=True)
class VectorEdit:
    """One vector at one (layer, site, prompt position), added or written.

    Attributes:
        layer: decoder block index (negative counts from the end).
        position: prompt position (see the module docstring).
        vector: ``(d_model,)`` or ``(batch, d_model)``; may require grad (the hooks are differentiable).
        site: ``"block_input"`` (entering block ``layer``, the LTV's site) or ``"block_output"`` (leaving it,
            the extracted vectors' site).
        mode: ``"add"`` (``h <- h + v``, the LTV and difference vectors) or ``"replace"`` (``h <- v``, Hendel
            et al.'s task vector).

    Raises:
        ValueError: an unknown site or mode (named, with the allowed values).
    """

    layer: int
    position: int
    vector: Tensor
    site: Site = "block_input"
    mode: Mode = "add"

    def __post_init__(self) -> None:
        # Checked here, not at injection time: an edit with a typo must not travel through caches and plans.
        if self.site not in SITES:
            raise ValueError(f"VectorEdit: unknown site {self.site!r}; allowed: {', '.join(map(repr, SITES))}")
        if self.mode not in MODES:
            raise ValueError(f"VectorEdit: unknown mode {self.mode!r}; allowed: {', '.join(map(repr, MODES))}")


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


# ---------------------------------------------------------------------------------------------------------
# Editing: one plan per forward, one hook per (layer, site)

_Key = tuple[int, str]  # (non-negative layer, site)
_Plan = dict[_Key, list[tuple[Tensor, Tensor, str]]]  # per hook: (columns (batch,), vector (batch, d), mode)


def _group(lm: LoadedModel, edits: Sequence[VectorEdit]) -> dict[_Key, list[VectorEdit]]:
    """Edits by (layer, site), in their given order (the order they are applied in); layer and width checked."""
    groups: dict[_Key, list[VectorEdit]] = {}
    for edit in edits:
        layer = check_layer(edit.layer, lm.n_layers)
        vec = edit.vector
        if vec.shape[-1] != lm.d_model or vec.dim() not in (1, 2):
            raise ValueError(
                f"vector of shape {tuple(vec.shape)} at layer {edit.layer}: expected ({lm.d_model},) or "
                f"(batch, {lm.d_model})"
            )
        groups.setdefault((layer, edit.site), []).append(edit)
    return groups


def _plan(groups: dict[_Key, list[VectorEdit]], attention_mask: Tensor, offset: int, d_model: int) -> _Plan:
    """Resolve every edit's position to a column of the tokens this forward runs (``offset`` columns of
    ``attention_mask`` are in the cache) and expand its vector to the batch."""
    batch = attention_mask.shape[0]
    plan: _Plan = {}
    for key, group in groups.items():
        for edit in group:
            vec = edit.vector
            if vec.dim() == 2 and vec.shape[0] != batch:
                raise ValueError(
                    f"vector of shape {tuple(vec.shape)} at layer {edit.layer}: expected ({d_model},) or "
                    f"({batch}, {d_model})"
                )
            cols = resolve_positions(attention_mask, [edit.position])[:, 0] - offset
            plan.setdefault(key, []).append((cols, vec.expand(batch, -1), edit.mode))
    return plan


def _edit_hidden(hidden: Tensor, steps: list[tuple[Tensor, Tensor, str]], offset: int) -> Tensor:
    """``hidden`` ``(batch, seq, d_model)`` with each step's vector added or written at its columns."""
    batch = steps[0][1].shape[0]
    if hidden.shape[0] != batch:
        raise ValueError(f"injection prepared for batch {batch} but the forward has batch {hidden.shape[0]}")
    hidden = hidden.clone()  # out of place for autograd; the caller's tensor stays untouched
    rows = torch.arange(batch, device=hidden.device)
    for cols, vec, mode in steps:
        cols = cols.to(hidden.device)  # a block on another device than the prompt (a device map)
        if bool(((cols < 0) | (cols >= hidden.shape[1])).any()):
            raise ValueError(
                f"an injected position falls outside the {hidden.shape[1]} tokens of this forward "
                f"(offset {offset}): it lies in the cached prefix"
            )
        v = vec.to(device=hidden.device, dtype=hidden.dtype)  # the edited block's device and dtype
        hidden[rows, cols] = v if mode == "replace" else hidden[rows, cols] + v
    return hidden


def _site_hook(lm: LoadedModel, key: _Key, edit: Any) -> Hook:
    """The hook of one (layer, site): ``edit(key, hidden)`` returns the new state, or None to leave it."""
    layer, site = key
    if site == "block_input":

        def pre(module: Any, args: tuple, kwargs: dict) -> Any:
            new = edit(key, first_input(args, kwargs))
            return None if new is None else with_first_input(args, kwargs, new)

        return Hook(block(lm, layer), "pre", pre, f"layer {layer} ({site})")

    def post(module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        new = edit(key, first_output(output))
        return None if new is None else with_first_output(output, new)

    return Hook(block(lm, layer), "post", post, f"layer {layer} ({site})")


@contextmanager
def inject(lm: LoadedModel, edits: Sequence[VectorEdit], *, attention_mask: Tensor, offset: int = 0) -> Iterator[None]:
    """Put ``edits`` into the residual stream of every forward the ``with`` body runs.

    Each vector goes where its edit says: block ``layer``'s input or output (``edit.site``), at prompt
    position ``edit.position`` of each row, added or written (``edit.mode``). Edits at the same (layer, site)
    are applied in the order given.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        edits: the vectors, each ``(d_model,)`` or ``(batch, d_model)``.
        attention_mask: ``(batch, prompt_len)`` mask of the *whole* prompt in absolute columns, including
            any cached prefix; it locates the positions, once, for every forward inside.
        offset: number of prompt columns already in the KV cache, so that absolute column ``c`` is
            column ``c - offset`` of the tokens this forward processes.

    Raises:
        ValueError: a layer or position out of range, a vector of the wrong size, or a forward of another
            batch size or whose tokens do not contain an edited position.
        HookNotFiredError: (on exit) a hook never ran, i.e. the intervention silently did nothing.
    """
    groups = _group(lm, edits)
    plan = _plan(groups, attention_mask, offset, lm.d_model)

    def edit(key: _Key, hidden: Tensor) -> Tensor:
        return _edit_hidden(hidden, plan[key], offset)

    with hooked([_site_hook(lm, key, edit) for key in groups], what="injection hooks"):
        yield


@contextmanager
def apply(lm: LoadedModel, edits: Sequence[VectorEdit]) -> Iterator[None]:
    """Put ``edits`` into the prompt forwards the ``with`` body runs: plain forwards or ``model.generate``.

    Each vector goes where its edit says (block ``layer``'s input or output, prompt position, add or
    replace; the layers, sites and modes may be mixed; edits at the same (layer, site) are applied in order).
    Unlike :func:`inject` it needs no mask: a hook on the decoder stack reads, per forward, the
    ``attention_mask`` the model receives (``(batch, past + seq)``, the whole sequence so far: left padding
    is fine, position ``-1`` is each row's last token; none passed means every token is real) and resolves
    the positions against it, the first ``past`` columns being those already in the cache.

    Only forwards that carry a prompt, i.e. run more than one token, are edited. In ``model.generate`` that
    is the prefill: the prompt's keys and values are computed with the vectors in the stream and every decode
    step (one new token each) runs unedited but attends to them through the KV cache, as the paper injects
    at prompt positions only. A prompt forward of a single token (a cached prefix plus one last token) is
    taken for a decode step: use :func:`inject` with its mask for it.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        edits: the vectors, each ``(d_model,)`` or ``(batch, d_model)`` (then every forward has that batch).

    Raises:
        ValueError: a layer or position out of range, a vector of the wrong size, a 4-d attention mask.
        HookNotFiredError: (on exit) some (layer, site) was never edited: no prompt forward ran inside.
    """
    groups = _group(lm, edits)
    current: dict[str, Any] = {"plan": None, "offset": 0}
    edited = dict.fromkeys(groups, 0)

    def start(module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        tokens = ids if ids is not None else embeds
        if tokens is None:
            raise ValueError("apply(): the model was called with neither input_ids nor inputs_embeds")
        batch, seq = tokens.shape[0], tokens.shape[1]
        if seq <= 1:  # a decode step: it sees the prompt's edited keys and values through the cache
            current["plan"] = None
            return
        mask = kwargs.get("attention_mask")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if mask is None:
            past = int(cache.get_seq_length()) if cache is not None else 0
            mask = torch.ones((batch, past + seq), dtype=torch.long, device=tokens.device)
        if mask.dim() != 2:
            raise ValueError(f"apply() needs a 2-d attention mask (batch, columns), got shape {tuple(mask.shape)}")
        offset = mask.shape[1] - seq
        current["plan"], current["offset"] = _plan(groups, mask, offset, lm.d_model), offset

    def stop(module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        current["plan"] = None  # a later forward that skips the stack (forward_from_layer) must not reuse it

    def edit(key: _Key, hidden: Tensor) -> Tensor | None:
        if current["plan"] is None:
            return None
        edited[key] += 1
        return _edit_hidden(hidden, current["plan"][key], current["offset"])

    stack = text_model(lm)
    hooks = [Hook(stack, "pre", start, "the decoder stack", False),
             *(_site_hook(lm, key, edit) for key in groups),
             Hook(stack, "post", stop, "the decoder stack", False)]
    with hooked(hooks, what="injection hooks"):
        yield
    silent = [f"layer {layer} ({site})" for (layer, site), n in edited.items() if n == 0]
    if silent:
        raise HookNotFiredError(f"injection hooks at {', '.join(silent)} never fired on a prompt forward (more "
                                "than one token): nothing was edited")


@contextmanager
def record_residual(lm: LoadedModel, layers: Sequence[int], *, site: Site = "block_input") -> Iterator[dict[int, Tensor]]:
    """Capture the residual stream at ``site`` of ``layers``; yields ``{layer: (batch, seq, d_model)}`` filled
    by forwards.

    A later forward overwrites an earlier one's capture. Hooks are removed on exit and must have fired.
    """
    if site not in SITES:
        raise ValueError(f"unknown site {site!r}; allowed: {', '.join(map(repr, SITES))}")
    captured: dict[int, Tensor] = {}
    hooks = []
    for raw in layers:
        layer = check_layer(raw, lm.n_layers)
        if site == "block_input":

            def pre(module: Any, args: tuple, kwargs: dict, layer: int = layer) -> None:
                captured[layer] = first_input(args, kwargs).detach()

            hooks.append(Hook(block(lm, layer), "pre", pre, f"layer {layer}"))
        else:

            def post(module: Any, args: tuple, kwargs: dict, output: Any, layer: int = layer) -> None:
                captured[layer] = first_output(output).detach()

            hooks.append(Hook(block(lm, layer), "post", post, f"layer {layer}"))
    with hooked(hooks, what="recording hooks"):
        yield captured
