"""Chapter 03's count (:func:`ltvlib.study.cost.race_task_cost`) against ``FlopCounterMode``: the race on one task
of a tiny model (the LTV by the library's trainer, the adapters by ``peft``, each method three learning rates and
a second seed), run as the chapter runs it, within 10 % of what torch counts."""

from __future__ import annotations

import pytest
from models_fixtures import tiny_gemma3, tiny_llama

from ltvlib import prompt_store
from ltvlib.analysis.configs import CompareSizes
from ltvlib.analysis.peft_compare import compare_splits, equal_budget_methods
from ltvlib.ltv import FAST_RECIPE, absolute_recipe, with_config
from ltvlib.study.cost import LTVCounter, memory_probe_cost, race_field, race_task_cost
from ltvlib.study.peft_compare import tuned_race
from tests.test_plan import _check, _counted, _lengths, _shape


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3])
def test_chapter_03_race_is_counted(build, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = build(seed=72)
    # two epochs under patience 2: no run stops before the cap, and no LTV is retried
    schedule = with_config(absolute_recipe(FAST_RECIPE), batch_size=8, epochs=2, samples_per_epoch=16)
    sizes = CompareSizes(48, 16, 40, schedule, eval_batch=16, memory=False)
    recipe = with_config(FAST_RECIPE, batch_size=8, epochs=2, samples_per_epoch=16, retries_without_progress=0)
    methods = [m for m in equal_budget_methods(lm) if m.name != "prompt-1"]  # the cpu profile's field
    prompt_store.STORE.clear()
    measured, _ = _counted(lambda: tuned_race(lm, ["sst2"], methods, sizes, [0, 1], ltv_recipe=recipe))
    field = race_field("cpu", lm.middle_layer)
    assert set(field) == {m.name for m in methods}  # the count's field is the chapter's
    splits = compare_splits("sst2", sizes)
    estimate = race_task_cost(_shape(lm), _lengths(lm, "sst2", splits.train), "sst2", sizes, recipe, field, 2,
                              LTVCounter(_shape(lm), lambda t: _lengths(lm, t, splits.train), None))
    _check(estimate.flops, measured, f"chapter 03's race on {lm.name}")


@pytest.mark.parametrize("name", ["ltv", "prefix-1-L1", "lora-r1-o1"])
def test_a_methods_memory_probe_is_counted(name):
    """On a CPU the chapter measures each method's memory once in a fresh process: one prompt, one inference batch
    and two training steps (counted here in this process, on a model of its own as the fresh process loads)."""
    from ltvlib.analysis.peft_compare import measure_memory_here, prepare

    lm = tiny_llama(seed=73)
    method = next(m for m in equal_budget_methods(lm) if m.name == name)
    schedule = with_config(absolute_recipe(FAST_RECIPE), batch_size=8, epochs=2, samples_per_epoch=16)
    sizes = CompareSizes(48, 16, 40, schedule, eval_batch=16, memory=True)
    prepared = prepare(lm, compare_splits("sst2", sizes))
    measured, _ = _counted(lambda: measure_memory_here(lm, prepared, method, schedule, eval_batch=16))
    _, first, virtual = race_field("cpu", lm.middle_layer)[name]
    estimate = memory_probe_cost(_shape(lm), _lengths(lm, "sst2", prepared.splits.train), first, virtual, schedule,
                                 eval_batch=16)
    _check(estimate.flops, measured, f"memory probe of {name}")


def test_runs_on_the_same_data_share_their_prompt_passes_and_other_data_pays_its_own():
    """The race's runs (one tag each) train on one split: its prompts are counted once; chapter 07's two directions
    train on data of their own: each pays its prompts and stream statistic."""
    from types import SimpleNamespace

    from ltvlib.flops import Cost

    lm = tiny_llama(seed=75)
    lengths = _lengths(lm, "sst2", compare_splits("sst2", CompareSizes(48, 16, 40, FAST_RECIPE)).train)
    counter = LTVCounter(_shape(lm), lambda t: lengths, SimpleNamespace(recipe=FAST_RECIPE, n_train=48, n_val=16))
    costs = []
    for tag, data in (("race-0", ""), ("race-1", ""), ("a", "direction-a"), ("b", "direction-b")):
        c = Cost()
        counter(c, "sst2", 1, 0, tag=tag, recipe=FAST_RECIPE, data=data)
        costs.append(c.flops)
    first, same_data, other_data, third_data = costs
    assert same_data < 0.8 * first  # steps and validations only: the prompts were counted with the first run
    assert other_data == pytest.approx(first) and third_data == pytest.approx(first)
