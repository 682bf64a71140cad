"""Chapter 05's count (:func:`ltvlib.study.cost.linear_fit_cost` on :func:`~ltvlib.study.cost.shift_probes_cost`)
against ``FlopCounterMode``: the linear fit and its checks, then the random-vector control, of one LTV on a tiny
model, run as the chapters run them (chapter 05: every draw refits; chapter 08: one draw, no fit), within 10 %."""

from __future__ import annotations

import dataclasses

import pytest
from models_fixtures import tiny_gemma3, tiny_llama

from ltvlib.analysis.configs import LinearityConfig
from ltvlib.ltv import FAST_RECIPE, with_config
from ltvlib.study import plans as P
from ltvlib.study.cost import linear_fit_cost, prompts_cost, shift_probes_cost
from ltvlib.study.linearity import cached_linearity, cached_linearity_control
from ltvlib.study.ltvs import ltv_accuracy, task_splits, trained_ltv
from tests.test_plan import _check, _counted, _lengths, _shape

CONFIG = LinearityConfig(n_queries=8, fit_factor=2.0, n_heldout=32)


@pytest.mark.parametrize(("task", "n_draws", "fit", "build"), [
    ("sst2", 3, True, tiny_llama), ("antonym", 3, True, tiny_llama), ("sst2", 1, False, tiny_llama),
    ("sst2", 1, False, tiny_gemma3),  # chapter 08's second architecture, as chapter 08 runs it
])
def test_a_linearity_point_is_counted(task, n_draws, fit, build, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = build(seed=80)
    run = dataclasses.replace(P.run_sizes(P.get_profile("cpu")), n_train=64, n_val=32, n_test=40,
                              recipe=with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16,
                                                 retries_without_progress=0))
    ltv = trained_ltv(lm, task, run, layers=[1], seed=0)
    ltv_accuracy(lm, ltv, run, seed=0)  # an earlier chapter's result, read from the cache in the book

    def point() -> None:
        cached_linearity(lm, task, run, 1, config=CONFIG, seed=0)
        cached_linearity_control(lm, task, run, 1, config=CONFIG, seed=0, n_draws=n_draws, fit=fit)

    measured, _ = _counted(point)
    shape, lengths = _shape(lm), _lengths(lm, task, task_splits(task, run).test)
    estimate = shift_probes_cost(shape, lengths, CONFIG.n_queries, 40).add(prompts_cost(shape, lengths, 40))
    estimate.add(linear_fit_cost(shape, lengths, CONFIG, 1, n_draws, n_queries=CONFIG.n_queries, n_test=40,
                                 fit_draws=fit, new_probes=False))
    _check(estimate.flops, measured, f"{task}, {lm.name}, {n_draws} draws, fit {fit}")
