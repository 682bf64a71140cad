"""The prompt store: the same vectors as the lazily cached path, one full forward per prompt for a layer sweep
and for several seeds, and a memory bound that holds."""

from __future__ import annotations

import pytest
import torch

from ltvlib import memo, prompt_store
from ltvlib.forward import PromptRunner
from ltvlib.ltv import FAST_RECIPE, PAPER_RECIPE, train_ltv, with_config
from ltvlib.prompt_store import PromptStore
from ltvlib.tasks import load_splits

# one run per vector (no retry of a run that does not train): the store counts and the schedule are per run
CONFIG = with_config(FAST_RECIPE, epochs=2, samples_per_epoch=32, batch_size=8, patience=5, lr=3.0,
                     retries_without_progress=0)


def _splits():
    return load_splits("antonym", n_train=48, n_val=16)


@pytest.fixture
def fresh(monkeypatch):
    """An empty process store and legacy memo for the test, whatever ran before: ``memo.clear_memory`` without
    its garbage collection, which frees memory but empties nothing (and costs about half a second a test late
    in a session, with every earlier test's objects to walk)."""
    with monkeypatch.context() as m:
        m.setattr(memo.gc, "collect", lambda *args: 0)
        memo.clear_memory()
    store = PromptStore()
    monkeypatch.setattr(prompt_store, "STORE", store)
    return store


@pytest.fixture
def first_pass_rows(monkeypatch):
    """Counts rows run through a no-gradient full forward (``PromptRunner.first_pass``)."""
    count = {"rows": 0}
    original = PromptRunner.first_pass

    def counting(self, index, *args, **kwargs):
        count["rows"] += len(index)
        return original(self, index, *args, **kwargs)

    monkeypatch.setattr(PromptRunner, "first_pass", counting)
    return count


@pytest.mark.parametrize("layer", [0, 1, 2])
@pytest.mark.parametrize("shots", [0, 2])
def test_store_gives_the_vectors_of_the_lazy_path(tiny, fresh, monkeypatch, layer, shots):
    config = with_config(CONFIG, demo_sets=2)
    kwargs = {"layers": [layer], "shots": shots, "recipe": config, "seed": 1, "splits": _splits(), "progress": False}
    stored = train_ltv(tiny, "antonym", **kwargs)
    assert fresh.builds == 2 and fresh.prefilled_rows > 0
    monkeypatch.setenv("LTV_PROMPT_STORE", "0")
    lazy = train_ltv(tiny, "antonym", **kwargs)
    assert fresh.builds == 2  # the legacy path does not touch the store
    torch.testing.assert_close(stored.vectors, lazy.vectors, atol=1e-5, rtol=1e-4)
    assert ([c.get("val_accuracy") for c in stored.training.curve]
            == [c.get("val_accuracy") for c in lazy.training.curve])
    assert stored.training.steps == lazy.training.steps and stored.training.trained == lazy.training.trained


def test_position_counted_from_the_start_matches_the_lazy_path(llama, fresh, monkeypatch):
    kwargs = {"layers": [1], "positions": [3, -1], "recipe": CONFIG, "seed": 0, "splits": _splits(), "progress": False}
    stored = train_ltv(llama, "antonym", **kwargs)
    monkeypatch.setenv("LTV_PROMPT_STORE", "0")
    lazy = train_ltv(llama, "antonym", **kwargs)
    torch.testing.assert_close(stored.vectors, lazy.vectors, atol=1e-5, rtol=1e-4)


def test_a_layer_sweep_and_seeds_run_each_prompt_once(llama, fresh, first_pass_rows):
    splits = _splits()
    n_prompts = len(splits.train) + len(splits.validation)
    for layer in (0, 1, 2):
        train_ltv(llama, "antonym", layers=[layer], recipe=CONFIG, splits=splits, progress=False)
        assert first_pass_rows["rows"] == n_prompts  # layers 1 and 2 reuse layer 0's forwards
    for seed in (1, 2):
        train_ltv(llama, "antonym", layers=[1], recipe=CONFIG, seed=seed, splits=splits, progress=False)
    assert first_pass_rows["rows"] == n_prompts
    assert fresh.builds == 2 and fresh.hits == 8


