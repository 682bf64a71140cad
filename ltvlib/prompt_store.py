"""Pay for each prompt once: the prompt caches that LTV training and validation share within a process.

Training an LTV runs its training queries (about 600) and validation queries (200-400) through the frozen
model many times with a vector injected at a late position. What the vector cannot change is computed once,
by one no-gradient full forward per prompt (:meth:`ltvlib.forward.PromptRunner.prefill`, batches of similar
length): the keys/values of each prompt's prefix in every block, and the residual stream entering every
block at the tail positions (and teacher-forced answer tokens). A vector entering block ``l`` then costs
only blocks ``l..L-1`` on the tail.

:data:`STORE` keeps those caches per (model, task split, prompt format, tail) and hands the same ones to
every :func:`ltvlib.ltv.train_ltv` call in the process: every layer of a layer sweep, every seed of a zero-shot
(task, layer) and every recipe that validates on the same prompts. An entry built for blocks from
``first_layer`` on serves any later layer; a request for an earlier layer rebuilds the entry from that layer
(one more full forward per prompt), so a sweep pays once when it goes from the lowest layer up (chapter 01 does).

**Memory bound**: only blocks ``first_layer..L-1`` are kept; the store holds at most ``max_bytes`` (default
:data:`DEFAULT_MAX_BYTES`, 2 GiB, or ``LTV_PROMPT_STORE_BYTES``) of cached tensors over all entries and evicts
the least recently used entries past it (never the one just asked for; a single entry is bounded by its
runners' own ``max_cache_bytes``: :func:`runner_bytes` for the training prompts, half the store's bound and at
least 640 MiB over a task's runners, 1.5 GiB per validation set). Rows past a runner's cap are recomputed without
gradients at every step that draws them (RTE's LTV at every fourth layer, then at block 15, on two CPU cores: 332 s
and 244 s under a 640 MiB cap, 170 s and 43 s with every row cached; ``bench/README.md``), so a machine with memory
to spare should raise the bound (``scripts/book.sh`` sets it to 40 % of the machine's memory on a CPU). Before a new entry
is prefilled, the entries that would not fit beside it (its size computed from the prompts' lengths) are
evicted, so the old entries and the one being built are held together only within the bound (or one entry
alone where it exceeds the bound). On SmolLM2-135M
in fp32 (3 KV heads of 64, 30 blocks) the train and validation entries of one task at the ``cpu`` sizes (600 and
200 queries), from block 0 / from the middle block 15, hold: Capital 57 / 28 MiB, Capitalize 200 / 100,
Antonym 237 / 118 (measured: 213 MiB from block 3, as computed), TREC 157 / 78, SST-2 1,009 / 505, SNLI
1,377 / 688, RTE 2,899 / 1,450 MiB, the last three before the runners' own caps (rows past a cap are
recomputed per batch, as before the store). Worst case held: the larger of the bound and one entry (2.1
GiB), against the bound plus the entry being built (4.1 GiB) before entries were evicted ahead of a build, and
up to 4.3 GiB for the four runners (two tasks, capped per runner only) the code before the store could hold.

``LTV_PROMPT_STORE=0`` selects the code path before the store (``legacy``): runners built and cached per call
site as before, each prompt's cache computed lazily inside the training batches, at most four runners kept
(``bench/sweep.py`` compares the two).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_BYTES = 2 * 2**30
"""Default bound of the store's cached tensors over all entries (2 GiB)."""

MIN_RUNNER_BYTES = 640 * 2**20
"""The least a training runner may cache (640 MiB, :class:`ltvlib.forward.PromptRunner`'s default)."""


