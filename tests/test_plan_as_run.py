"""The count of what a build ran (:mod:`ltvlib.study.as_run`): each attempt's steps read back from a vector's
record (exactly, or at a stated lower bound), and the plan's count with the recorded steps against
``FlopCounterMode``'s count of the same training, early stops and retries included."""

from __future__ import annotations

import dataclasses

import pytest
from models_fixtures import tiny_llama

from ltvlib import prompt_store, stream_scale
from ltvlib.ltv import FAST_RECIPE, train_ltv, with_config
from ltvlib.ltv_record import TrainingRecord
from ltvlib.study.as_run import as_run, attempt_steps
from ltvlib.study.cost import LTVCounter
from ltvlib.tasks import load_splits
from tests.test_plan import _check, _counted, _lengths, _shape

# 4 epochs of 2 steps, patience 1 counted from the first gain, one retry
RECIPE = with_config(FAST_RECIPE, batch_size=8, epochs=4, samples_per_epoch=16, patience=1, retries_without_progress=1)


def _record(**kw) -> TrainingRecord:
    return TrainingRecord(start_val_score=0.5, **kw)


@pytest.mark.parametrize(("record", "steps", "bounds"), [
    (_record(steps=4, learned=True, attempt_scores=(0.8,)), (4,), 0),  # learned at once, stopped early
    (_record(steps=6, learned=True, attempt_scores=(0.5, 0.9)), (8, 6), 0),  # no gain: the first ran to the cap
    (_record(steps=8, learned=False, attempt_scores=(0.6, 0.4)), (8, 8), 0),  # kept the first (best)
    (_record(steps=4, learned=False, attempt_scores=(0.5, 0.7)), (8, 4), 0),
    (_record(steps=8, learned=False, attempt_scores=(0.7, 0.6)), (8, 4), 1),  # the second gained: 2 epochs at least
    (_record(steps=4, learned=False, attempt_scores=(0.6, 0.6)), (4, 4), 1),  # a tie keeps the first
])
def test_each_attempts_steps_are_read_back_from_the_record(record, steps, bounds):
    assert attempt_steps(RECIPE, record) == (steps, bounds)


def test_a_record_that_lists_every_attempts_steps_is_read_exactly():
    record = _record(steps=8, learned=False, attempt_scores=(0.7, 0.6), attempt_steps=(6, 8))
    assert attempt_steps(RECIPE, record) == attempt_steps(RECIPE, record, high=True) == ((6, 8), 0)


def test_an_attempt_known_by_a_lower_bound_is_at_most_the_cap():
    record = _record(steps=8, learned=False, attempt_scores=(0.7, 0.6))
    assert attempt_steps(RECIPE, record, high=True) == ((8, 8), 1)


def test_without_patience_after_gain_an_attempt_without_a_gain_stops_when_patience_runs_out():
    recipe = dataclasses.replace(RECIPE, patience_after_gain=False, patience=2)
    assert attempt_steps(recipe, _record(steps=8, learned=False, attempt_scores=(0.4, 0.6))) == ((4, 8), 0)


# patience counted from the start: an attempt without a gain in its first epoch stops there
EARLY = dataclasses.replace(RECIPE, patience_after_gain=False)


@pytest.mark.parametrize("recipe", [RECIPE, EARLY], ids=["after-gain", "from-start"])
@pytest.mark.parametrize("tasks", [["sst2"], ["antonym"], ["sst2", "antonym"]], ids=["sst2", "antonym", "together"])
def test_a_build_is_counted_with_the_steps_it_took(tasks, recipe, tmp_path, monkeypatch):
    """Three seeds of each task (all stepped together) trained into an empty cache: the plan with the steps read back
    from their records (every attempt's) matches what torch counted, early stops and retries included."""
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(stream_scale, "_MEMORY", {})  # the stream's size is measured in this build too
    lm = tiny_llama(seed=74)
    splits = {t: load_splits(t, seed=0, n_train=64, n_val=32) for t in tasks}
    prompt_store.STORE.clear()
    measured, per_task = _counted(lambda: train_ltv(lm, list(tasks), layers=[1], recipe=recipe, seeds=[0, 1, 2],
                                                    n_train=64, n_val=32, cache=True, progress=False))
    ltvs = [v for vs in per_task for v in vs]
    shape = _shape(lm)
    lengths = {t: _lengths(lm, t, splits[t].train) for t in tasks}
    for v in ltvs:
        read, bounds = attempt_steps(v.config, v.training)
        assert len(read) == v.training.attempts and bounds == 0  # every attempt's steps are recorded
    counter, plan = LTVCounter(shape, lambda t: lengths[t], None), _zero()
    for t in tasks:
        for s in (0, 1, 2):
            counter(plan, t, 1, s, recipe=recipe, n_train=len(splits[t].train), n_val=len(splits[t].validation))
    ran = as_run(shape, lm.name, lambda t: lengths[t], tmp_path)
    assert (ran.vectors, ran.attempts, ran.lower_bounds) == (len(ltvs), sum(v.training.attempts for v in ltvs), 0)
    _check(ran.floor(plan.flops), measured, f"{tasks}, as run")
    assert ran.floor(plan.flops, high=True) == ran.floor(plan.flops)


def _zero():
    from ltvlib.flops import Cost

    return Cost()


def test_the_plan_command_counts_a_cache_as_run(tmp_path, capsys):
    """``plan --as-run DIR`` reads DIR's records (none here: the count stays the plan's) and refuses ``--chapters``,
    whose rows would be set against a whole build's records."""
    from ltvlib.study.plan_command import main

    assert main(["--model", "llama-8b", "--profile", "smoke", "--as-run", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "as run: 0 trained vectors and 0 race runs, 0 LTV attempts" in out
    with pytest.raises(SystemExit):
        main(["--model", "llama-8b", "--profile", "smoke", "--chapters", "03", "--as-run", str(tmp_path)])
