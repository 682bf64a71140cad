"""Tasks trained together (train_ltv with a list of tasks): every (task, seed) run is the run train_ltv makes for
that task alone, within float tolerance, whatever the others do (early stops, retries), and the cache holds one
file per run."""

from __future__ import annotations

import pytest
import torch

from ltvlib.ltv import FAST_RECIPE, TrainingDivergedError, train_ltv, with_config
from ltvlib.tasks import load_splits
from tests.same_run import assert_same_run

SIZES = {"n_train": 48, "n_val": 16, "progress": False}


@pytest.mark.parametrize("layers, positions", [([1], (-1,)), ([0, 2], (-2, -1))])
def test_each_task_and_seed_is_its_own_run(tiny, layers, positions):
    """A generation task and two classification tasks (multi-token answers, balanced-accuracy early stopping),
    two seeds each, on the tiny Llama (grouped-query attention) and the tiny Gemma 3."""
    config = with_config(FAST_RECIPE, epochs=3, samples_per_epoch=24, batch_size=8, lr=3.0, patience=5,
                         retries_without_progress=0)
    tasks = ["antonym", "sst2", "trec"]
    together = train_ltv(tiny, tasks, seeds=[0, 3], layers=layers, positions=positions, recipe=config, **SIZES)
    assert [[v.task for v in per] for per in together] == [[t, t] for t in tasks]
    for per in together:
        for t in per:
            alone = train_ltv(tiny, t.task, seed=t.seed, layers=layers, positions=positions, recipe=config, **SIZES)
            assert_same_run(t, alone)
    assert not torch.equal(together[0][0].vectors, together[1][0].vectors)


@pytest.mark.parametrize("group_tokens", [32768, 1])
def test_tasks_stop_early_and_retry_each_on_their_own(llama, monkeypatch, group_tokens):
    """With patience 1 some runs stop after an epoch or are retried at a smaller step while the others go on:
    whatever each does, it is what train_ltv does with that task alone, and each attempt's steps are recorded."""
    from ltvlib import ltv as ltv_module

    monkeypatch.setattr(ltv_module, "learned_rule", lambda accuracy, n, no_vector, majority: (True, float("nan")))
    monkeypatch.setattr(ltv_module, "GROUP_TOKENS", group_tokens)  # 1: every run a forward of its own
    config = with_config(FAST_RECIPE, epochs=4, samples_per_epoch=16, batch_size=8, lr=0.3, patience=1,
                         patience_after_gain=False, retries_without_progress=1, lr_stream_statistic="rms")
    tasks = ["sst2", "antonym", "capital"]
    together = train_ltv(llama, tasks, seeds=[0, 1], layers=[1], recipe=config, **SIZES)
    alone = [[train_ltv(llama, t, seed=s, layers=[1], recipe=config, **SIZES) for s in (0, 1)] for t in tasks]
    for per_t, per_a in zip(together, alone):
        for t, a in zip(per_t, per_a):
            assert_same_run(t, a)
            assert len(t.training.attempt_steps) == t.training.attempts
            assert t.training.attempt_steps[-1 if t.training.learned else 0] >= 0
    runs = {(a.training.steps, a.training.attempts) for per in alone for a in per}
    assert len(runs) > 1, runs  # the case this test is for: the runs did not all take the same course


def test_single_task_results_keep_their_shapes(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    one = train_ltv(llama, ["antonym"], layers=[1], recipe=config, **SIZES)
    assert isinstance(one, list) and len(one) == 1 and one[0].task == "antonym"
    nested = train_ltv(llama, ("antonym", "capital"), seeds=[2], layers=[1], recipe=config, **SIZES)
    assert [[v.seed for v in per] for per in nested] == [[2], [2]]


def test_the_cache_holds_one_file_per_run_and_trains_only_what_is_missing(llama, tmp_path, monkeypatch):
    from ltvlib import ltv as ltv_module

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path / "cache"))
    trained: list[list[tuple[str, int]]] = []
    real = ltv_module._train_runs

    def spy(lm, specs, **kwargs):
        trained.append([(s.task.name, s.seed) for s in specs])
        return real(lm, specs, **kwargs)

    monkeypatch.setattr(ltv_module, "_train_runs", spy)
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    first = train_ltv(llama, "capital", layers=[1], recipe=config, cache=True, **SIZES)
    both = train_ltv(llama, ["capital", "antonym"], seeds=[0, 1], layers=[1], recipe=config, cache=True, **SIZES)
    assert trained == [[("capital", 0)], [("capital", 1), ("antonym", 0), ("antonym", 1)]]
    assert torch.equal(both[0][0].vectors, first.vectors)
    assert len(list((tmp_path / "cache" / "vectors" / "ltv").glob("*.safetensors"))) == 4
    again = train_ltv(llama, ["antonym", "capital"], seeds=[1, 0], layers=[1], recipe=config, cache=True, **SIZES)
    assert len(trained) == 2  # all read back
    assert torch.equal(again[0][0].vectors, both[1][1].vectors)


def test_bad_task_lists_name_the_problem(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    with pytest.raises(ValueError, match="at least one task"):
        train_ltv(llama, [], layers=[1], recipe=config, **SIZES)
    with pytest.raises(ValueError, match=r"distinct tasks; got \['antonym', 'antonym'\]"):
        train_ltv(llama, ["antonym", "antonym"], layers=[1], recipe=config, **SIZES)
    with pytest.raises(ValueError, match="splits= names one task"):
        train_ltv(llama, ["antonym", "capital"], layers=[1], recipe=config,  # type: ignore[call-overload]
                  splits=load_splits("antonym", n_train=48, n_val=16), progress=False)


def test_a_diverging_run_names_its_task_and_seed(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8, max_loss=1e-6)
    with pytest.raises(TrainingDivergedError, match=r"task 'antonym'.*seed 4"):
        train_ltv(llama, ["antonym", "capital"], seeds=[4], layers=[1], recipe=config, **SIZES)


def test_width_groups_keep_similar_prompts_together():
    from ltvlib.ltv import width_groups

    assert width_groups([10], 16) == [[0]]
    assert width_groups([10, 12, 11], 16) == [[0, 1, 2]]  # one group, in the runs' order
    # a long task apart from short ones; the long ones split at the token bound
    assert width_groups([10, 300, 12, 280], 16, max_tokens=16 * 300) == [[0, 2], [3], [1]]
    assert width_groups([10, 300, 12, 280], 16, max_tokens=32 * 300) == [[0, 2], [1, 3]]
    assert width_groups([5000], 16, max_tokens=100) == [[0]]  # a run alone may exceed the bound