def runner_bytes(n_runners: int = 1) -> int:
    """What each of a task's ``n_runners`` training runners (one per demonstration block) may cache: half the store's
    bound shared among them, at least :data:`MIN_RUNNER_BYTES` each."""
    return max(MIN_RUNNER_BYTES, STORE.max_bytes // (2 * max(1, n_runners)))


def enabled() -> bool:
    """Whether training uses the store (``LTV_PROMPT_STORE`` unset or not ``0``)."""
    return os.environ.get("LTV_PROMPT_STORE", "1").strip() not in ("0", "false", "off", "legacy")


def _runners(value: Any) -> list[Any]:
    """The :class:`~ltvlib.forward.PromptRunner` objects inside a stored value (runners, training prompts or an
    :class:`~ltvlib.evaluate.EvalSet`)."""
    if hasattr(value, "runners"):
        return list(value.runners)
    if hasattr(value, "groups") and value.groups and isinstance(value.groups[0], tuple):
        return [runner for _, runner in value.groups]
    if hasattr(value, "prefill"):
        return [value]
    return []


def _bound(value: Any) -> int:
    """Bytes a stored value will hold once its runners are prefilled without answer tokens."""
    return sum(runner.cache_bound() for runner in _runners(value) if hasattr(runner, "cache_bound"))


def value_bytes(value: Any) -> int:
    """Bytes of cached tensors a stored value holds (rows' keys/values/states and shared prefixes)."""
    total = 0
    for runner in _runners(value):
        total += runner.cache_bytes
        if getattr(runner, "shared", None) is not None:
            total += runner.shared.nbytes
    return total


@dataclass
class Entry:
    """One stored value (runners or an evaluation set) and the first layer its caches serve from."""

    first_layer: int
    value: Any


@dataclass
class PromptStore:
    """Bounded in-memory store of prompt caches, least recently used evicted first.

    Attributes:
        max_bytes: bound on the cached tensors of all entries together.
        builds: entries built (a build runs one full forward per prompt it prefills).
        hits: requests served by an existing entry.
        prefilled_rows: rows computed by prefill over the store's life (one full forward each).
        peak_bytes: the largest total held after any request.
    """

    max_bytes: int = field(default_factory=lambda: int(os.environ.get("LTV_PROMPT_STORE_BYTES", DEFAULT_MAX_BYTES)))
    entries: OrderedDict[Hashable, Entry] = field(default_factory=OrderedDict)
    builds: int = 0
    hits: int = 0
    prefilled_rows: int = 0
    peak_bytes: int = 0

    def get(self, key: Hashable, first_layer: int, build: Callable[[int], Any],
            prefill: Callable[[Any], int] | None = None, bound: Callable[[Any], int] | None = None) -> Any:
        """The value for ``key`` covering blocks from ``first_layer`` on: the stored one when it starts at or
        before ``first_layer``, else ``build(first_layer)`` (then ``prefill(value)``, which returns the rows it
        computed), stored in place of the old one. ``bound(value)``: the bytes the value will hold once prefilled
        (default: its runners' :meth:`~ltvlib.forward.PromptRunner.cache_bound` without answer tokens), room
        made for before the prefill."""
        entry = self.entries.get(key)
        if entry is not None and entry.first_layer <= first_layer:
            self.entries.move_to_end(key)
            self.hits += 1
            self._account(key)
            return entry.value
        self.entries.pop(key, None)
        value = build(first_layer)
        self.builds += 1
        if prefill is not None:
            self._make_room(key, bound(value) if bound is not None else _bound(value))
            self.prefilled_rows += prefill(value)
        self.entries[key] = Entry(first_layer, value)
        self._account(key)
        return value

    @property
    def nbytes(self) -> int:
        """Bytes of cached tensors held now."""
        return sum(value_bytes(e.value) for e in self.entries.values())

    def _make_room(self, key: Hashable, need: int) -> None:
        """Before a new value is prefilled, evict the least recently used entries while they and the ``need``
        bytes it will hold exceed ``max_bytes``: the entries :meth:`_account` would evict after the build are
        dropped before it, so the old entries and the new one are never held together past the bound (a single
        entry larger than the bound is still built)."""
        while self.entries and self.nbytes + need > self.max_bytes:
            oldest = next(k for k in self.entries)
            if oldest == key:  # never the entry being built (it is not stored yet; defensive)
                break
            del self.entries[oldest]

    def _account(self, keep: Hashable) -> None:
        while self.nbytes > self.max_bytes and len(self.entries) > 1:
            oldest = next(k for k in self.entries if k != keep)
            del self.entries[oldest]
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        self.entries.clear()
        self.builds = self.hits = self.prefilled_rows = self.peak_bytes = 0


STORE = PromptStore()
"""The process-wide store :func:`ltvlib.ltv.train_ltv` uses."""
