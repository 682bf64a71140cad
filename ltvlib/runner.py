"""Batched forwards over a fixed set of prompts, reusing everything that does not change.

:class:`PromptRunner` holds tokenised prompts and runs any subset of them with vectors injected, returning
logits at the last prompt position and, when answers are given, at the positions that predict each answer
token (teacher forcing). It chooses between two exact paths:

- *full*: every token of every prompt in one forward (any injection position);
- *tail*: when every injected position is among the last ``tail`` prompt tokens, the rest is a prefix
  whose keys/values do not depend on the vectors. The shared part (special tokens and a shared
  demonstration block) is computed once; each row's own prefix is computed once and kept (rows in order,
  up to ``max_cache_bytes``; the others are recomputed per batch without gradients); only the tail (plus
  the answer tokens) runs with gradients. With ``skip_early_layers`` the tail's residual stream entering
  every block is remembered too, so a run whose vectors enter at block ``l`` starts at block ``l``.

Layouts (columns left to right): full ``[pad][shared][row][answer]``; tail
``[shared][pad][row minus tail][tail][answer]``. Positions come from the attention mask, so both layouts
give the same numbers up to floating-point rounding (``tests/test_runner.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .inject import Mode, Site, VectorEdit, inject, record_residual
from .prefix import KVPrefix, compute_prefix, forward_from_layer, forward_tokens
from .prompts import EncodedPrompts, pad_left, pad_right


def tail_needed(positions: Sequence[int]) -> int | None:
    """Tail length covering ``positions`` (all negative), or None when one counts from the start."""
    if not positions or any(p >= 0 for p in positions):
        return None
    return max(-p for p in positions)


class PromptRunner:
    """Run subsets of a fixed prompt set with injected vectors.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        prompts: the tokenised prompts.
        tail: number of final prompt tokens recomputed on each run (None = full forwards).
        cache_rows: cache the per-row prefix of all prompts at construction (when it fits).
        max_cache_bytes: memory cap for that cache.
        chunk: rows per forward when building caches.
        skip_early_layers: on the tail path, remember each row's residual stream entering every block
            for the tail (and answer) tokens, so that a run whose vectors enter at block ``l`` starts at
            block ``l`` (the blocks before it are unaffected by the vectors). Default: ``cache_rows``.
    """

    def __init__(
        self,
        lm: Any,
        prompts: EncodedPrompts,
        *,
        tail: int | None = 1,
        cache_rows: bool = True,
        max_cache_bytes: int = 640 * 2**20,
        chunk: int = 64,
        skip_early_layers: bool | None = None,
    ) -> None:
        self.lm = lm
        self.prompts = prompts
        self.tail = tail
        self.chunk = chunk
        self.skip_early_layers = cache_rows if skip_early_layers is None else skip_early_layers
        # (row, answer ids) -> (n_layers, tail + answer tokens - 1, d_model) block-input states, no vectors
        self.states: dict[tuple[int, tuple[int, ...]], Tensor] = {}
        self.pad_id = lm.tokenizer.pad_token_id
        self.device = lm.device
        shortest = min(len(r) for r in prompts.rows)
        if tail is not None and not 1 <= tail <= shortest:
            raise ValueError(f"tail {tail} must lie in [1, {shortest}] (the shortest prompt's own tokens)")
        self.shared: KVPrefix | None = None
        if tail is not None and prompts.shared:
            ids = torch.tensor([prompts.shared], device=self.device)
            self.shared = compute_prefix(lm, ids, torch.ones_like(ids))
        # Per row, the keys/values of its own tokens before the tail, unpadded: (n_kv, len, head_dim) per
        # layer. Rows are cached in order until max_cache_bytes; the rest are recomputed when used.
        self.row_cache: dict[int, tuple[list[Tensor], list[Tensor]]] = {}
        if tail is not None and cache_rows:
            per_token = 2 * lm.n_layers * lm.geometry.n_kv_heads * lm.geometry.head_dim * lm.dtype.itemsize
            budget = max_cache_bytes // per_token
            fits = []
            for i, row in enumerate(prompts.rows):
                budget -= len(row) - tail
                if budget < 0:
                    break
                fits.append(i)
            for start in range(0, len(fits), chunk):
                batch = fits[start : start + chunk]
                self.row_cache.update(zip(batch, self._compute_rows(batch)))

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def cached_rows(self) -> int:
        """How many rows have their prefix cached."""
        return len(self.row_cache)

    def _compute_rows(self, index: Sequence[int]) -> list[tuple[list[Tensor], list[Tensor]]]:
        """Per-row keys/values of the row tokens before the tail (after the shared prefix), unpadded."""
        assert self.tail is not None
        heads = [self.prompts.rows[i][: len(self.prompts.rows[i]) - self.tail] for i in index]
        width = max(len(h) for h in heads)
        if width == 0:  # no row tokens before the tail
            return [([], []) for _ in index]
        shared = self.shared.expand(len(index)) if self.shared is not None else None
        ids, mask = pad_left(heads, self.pad_id, self.device, width=width)
        kv = compute_prefix(self.lm, ids, mask, prefix=shared)
        out = []
        for b, h in enumerate(heads):
            cols = slice(kv.length - len(h), kv.length)
            # clone: a view would keep the whole padded chunk alive
            out.append(([k[b, :, cols].clone() for k in kv.keys], [v[b, :, cols].clone() for v in kv.values]))
        return out

    def _prefix(self, index: Sequence[int]) -> KVPrefix | None:
        """The cached-or-computed prefix (shared part + each row's tokens before the tail) of a batch."""
        missing = [i for i in index if i not in self.row_cache]
        fresh = dict(zip(missing, self._compute_rows(missing))) if missing else {}
        rows = [self.row_cache[i] if i in self.row_cache else fresh[i] for i in index]
        lengths = [len(self.prompts.rows[i]) - self.tail for i in index]  # type: ignore[operator]
        width = max(lengths)
        batch = len(index)
        if width == 0:
            return self.shared.expand(batch) if self.shared is not None else None
        mask = torch.zeros((batch, width), dtype=torch.long, device=self.device)
        for b, n in enumerate(lengths):
            mask[b, width - n :] = 1

        def stack(per_row: list[list[Tensor]], layer: int, template: Tensor) -> Tensor:
            out = template.new_zeros((batch, template.shape[0], width, template.shape[-1]))
            for b, n in enumerate(lengths):
                if n:
                    out[b, :, width - n :] = per_row[b][layer]
            return out

        filled = next(r for r in rows if r[0])
        keys = [stack([r[0] for r in rows], l, filled[0][l]) for l in range(len(filled[0]))]
        values = [stack([r[1] for r in rows], l, filled[1][l]) for l in range(len(filled[1]))]
        nxt = mask.sum(-1)
        if self.shared is not None:
            shared = self.shared.expand(batch)
            keys = [torch.cat([s, k], dim=2) for s, k in zip(shared.keys, keys)]
            values = [torch.cat([s, v], dim=2) for s, v in zip(shared.values, values)]
            mask = torch.cat([shared.attention_mask, mask], dim=1)
            nxt = nxt + shared.next_position
        return KVPrefix(keys, values, mask, nxt)

    def run(
        self,
        index: Sequence[int],
        edits: Sequence[VectorEdit] = (),
        *,
        answers: Sequence[Sequence[int]] | None = None,
        site: Site = "block_input",
        mode: Mode = "add",
    ) -> tuple[Tensor, Tensor]:
        """Logits for the prompts ``index`` with ``edits`` injected.

        Args:
            index: which prompts (a batch).
            edits: vectors to inject (``(d_model,)`` each, or ``(len(index), d_model)``).
            answers: per prompt, the answer's token ids for teacher forcing; None for the next token only.

        Returns:
            ``logits (batch, n, vocab)`` where column ``j`` predicts answer token ``j`` (``n`` = longest answer,
            1 without answers), and ``valid (batch, n)`` marking real answer tokens.
        """
        index = list(index)
        n_ans = max((len(a) for a in answers), default=1) if answers is not None else 1
        if answers is not None:
            cont, cont_mask = pad_right([a[:-1] for a in answers], self.pad_id, n_ans - 1, self.device)
            valid = pad_right(answers, 0, n_ans)[1].bool().to(self.device)
        else:
            cont = torch.zeros((len(index), 0), dtype=torch.long, device=self.device)
            cont_mask = cont
            valid = torch.ones((len(index), 1), dtype=torch.bool, device=self.device)
        if self.tail is None:
            full = [list(self.prompts.shared) + list(self.prompts.rows[i]) for i in index]
            ids, mask = pad_left(full, self.pad_id, self.device)
            prompt_mask = mask
            prefix = None
            offset = 0
        else:
            prefix = self._prefix(index)
            tails = [self.prompts.rows[i][-self.tail :] for i in index]
            ids = torch.tensor(tails, dtype=torch.long, device=self.device)
            mask = torch.ones_like(ids)
            before = prefix.attention_mask if prefix is not None else mask[:, :0]
            prompt_mask = torch.cat([before, mask], dim=1)
            offset = before.shape[1]
        ids = torch.cat([ids, cont], dim=1)
        mask = torch.cat([mask, cont_mask], dim=1)
        start = min((e.layer % self.lm.n_layers for e in edits), default=0)
        if self.tail is not None and self.skip_early_layers and start > 0:
            keys = [(i, tuple(answers[b]) if answers is not None else ()) for b, i in enumerate(index)]
            missing = [b for b, k in enumerate(keys) if k not in self.states]
            if missing:
                self._remember_states([keys[b] for b in missing], ids[missing], mask[missing], prefix, missing)
            # Each row's states cover its own tokens; pad columns (short answers) stay zero and are masked.
            hidden = torch.zeros((len(keys), ids.shape[1], self.lm.d_model), dtype=self.lm.dtype, device=self.device)
            for b, k in enumerate(keys):
                state = self.states[k][start]
                hidden[b, : state.shape[0]] = state
            with inject(self.lm, edits, attention_mask=prompt_mask, site=site, mode=mode, offset=offset):
                logits = forward_from_layer(self.lm, hidden, start, mask, prefix=prefix, logits_to_keep=n_ans)
        elif edits:
            with inject(self.lm, edits, attention_mask=prompt_mask, site=site, mode=mode, offset=offset):
                logits, _ = forward_tokens(self.lm, ids, mask, prefix=prefix, logits_to_keep=n_ans)
        else:
            logits, _ = forward_tokens(self.lm, ids, mask, prefix=prefix, logits_to_keep=n_ans)
        return logits, valid

    @torch.no_grad()
    def _remember_states(
        self, keys: list[tuple[int, tuple[int, ...]]], ids: Tensor, mask: Tensor, prefix: KVPrefix | None,
        rows: list[int],
    ) -> None:
        """Record the block-input states of the tail (+ answer) tokens of some rows, without vectors."""
        sub = prefix.rows(rows) if prefix is not None else None
        layers = list(range(self.lm.n_layers))
        with record_residual(self.lm, layers) as rec:
            forward_tokens(self.lm, ids, mask, prefix=sub, logits_to_keep=1)
        stacked = torch.stack([rec[l] for l in layers], dim=1)  # (rows, n_layers, n, d_model)
        for b, key in enumerate(keys):
            own = self.tail + max(len(key[1]) - 1, 0)  # type: ignore[operator]
            self.states[key] = stacked[b, :, :own].clone()
