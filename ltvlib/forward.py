"""Batched forwards over a fixed set of prompts, reusing everything that does not change.

:class:`PromptRunner` holds tokenised prompts and runs any subset of them with vectors injected, returning
logits at the last prompt position and, when answers are given, at the positions that predict each answer
token (teacher forcing). It chooses between two exact paths:

- *full*: every token of every prompt in one forward (any injection position);
- *tail*: when every injected position is among the last ``tail`` prompt tokens, the rest is a prefix
  whose keys/values do not depend on the vectors. The tail may differ per row (:class:`PositionTail`):
  a position counted from the start (the paper's ``P={4}``) is at a different distance from the end of each
  prompt, so each row is cached up to its own injected position and runs only the rest. The shared part (special tokens and a shared
  demonstration block) is computed once at construction. Each row's own prefix is computed the first time
  the row is run and kept (until ``max_cache_bytes``; later rows are recomputed per batch without
  gradients); only the tail (plus the answer tokens) runs with gradients. With ``skip_early_layers`` the
  same first pass also remembers the tail's residual stream entering every block, so a run whose vectors
  enter at block ``l`` starts at block ``l``. ``first_layer`` bounds which blocks' keys/values and states
  are kept (vectors entering earlier make the runner recompute those rows in full).

Layouts (columns left to right): full ``[pad][shared][row][answer]``; tail
``[shared][pad][row minus tail][pad][tail][answer]`` (the second padding only when the rows' tails differ, so
that every row's last prompt token is in the same column). Positions come from the attention mask, so both layouts
give the same numbers up to floating-point rounding (``tests/test_forward.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .heap import release_free_heap
from .inject import VectorEdit, inject, record_residual
from .kv_cache import KVPrefix, compute_prefix, forward_from_layer, forward_tokens
from .prompts import EncodedPrompts, pad_left, pad_right
from .sites import check_layer

if TYPE_CHECKING:
    from .models import LoadedModel


@dataclass(frozen=True)
class PositionTail:
    """A per-row tail: each prompt recomputes its tokens from the earliest of ``positions`` to its end.

    Positions follow :mod:`ltvlib.inject` (non-negative from the first real token, shared prefix included;
    negative from the last). A runner resolves it against its own prompts (:meth:`per_row`).
    """

    positions: tuple[int, ...]

    def per_row(self, prompts: EncodedPrompts) -> tuple[int, ...] | None:
        """Each row's tail length, or None when some position lies in the shared prefix (then only full
        forwards are exact: the shared keys/values are computed once, without vectors)."""
        shared = len(prompts.shared)
        tails = []
        for row in prompts.rows:
            total = shared + len(row)
            # a position past the prompt's end keeps tail 1; the injection then names the bad position
            need = max(max(total - p if p >= 0 else -p for p in self.positions), 1)
            if need > len(row):
                return None
            tails.append(need)
        return tuple(tails)


Tail = int | PositionTail | None

DEFAULT_BATCH_TOKENS = 8192
"""Default bound on a forward's padded size (rows x the longest row's tokens). A row-count bound alone let a batch
of 64 ten-shot RTE prompts (about 800 tokens each) hold every block's keys and values of 51,000 tokens at once
(about 2.3 GB on SmolLM2-135M in fp32) during their first pass; 8,192 tokens keeps 64-row batches of prompts up to
128 tokens (most zero-shot prompts batch as before; RTE's, up to 278 tokens, are split) and bounds a long-prompt
batch's keys and values to about 0.4 GB (8,192 tokens x 46 KB per token on SmolLM2-135M, computed, not measured)."""


PREFILL_BATCH_TOKENS = 2048
"""Default bound on a prefill forward's padded size (:meth:`PromptRunner.prefill`). A prefill's first pass records
every kept block's keys, values and states, so its transient grows with the batch: prefilling RTE's 600 ten-shot
training prompts from block 0 on SmolLM2-135M took 2.00-2.10 GiB beyond the cache it keeps at 8,192 tokens per
forward, 1.43-1.49 GiB at 4,096 and 0.94-0.96 GiB at 2,048, and was not slower at 2,048 (62 s against 69-75 s,
measured on 2 CPU cores). That first pass was chapter 02's peak; ``bench/memory.py`` measures a chapter-sized
unit's peak memory (``bench/README.md``)."""


def token_batches(order: Sequence[int], lengths: Sequence[int], max_rows: int,
                  max_tokens: int = DEFAULT_BATCH_TOKENS) -> Iterator[list[int]]:
    """Consecutive slices of ``order`` with at most ``max_rows`` rows whose padded size (rows x the slice's
    longest ``lengths[i]``) is at most ``max_tokens``; a row longer than ``max_tokens`` forms a batch of its own.
    ``order`` sorted by length gives the least padding.

    Raises:
        ValueError: ``max_rows`` or ``max_tokens`` below 1.
    """
    if max_rows < 1 or max_tokens < 1:
        raise ValueError(f"batches need max_rows >= 1 and max_tokens >= 1, got {max_rows} and {max_tokens}")
    batch: list[int] = []
    width = 0
    for i in order:
        wider = max(width, lengths[i])
        if batch and (len(batch) == max_rows or (len(batch) + 1) * wider > max_tokens):
            yield batch
            batch, wider = [], lengths[i]
        batch.append(i)
        width = wider
    if batch:
        yield batch


def tail_needed(positions: Sequence[int]) -> Tail:
    """The tail covering ``positions``: an int when all count from the end, a per-row :class:`PositionTail`
    when one counts from the start, None for no positions."""
    if not positions:
        return None
    if any(p >= 0 for p in positions):
        return PositionTail(tuple(positions))
    return max(-p for p in positions)


@dataclass
class _Row:
    """One row's cached work, for blocks ``first_layer..L-1``.

    Attributes:
        keys, values: ``(kept blocks, n_kv_heads, len(row) - tail, head_dim)``, one tensor each (so a batch's
            prefix is assembled with one copy, not one per row and block).
        states: answer ids -> ``(kept blocks, tail + len(answer) - 1, d_model)`` residual stream entering each
            kept block at the tail (and teacher-forced answer) tokens, without vectors.
    """

    keys: Tensor
    values: Tensor
    states: dict[tuple[int, ...], Tensor]

    @property
    def nbytes(self) -> int:
        tensors = [self.keys, self.values, *self.states.values()]
        return sum(t.numel() * t.element_size() for t in tensors)


class PromptRunner:
    """Run subsets of a fixed prompt set with injected vectors.

    Args:
        lm: a :class:`~ltvlib.models.LoadedModel`.
        prompts: the tokenised prompts.
        tail: number of final prompt tokens recomputed on each run: one int for every row, a
            :class:`PositionTail` (each row up to its own injected position; full forwards if a position lies in
            the shared prefix), or None (full forwards).
        cache_rows: keep each row's prefix (and, with ``skip_early_layers``, its tail states) after its first
            run, until ``max_cache_bytes``.
        max_cache_bytes: memory cap of the per-row cache.
        skip_early_layers: on the tail path, start a run at the first block a vector enters (the blocks before
            it are unaffected by the vectors). Default: ``cache_rows``.
        first_layer: the earliest block vectors are expected to enter; keys/values and states of earlier
            blocks are not kept (saves memory on long prompts). Runs with vectors entering earlier are still
            exact: their rows are recomputed in full.
    """

    def __init__(
        self,
        lm: LoadedModel,
        prompts: EncodedPrompts,
        *,
        tail: Tail = 1,
        cache_rows: bool = True,
        max_cache_bytes: int = 640 * 2**20,
        skip_early_layers: bool | None = None,
        first_layer: int = 0,
    ) -> None:
        self.lm = lm
        self.prompts = prompts
        self.tail = tail
        self.cache_rows = cache_rows
        self.max_cache_bytes = max_cache_bytes
        self.skip_early_layers = cache_rows if skip_early_layers is None else skip_early_layers
        self.first_layer = check_layer(first_layer, lm.n_layers)
        self.pad_id = lm.tokenizer.pad_token_id
        self.device = lm.device
        shortest = min(len(r) for r in prompts.rows)
        if isinstance(tail, int) and not 1 <= tail <= shortest:
            raise ValueError(f"tail {tail} must lie in [1, {shortest}] (the shortest prompt's own tokens)")
        #: each row's tail length, None on the full path
        self.row_tails: tuple[int, ...] | None = (
            tail.per_row(prompts) if isinstance(tail, PositionTail) else None if tail is None else (tail,) * len(prompts)
        )
        self.shared: KVPrefix | None = None
        if self.row_tails is not None and prompts.shared:
            ids = torch.tensor([prompts.shared], device=self.device)
            self.shared = compute_prefix(lm, ids, torch.ones_like(ids))
        self.rows: dict[int, _Row] = {}
        self.cache_bytes = 0

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def cached_rows(self) -> int:
        """How many rows have their prefix cached."""
        return len(self.rows)

    # ---------------------------------------------------------------- building the cache

    def _tail(self, i: int) -> int:
        assert self.row_tails is not None
        return self.row_tails[i]

    def _tail_ids(self, index: Sequence[int]) -> tuple[Tensor, Tensor]:
        """The rows' tail tokens, left-padded to a common width, and their mask."""
        return pad_left([list(self.prompts.rows[i][-self._tail(i) :]) for i in index], self.pad_id, self.device)

    @torch.no_grad()
    def first_pass(
        self, index: Sequence[int], answers: Sequence[tuple[int, ...]], *, states: bool, keep_from: int
    ) -> list[_Row]:
        """One no-gradient forward of whole rows (plus answer tokens) after the shared prefix: the keys/values
        of each row's tokens before the tail, and (``states``) the block inputs of its tail and answer tokens,
        for blocks ``keep_from..L-1``."""
        rows = [list(self.prompts.rows[i]) for i in index]
        ids, mask = pad_left(rows, self.pad_id, self.device)
        width = ids.shape[1]
        n_ans = max([1, *(len(a) for a in answers)])
        cont, cont_mask = pad_right([list(a[:-1]) for a in answers], self.pad_id, n_ans - 1, self.device)
        ids, mask = torch.cat([ids, cont], 1), torch.cat([mask, cont_mask], 1)
        shared = self.shared.expand(len(index)) if self.shared is not None else None
        kept = list(range(keep_from, self.lm.n_layers))
        if states:
            with record_residual(self.lm, kept) as rec:
                _, kv = forward_tokens(self.lm, ids, mask, prefix=shared, logits_to_keep=1, keep_cache=True)
        else:
            _, kv = forward_tokens(self.lm, ids, mask, prefix=shared, logits_to_keep=1, keep_cache=True)
        assert kv is not None
        offset = shared.length if shared is not None else 0
        out = []
        for b, (i, row, ans) in enumerate(zip(index, rows, answers)):
            tail = self._tail(i)
            cols = slice(offset + width - len(row), offset + width - tail)
            # clone: a view would keep the whole padded batch alive
            keys = torch.stack([kv.keys[l][b, :, cols] for l in kept])
            values = torch.stack([kv.values[l][b, :, cols] for l in kept])
            found: dict[tuple[int, ...], Tensor] = {}
            if states:
                own = tail + max(len(ans) - 1, 0)
                start = width - tail
                found[tuple(ans)] = torch.stack([rec[l][b, start : start + own] for l in kept]).clone()
            out.append(_Row(keys, values, found))
        return out

    @torch.no_grad()
    def _remember_states(self, index: Sequence[int], answers: Sequence[tuple[int, ...]], prefix: KVPrefix | None,
                         entries: Sequence[_Row], keep_from: int) -> None:
        """Block inputs of the tail (+ answer) tokens of rows whose prefix is already cached."""
        n_ans = max([1, *(len(a) for a in answers)])
        tails, tail_mask = self._tail_ids(index)
        cont, cont_mask = pad_right([list(a[:-1]) for a in answers], self.pad_id, n_ans - 1, self.device)
        ids, mask = torch.cat([tails, cont], 1), torch.cat([tail_mask, cont_mask], 1)
        kept = list(range(keep_from, self.lm.n_layers))
        with record_residual(self.lm, kept) as rec:
            forward_tokens(self.lm, ids, mask, prefix=prefix, logits_to_keep=1)
        for b, (i, ans, entry) in enumerate(zip(index, answers, entries)):
            pad = tails.shape[1] - self._tail(i)
            own = self._tail(i) + max(len(ans) - 1, 0)
            state = torch.stack([rec[l][b, pad : pad + own] for l in kept]).clone()
            entry.states[tuple(ans)] = state
            if self.rows.get(i) is entry:
                self.cache_bytes += state.numel() * state.element_size()

    def _keep(self, i: int, entry: _Row) -> None:
        if self.cache_rows and i not in self.rows and self.cache_bytes + entry.nbytes <= self.max_cache_bytes:
            self.rows[i] = entry
            self.cache_bytes += entry.nbytes

    def _add_states(self, i: int, key: tuple[int, ...], state: Tensor) -> None:
        """Keep a cached row's states for another answer (counted in the cache's bytes)."""
        self.rows[i].states[key] = state
        self.cache_bytes += state.numel() * state.element_size()

    def cache_bound(self, answers: Sequence[Sequence[int]] | None = None) -> int:
        """Bytes the cache will hold once :meth:`prefill` has run with ``answers``, computed from the prompts'
        lengths without running anything: the rows' prefix keys/values and the block inputs of their tail and
        teacher-forced answer tokens for blocks ``first_layer..L-1``, at most ``max_cache_bytes``, plus the shared
        prefix. On the full path, or without ``cache_rows``, what is held now."""
        shared = self.shared.nbytes if self.shared is not None else 0
        if self.row_tails is None or not self.cache_rows:
            return self.cache_bytes + shared
        g = self.lm.geometry
        kept = g.n_layers - self.first_layer
        size = torch.empty((), dtype=self.lm.dtype).element_size()
        per_prefix_token = 2 * kept * g.n_kv_heads * g.head_dim * size  # keys and values
        per_tail_token = kept * g.d_model * size  # block inputs
        extra = [max(len(a) - 1, 0) for a in answers] if answers is not None else [0] * len(self)
        rows = sum((len(row) - t) * per_prefix_token + (t + n) * per_tail_token
                   for row, t, n in zip(self.prompts.rows, self.row_tails, extra))
        return min(self.max_cache_bytes, rows) + shared

    @torch.no_grad()
    def prefill(self, answers: Sequence[Sequence[int]] | None = None, *, batch_size: int = 32,
                max_tokens: int = PREFILL_BATCH_TOKENS) -> int:
        """Compute every row's cache now, in batches of similar length (little padding), with the tail's block
        inputs for blocks ``first_layer..L-1``: one no-gradient full forward per row, after which every run that
        injects at ``first_layer`` or later costs only its tail. Rows already cached, and rows past
        ``max_cache_bytes``, are skipped (the latter are then recomputed per run, as without prefill).

        Args:
            answers: per row, the answer token ids training teacher-forces (their states are kept with the
                row); None: no answer tokens (evaluation).
            batch_size: rows per forward.
            max_tokens: bound on a forward's padded tokens (rows x longest prompt plus answer; see
                :func:`token_batches`); smaller than evaluation's because the first pass's records grow with the
                batch (:data:`PREFILL_BATCH_TOKENS`).

        Returns:
            the number of rows computed (a full forward each); 0 on the full path (nothing to cache).
        """
        if self.row_tails is None or not self.cache_rows:
            return 0
        keys = [tuple(a) for a in answers] if answers is not None else [()] * len(self)
        todo = [i for i in range(len(self)) if i not in self.rows]
        todo.sort(key=lambda i: (len(self.prompts.rows[i]), len(keys[i]), i))
        done = 0
        shared = len(self.prompts.shared)
        lengths = [shared + len(row) + len(key) for row, key in zip(self.prompts.rows, keys)]
        for index in token_batches(todo, lengths, batch_size, max_tokens):
            if self.cache_bytes >= self.max_cache_bytes:
                break
            entries = self.first_pass(index, [keys[i] for i in index], states=True, keep_from=self.first_layer)
            for i, entry in zip(index, entries):
                self._keep(i, entry)
            done += len(index)
        release_free_heap()  # the forwards' temporaries (every block's keys/values of each batch) are freed now
        return done

    def _stack(self, entries: Sequence[_Row], lengths: Sequence[int], keep_from: int) -> KVPrefix | None:
        """The batch's prefix (shared part + each row's tokens before the tail). Blocks below ``keep_from``
        are never run: they get zero views of the right shape (no memory), so the cache reports the right
        length to the attention-mask code."""
        batch, width = len(entries), max(lengths)
        if width == 0:
            return self.shared.expand(batch) if self.shared is not None else None
        g, dtype = self.lm.geometry, self.lm.dtype
        mask = torch.zeros((batch, width), dtype=torch.long, device=self.device)
        for b, n in enumerate(lengths):
            mask[b, width - n :] = 1
        nxt = mask.sum(-1)
        if self.shared is not None:
            shared = self.shared.expand(batch)
            mask = torch.cat([shared.attention_mask, mask], dim=1)
            nxt = nxt + shared.next_position
        placeholder = torch.zeros((1, 1, 1, 1), dtype=dtype, device=self.device).expand(
            batch, g.n_kv_heads, mask.shape[1], g.head_dim
        )
        keys, values = [placeholder] * keep_from, [placeholder] * keep_from
        # One scatter per tensor: every row's own columns, right-aligned in the batch's prefix.
        kept = self.lm.n_layers - keep_from
        k = torch.zeros((kept, batch, g.n_kv_heads, width, g.head_dim), dtype=dtype, device=self.device)
        v = torch.zeros_like(k)
        real = [b for b, n in enumerate(lengths) if n]
        if real:
            rows = torch.tensor([b for b in real for _ in range(lengths[b])], device=self.device)
            cols = torch.tensor([width - lengths[b] + c for b in real for c in range(lengths[b])], device=self.device)
            # (kept, heads, sum n, dim) -> (sum n, kept, heads, dim), the layout advanced indexing assigns
            k[:, rows, :, cols] = torch.cat([entries[b].keys for b in real], 2).permute(2, 0, 1, 3)
            v[:, rows, :, cols] = torch.cat([entries[b].values for b in real], 2).permute(2, 0, 1, 3)
        for j in range(kept):
            kj, vj = k[j], v[j]
            if self.shared is not None:
                kj = torch.cat([shared.keys[keep_from + j], kj], 2)
                vj = torch.cat([shared.values[keep_from + j], vj], 2)
            keys.append(kj)
            values.append(vj)
        return KVPrefix(keys, values, mask, nxt)

    # ---------------------------------------------------------------- running

    def run(
        self,
        index: Sequence[int],
        edits: Sequence[VectorEdit] = (),
        *,
        answers: Sequence[Sequence[int]] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Logits for the prompts ``index`` with ``edits`` injected: :func:`run_rows` over this runner's rows.

        Args:
            index: which prompts (a batch).
            edits: vectors to inject (``(d_model,)`` each, or ``(len(index), d_model)``), each at its own layer,
                site, prompt position and mode (:class:`~ltvlib.inject.VectorEdit`).
            answers: per prompt, the answer's token ids for teacher forcing; None for the next token only.

        Returns:
            ``logits (batch, n, vocab)`` where column ``j`` predicts answer token ``j`` (``n`` = longest answer,
            1 without answers), and ``valid (batch, n)`` marking real answer tokens.
        """
        return run_rows([(self, i) for i in index], edits, answers=answers)

    def _check_in_tail(self, index: Sequence[int], edits: Sequence[VectorEdit]) -> None:
        """On the tail path every injected position must be among each row's last tail prompt tokens: the keys
        and values of earlier tokens are cached without the vectors."""
        if self.row_tails is None:
            return
        shared = len(self.prompts.shared)
        for edit in edits:
            p = edit.position
            if p < 0:
                inside = all(-p <= self._tail(i) for i in index)
            else:  # counted from the first real token (shared prefix included): in the tail of every row?
                inside = all(p >= shared + len(self.prompts.rows[i]) - self._tail(i) for i in index)
            if not inside:
                need = f"tail={-p} or more" if p < 0 else f"tail=PositionTail(({p},)) or None (full forwards)"
                raise ValueError(
                    f"injected position {p} (layer {edit.layer}) lies in the cached prefix: this runner recomputes "
                    f"only the last tail={self.tail} prompt tokens. Build the runner (the `tail` argument of "
                    f"PromptRunner / EvalSet) with {need}; ltvlib.forward.tail_needed(positions) gives the tail "
                    f"that covers a set of positions"
                )

    def _forward(
        self, ids: Tensor, mask: Tensor, prompt_mask: Tensor, prefix: KVPrefix | None, offset: int,
        edits: Sequence[VectorEdit], n_ans: int,
    ) -> Tensor:
        if not edits:
            return forward_tokens(self.lm, ids, mask, prefix=prefix, logits_to_keep=n_ans)[0]
        with inject(self.lm, edits, attention_mask=prompt_mask, offset=offset):
            return forward_tokens(self.lm, ids, mask, prefix=prefix, logits_to_keep=n_ans)[0]


def run_rows(
    rows: Sequence[tuple[PromptRunner, int]],
    edits: Sequence[VectorEdit] = (),
    *,
    answers: Sequence[Sequence[int]] | None = None,
) -> tuple[Tensor, Tensor]:
    """Logits for prompts of one or several runners as rows of one batch, with ``edits`` injected.

    Row ``b`` is prompt ``rows[b][1]`` of runner ``rows[b][0]``; an edit's ``(rows, d_model)`` vector gives each row
    its own value, so runs of different tasks step together (:func:`ltvlib.ltv.train_ltv` with several tasks). Each
    runner computes and keeps its own rows' caches, as :meth:`PromptRunner.run` does (which is this function over
    one runner's rows). The runners must share the model, the path (tail or full), the shared prefix's tokens (so
    its cached keys/values are the same: zero-shot prompts of one tokenizer) and ``skip_early_layers``; each keeps
    blocks from its own ``first_layer``.

    Returns:
        ``logits (len(rows), n, vocab)`` and ``valid (len(rows), n)``, as :meth:`PromptRunner.run`.

    Raises:
        ValueError: no rows, or runners that cannot share a batch (the first difference named).
    """
    if not rows:
        raise ValueError("run_rows needs at least one row")
    lead = rows[0][0]
    runners = list({id(r): r for r, _ in rows}.values())
    for other in runners[1:]:
        _check_compatible(lead, other)
    for runner in runners:
        runner._check_in_tail([i for r, i in rows if r is runner], edits)
    lm, device = lead.lm, lead.device
    n_ans = max((len(a) for a in answers), default=1) if answers is not None else 1
    if answers is not None:
        cont, cont_mask = pad_right([a[:-1] for a in answers], lead.pad_id, n_ans - 1, device)
        valid = pad_right(answers, 0, n_ans)[1].bool().to(device)
    else:
        cont = torch.zeros((len(rows), 0), dtype=torch.long, device=device)
        cont_mask = cont
        valid = torch.ones((len(rows), 1), dtype=torch.bool, device=device)
    # without vectors nothing differs from the cached pass: start where the kept states begin
    start = min((e.layer % lm.n_layers for e in edits),
                default=max(r.first_layer for r in runners) if lead.skip_early_layers else 0)
    if lead.row_tails is None:
        full = [list(r.prompts.shared) + list(r.prompts.rows[i]) for r, i in rows]
        ids, mask = pad_left(full, lead.pad_id, device)
        ids, mask = torch.cat([ids, cont], 1), torch.cat([mask, cont_mask], 1)
        return lead._forward(ids, mask, mask[:, : ids.shape[1] - cont.shape[1]], None, 0, edits, n_ans), valid
    keys = [tuple(answers[b]) if answers is not None else () for b in range(len(rows))]
    skip = lead.skip_early_layers and start > 0
    # Each runner's rows cover blocks from its own first kept block (all blocks when a vector enters earlier).
    keep = {id(r): r.first_layer if start >= r.first_layer else 0 for r in runners}
    keep_from = max(keep.values())
    # A cached row whose states lack these answers cannot get them from a cache that starts after block 0 (the
    # blocks before it are not kept): such a row is computed afresh, with its states.
    missing = [b for b, (r, i) in enumerate(rows)
               if i not in r.rows or keep[id(r)] < r.first_layer
               or (skip and keep[id(r)] > 0 and keys[b] not in r.rows[i].states)]
    fresh: dict[int, _Row] = {}
    for runner in runners:
        mine = [b for b in missing if rows[b][0] is runner]
        if mine:
            fresh.update(zip(mine, runner.first_pass([rows[b][1] for b in mine], [keys[b] for b in mine],
                                                     states=skip, keep_from=keep[id(runner)])))
    entries: list[_Row] = []
    for b, (r, i) in enumerate(rows):
        entry = fresh[b] if b in fresh else r.rows[i]
        if b in fresh and keep[id(r)] == r.first_layer:
            kept = r.rows.get(i)
            if kept is not None and keys[b] not in kept.states and keys[b] in entry.states:
                r._add_states(i, keys[b], entry.states[keys[b]])
            r._keep(i, entry)
        entries.append(entry)
    lengths = [len(r.prompts.rows[i]) - r._tail(i) for r, i in rows]
    # blocks from keep_from on: a row kept from an earlier block drops its first ones (views, no copy)
    stacked = [e if keep[id(r)] == keep_from else _Row(e.keys[keep_from - keep[id(r)]:],
                                                       e.values[keep_from - keep[id(r)]:], e.states)
               for e, (r, _) in zip(entries, rows)]
    prefix = lead._stack(stacked, lengths, keep_from)
    tails, tail_mask = pad_left([list(r.prompts.rows[i][-r._tail(i):]) for r, i in rows], lead.pad_id, device)
    ids = torch.cat([tails, cont], 1)
    mask = torch.cat([tail_mask, cont_mask], 1)
    before = prefix.attention_mask if prefix is not None else mask[:, :0]
    prompt_mask = torch.cat([before, tail_mask], dim=1)
    if not skip:
        return lead._forward(ids, mask, prompt_mask, prefix, before.shape[1], edits, n_ans), valid
    lacking = [b for b, e in enumerate(entries) if keys[b] not in e.states]
    for runner in runners:
        mine = [b for b in lacking if rows[b][0] is runner]
        if mine:  # only rows kept from block 0 (see `missing`), so their prefix must hold every block
            if keep_from == 0:
                sub = prefix.rows(mine) if prefix is not None else None
            else:
                sub = runner._stack([entries[b] for b in mine], [lengths[b] for b in mine], 0)
            runner._remember_states([rows[b][1] for b in mine], [keys[b] for b in mine], sub,
                                    [entries[b] for b in mine], keep[id(runner)])
    # Each row's states cover its own tokens; pad columns (short answers) stay zero and are masked.
    hidden = torch.zeros((len(rows), ids.shape[1], lm.d_model), dtype=lm.dtype, device=device)
    for b, ((r, i), entry) in enumerate(zip(rows, entries)):
        state = entry.states[keys[b]][start - keep[id(r)]]
        pad = tails.shape[1] - r._tail(i)
        hidden[b, pad : pad + state.shape[0]] = state
    with inject(lm, edits, attention_mask=prompt_mask, offset=before.shape[1]):
        logits = forward_from_layer(lm, hidden, start, mask, prefix=prefix, logits_to_keep=n_ans)
    return logits, valid


def _check_compatible(a: PromptRunner, b: PromptRunner) -> None:
    """Two runners whose rows can share one batch, or a ValueError naming the first difference."""
    problems = [
        (a.lm is not b.lm, "different models"),
        ((a.row_tails is None) != (b.row_tails is None), "one runs full forwards, the other cached tails"),
        (a.prompts.shared != b.prompts.shared, "different shared prefixes (e.g. shared demonstrations)"),
        (a.skip_early_layers != b.skip_early_layers, "different skip_early_layers"),
    ]
    for bad, what in problems:
        if bad:
            raise ValueError(f"runners cannot share a batch: {what}")