def test_the_lazy_path_runs_prompts_again_for_a_lower_layer(llama, fresh, first_pass_rows, monkeypatch):
    """The count above is not trivially met: without the store (or going down in layers) prompts are rerun."""
    splits = _splits()
    n_prompts = len(splits.train) + len(splits.validation)
    train_ltv(llama, "antonym", layers=[2], recipe=CONFIG, splits=splits, progress=False)
    once = first_pass_rows["rows"]
    train_ltv(llama, "antonym", layers=[0], recipe=CONFIG, splits=splits, progress=False)
    # every training and validation prompt runs again: block 0's keys were not kept by the entry from block 2
    # (the first run's count also holds the no-vector validation pass, which is memoised for the second)
    assert first_pass_rows["rows"] - once == n_prompts
    assert fresh.builds == 4


def test_a_recipe_without_prefix_cache_stores_nothing(llama, fresh, first_pass_rows):
    config = with_config(PAPER_RECIPE, epochs=1, samples_per_epoch=8)
    train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    assert first_pass_rows["rows"] == 0 and fresh.nbytes == 0


def test_eviction_keeps_the_store_under_its_bound(llama, fresh, monkeypatch):
    splits = _splits()
    train_ltv(llama, "antonym", layers=[1], recipe=CONFIG, splits=splits, progress=False)
    one_task = fresh.nbytes
    assert one_task > 0
    bound = int(1.5 * one_task)
    store = PromptStore(max_bytes=bound)
    monkeypatch.setattr(prompt_store, "STORE", store)
    for task in ("antonym", "capital", "capitalize"):
        train_ltv(llama, task, layers=[1], recipe=CONFIG, splits=load_splits(task, n_train=48, n_val=16),
                  progress=False)
        assert store.nbytes <= bound
    assert store.peak_bytes <= bound
    keys = list(store.entries)
    assert keys[-1][3].name == "capitalize"  # the newest entry stays
    assert not any(k[3].name == "antonym" for k in keys)  # the oldest went first


def test_a_single_entry_larger_than_the_bound_is_kept_and_alone():
    class Runner:
        cache_bytes, shared = 100, None

        def prefill(self):
            return 0

    store = PromptStore(max_bytes=50)
    store.get("a", 0, lambda first: Runner())
    store.get("b", 0, lambda first: Runner())
    assert list(store.entries) == ["b"]
    assert store.get("b", 1, lambda first: pytest.fail("rebuilt")) is store.entries["b"].value
    store.get("b", 0, lambda first: pytest.fail("rebuilt"))


def test_old_entries_and_the_one_being_built_stay_within_the_bound(llama, fresh, monkeypatch):
    """Room is made before a new entry's prefill: the entries held while it is built and the new one's bytes
    together never pass the bound (without that, the old entries stayed until the new one was stored)."""
    train_ltv(llama, "antonym", layers=[1], recipe=CONFIG, splits=_splits(), progress=False)
    bound = int(1.5 * fresh.nbytes)
    store = PromptStore(max_bytes=bound)
    monkeypatch.setattr(prompt_store, "STORE", store)
    held = []
    original = store.get

    def watched(key, first_layer, build, prefill=None, bound=None):
        def measured(value):
            rows = prefill(value)
            held.append(store.nbytes + prompt_store.value_bytes(value))  # old entries + the one just built
            return rows

        return original(key, first_layer, build, measured if prefill is not None else None, bound)

    monkeypatch.setattr(store, "get", watched)
    for task in ("antonym", "capital", "capitalize", "antonym"):
        train_ltv(llama, task, layers=[1], recipe=CONFIG, splits=load_splits(task, n_train=48, n_val=16),
                  progress=False)
    assert len(held) >= 6 and max(held) <= bound
    assert store.nbytes <= bound and store.builds == len(held)
