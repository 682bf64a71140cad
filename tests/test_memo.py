"""The in-memory memo registry (ltvlib.memo): entries per model, gone with their model, bounded per namespace,
all dropped by clear_memory."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch

from ltvlib import memo, prompt_store
from ltvlib.analysis import key_heads
from ltvlib.tasks import load_splits
from tests.models_fixtures import tiny_llama


class _Value:
    """A memoised value that can be weakly referenced (and may hold its model, as runners do)."""

    def __init__(self, owner: object = None) -> None:
        self.owner = owner


def test_entries_are_per_model() -> None:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    built = []
    va = memo.memo(a, "test.ns", "k", lambda: built.append("a") or _Value())
    vb = memo.memo(b, "test.ns", "k", lambda: built.append("b") or _Value())
    assert va is not vb and built == ["a", "b"]  # the same key on another model: its own entry
    assert memo.memo(a, "test.ns", "k", lambda: built.append("again") or _Value()) is va  # a hit builds nothing
    assert built == ["a", "b"]
    assert list(memo.entries(a, "test.ns")) == ["k"] and memo.entries(b, "test.ns")["k"] is vb
    assert memo.model_serial(a) != memo.model_serial(b) and memo.model_serial(a) == memo.model_serial(a)


def test_a_loaded_model_keys_by_its_module(llama) -> None:
    value = memo.memo(llama, "test.loaded", "k", _Value)
    assert memo.entries(llama.model, "test.loaded")["k"] is value
    assert memo.model_serial(llama) == memo.model_serial(llama.model)


def test_an_entry_dies_with_its_model() -> None:
    module = torch.nn.Linear(2, 2)
    value = memo.memo(module, "test.gc", "k", lambda m=module: _Value(owner=m))  # holding its model: a cycle
    model_ref, value_ref = weakref.ref(module), weakref.ref(value)
    del module, value
    gc.collect()
    assert model_ref() is None and value_ref() is None


def test_a_runner_memo_frees_its_model() -> None:
    """A real memo (key_heads' runners hold their model) no longer keeps a deleted model alive."""
    lm = tiny_llama()
    runner = key_heads.last_token_runner(lm, "antonym", load_splits("antonym").test[:4])
    assert key_heads.last_token_runner(lm, "antonym", load_splits("antonym").test[:4]) is runner
    model_ref, runner_ref = weakref.ref(lm.model), weakref.ref(runner)
    del lm, runner
    gc.collect()
    assert model_ref() is None and runner_ref() is None


def test_the_bound_keeps_the_newest_entries() -> None:
    module = torch.nn.Linear(2, 2)
    for i in range(5):
        memo.memo(module, "test.bound", i, _Value, keep=3)
        assert len(memo.entries(module, "test.bound")) == min(i + 1, 3)
    assert list(memo.entries(module, "test.bound")) == [2, 3, 4]  # the oldest stored went first
    first = memo.entries(module, "test.bound")[2]
    assert memo.memo(module, "test.bound", 2, _Value, keep=3) is first  # a hit does not refresh...
    memo.memo(module, "test.bound", 5, _Value, keep=3)
    assert list(memo.entries(module, "test.bound")) == [3, 4, 5]  # ...so it is still the oldest
    memo.memo(module, "test.other", 0, _Value, keep=1)  # bounds are per namespace
    assert len(memo.entries(module, "test.bound")) == 3


def test_reuse_rebuilds_a_stale_entry() -> None:
    module = torch.nn.Linear(2, 2)
    old = memo.memo(module, "test.reuse", "k", lambda: (3, _Value()))
    assert memo.memo(module, "test.reuse", "k", lambda: (1, _Value()), reuse=lambda e: e[0] <= 5) is old
    new = memo.memo(module, "test.reuse", "k", lambda: (1, _Value()), reuse=lambda e: e[0] <= 1)
    assert new is not old and new[0] == 1 and len(memo.entries(module, "test.reuse")) == 1


def test_clear_memory_empties_every_namespace(monkeypatch) -> None:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    for module in (a, b):
        for ns in ("test.x", "test.y"):
            memo.memo(module, ns, "k", _Value)
    store = prompt_store.PromptStore()
    store.entries["k"] = prompt_store.Entry(0, _Value())
    monkeypatch.setattr(prompt_store, "STORE", store)
    serial = memo.model_serial(a)
    memo.clear_memory()
    assert all(not memo.entries(m, ns) for m in (a, b) for ns in ("test.x", "test.y"))
    assert not store.entries  # the prompt store's entries go too
    assert memo.model_serial(a) == serial  # a live model keeps its number


def test_a_copy_starts_empty() -> None:
    module = torch.nn.Linear(2, 2)
    memo.memo(module, "test.copy", "k", _Value)
    clone = copy.deepcopy(module)
    assert not memo.entries(clone, "test.copy") and memo.model_serial(clone) != memo.model_serial(module)
    assert "k" in memo.entries(module, "test.copy")


class _Sized(_Value):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size


def test_the_byte_bound_drops_the_oldest_but_the_one_asked_for() -> None:
    module = torch.nn.Linear(2, 2)
    size = lambda v: v.size

    def put(key: str, n: int) -> _Sized:
        return memo.memo(module, "test.bytes", key, lambda: _Sized(n), keep=5, max_bytes=100, nbytes=size)

    a, b = put("a", 40), put("b", 40)
    assert list(memo.entries(module, "test.bytes")) == ["a", "b"]
    put("c", 40)  # 120 > 100: the oldest goes, never the new one
    assert list(memo.entries(module, "test.bytes")) == ["b", "c"]
    b.size = 90  # entries grow after they are stored (test sets cache prompts as they run)...
    assert put("b", 0) is b  # ...and a hit enforces the bound too, keeping the entry asked for
    assert list(memo.entries(module, "test.bytes")) == ["b"]
    put("d", 500)  # a single entry over the bound is still kept (it is the one asked for)
    assert list(memo.entries(module, "test.bytes")) == ["d"]
    assert a not in memo.entries(module, "test.bytes").values()


def test_the_byte_bound_needs_a_size() -> None:
    with pytest.raises(ValueError, match="max_bytes and nbytes go together"):
        memo.memo(torch.nn.Linear(2, 2), "test.bad", "k", _Value, max_bytes=10)


def test_namespaces_sharing_a_budget_are_bounded_together() -> None:
    """Two memos naming one budget hold at most ``max_bytes`` together, the oldest stored entry of either dropped
    first; a namespace outside the budget keeps its own bound."""
    module = torch.nn.Linear(2, 2)
    size = lambda v: v.size

    def put(namespace: str, key: str, n: int, budget: str | None = "test.shared") -> _Sized:
        return memo.memo(module, namespace, key, lambda: _Sized(n), keep=3, max_bytes=100, nbytes=size, budget=budget)

    put("test.a", "a1", 40)
    put("test.b", "b1", 40)
    put("test.own", "o1", 90, budget=None)  # its own bound: neither counts it nor is trimmed by it
    assert list(memo.entries(module, "test.a")) == ["a1"] and list(memo.entries(module, "test.b")) == ["b1"]
    put("test.b", "b2", 40)  # 120 > 100 over the budget: a1, the oldest of either namespace, goes
    assert not memo.entries(module, "test.a") and list(memo.entries(module, "test.b")) == ["b1", "b2"]
    put("test.a", "a2", 30)  # 110: b1 goes, never the entry asked for
    assert list(memo.entries(module, "test.a")) == ["a2"] and list(memo.entries(module, "test.b")) == ["b2"]
    assert list(memo.entries(module, "test.own")) == ["o1"]
    memo.clear_memory()
    assert not memo._store(module).order


def test_a_budget_needs_a_byte_bound() -> None:
    with pytest.raises(ValueError, match="budget 'x' needs max_bytes"):
        memo.memo(torch.nn.Linear(2, 2), "test.bad", "k", _Value, budget="x")


def test_the_test_set_memos_share_one_budget(monkeypatch) -> None:
    """The LTVs' and the extracted vectors' test sets are bounded together: a chapter evaluating both held up to
    twice the bound before (test sets replaced by sized stand-ins, the bound by 100 bytes)."""
    from types import SimpleNamespace

    from ltvlib.study import extracted, ltvs

    module = torch.nn.Linear(2, 2)
    for where in (ltvs, extracted):
        monkeypatch.setattr(where, "MEMO_EVALSET_BYTES", 100)
        monkeypatch.setattr(where, "EvalSet", lambda *args, **kwargs: SimpleNamespace(nbytes=60))
    monkeypatch.setattr(extracted, "task_splits", lambda task, sizes: SimpleNamespace(test=(task,)))
    monkeypatch.setattr(extracted, "vanilla_task", lambda task, template: task)
    splits = SimpleNamespace(test=("q",), train=())
    ltv_set = ltvs.ltv_test_set(module, "antonym", splits, 0, 0, None, 1)
    assert extracted.extracted_test_set(module, "antonym", None, "task") is not ltv_set
    assert not memo.entries(module, "ltvs.test_sets")  # 120 > 100: the older, the LTVs' set, went
    assert len(memo.entries(module, "extracted.evalsets")) == 1
