"""Tests of ltvlib.study.linearity on tiny random models: the cached control beside its upper bound."""

from __future__ import annotations

import pytest

from ltvlib.analysis.linearity import (
    task_alignment,
)
from tests.models_fixtures import tiny_llama


def test_cached_linearity_control_puts_the_constant_shift_beside_its_upper_bound(tmp_path, monkeypatch):
    from ltvlib.study.linearity import cached_linearity, cached_linearity_control
    from ltvlib.study.plans import get_profile, linearity_config, run_sizes

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama()
    run = run_sizes(get_profile("smoke"))
    config = linearity_config(get_profile("smoke"))
    res = cached_linearity_control(lm, "sst2", run, 1, config=config, n_draws=2)
    ref = cached_linearity(lm, "sst2", run, 1, config=config)
    ctl = res["control"]
    assert ctl["n_draws"] == 2 and len(ctl["draws"]) == 2 and ctl["fit"]
    assert ctl["ltv"]["cos_theta_Qtheta"] == pytest.approx(ref["cos_theta_Qtheta"], abs=1e-6)
    assert ctl["ltv"]["alignment_Qtheta"] == pytest.approx(ref["alignment"]["Q theta"], abs=1e-6)
    # the draws are random_like(theta, n_draws, seed + 2) at the LTV's layer
    from ltvlib.analysis.controls import random_like
    from ltvlib.analysis.linearity import label_token_ids
    from ltvlib.study.ltvs import task_splits, trained_ltv

    theta = trained_ltv(lm, "sst2", run, layers=[1]).vectors[0].float()
    labels = label_token_ids(lm, "sst2", list(task_splits("sst2", run).test))
    expected = task_alignment(lm, random_like(theta, 2, seed=2), labels)
    assert [r["alignment"] for r in ctl["draws"]] == pytest.approx(expected.tolist(), abs=1e-6)
    acc = res["shift_accuracy"]
    assert acc["own_shift"]["accuracy"]["value"] == pytest.approx(ref["accuracy"]["ltv_lens"])
    assert acc["constant"]["accuracy"]["value"] == pytest.approx(ref["accuracy"]["W theta"])
    assert acc["own_shift"]["label_accuracy"]["n"] == run.n_test
    assert config.n_queries == 8
    assert cached_linearity_control(lm, "sst2", run, 1, config=config, n_draws=2) == res  # cached
    # the control takes the LTV's own values from cached_linearity (no second fit of the LTV's map)
    assert ctl["ltv"] == ref["diagnostics"]
    assert set(ref["diagnostics"]) == set(ctl["draws"][0])
    assert len(ref["w_theta"]) == lm.d_model
    own = acc["own_shift"]["accuracy"]
    assert len(own["correct"]) == run.n_test and sum(own["correct"]) == own["successes"]
