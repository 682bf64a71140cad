"""Tests of ltvlib.study.linearity on tiny random models: the cached control, the layer plan per profile."""

from __future__ import annotations

import pytest

from ltvlib.analysis.linearity import (
    task_alignment,
)
from tests.models_fixtures import tiny_llama


def test_profile_linearity_control_puts_the_constant_shift_beside_its_upper_bound(tmp_path, monkeypatch):
    from ltvlib.study.linearity import linearity_config, profile_linearity, profile_linearity_control
    from ltvlib.study.profiles import get_profile

    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama()
    prof = get_profile("smoke")
    res = profile_linearity_control(lm, "sst2", prof, 1, n_draws=2)
    ref = profile_linearity(lm, "sst2", prof, 1)
    ctl = res["control"]
    assert ctl["n_draws"] == 2 and len(ctl["draws"]) == 2 and ctl["fit"]
    assert ctl["ltv"]["cos_theta_Qtheta"] == pytest.approx(ref["cos_theta_Qtheta"], abs=1e-6)
    assert ctl["ltv"]["alignment_Qtheta"] == pytest.approx(ref["alignment"]["Q theta"], abs=1e-6)
    # the draws are random_like(theta, n_draws, seed + 2) at the LTV's layer
    from ltvlib.analysis.controls import random_like
    from ltvlib.analysis.linearity import label_token_ids
    from ltvlib.study.ltvs import profile_ltv, profile_splits

    theta = profile_ltv(lm, "sst2", prof, layers=[1]).vectors[0].float()
    labels = label_token_ids(lm, "sst2", list(profile_splits("sst2", prof).test))
    expected = task_alignment(lm, random_like(theta, 2, seed=2), labels)
    assert [r["alignment"] for r in ctl["draws"]] == pytest.approx(expected.tolist(), abs=1e-6)
    acc = res["shift_accuracy"]
    assert acc["own_shift"]["accuracy"]["value"] == pytest.approx(ref["accuracy"]["ltv_lens"])
    assert acc["constant"]["accuracy"]["value"] == pytest.approx(ref["accuracy"]["W theta"])
    assert acc["own_shift"]["label_accuracy"]["n"] == prof.n_test
    assert linearity_config(prof).n_queries == 8
    assert profile_linearity_control(lm, "sst2", prof, 1, n_draws=2) == res  # cached
    # the control takes the LTV's own values from profile_linearity (no second fit of the LTV's map)
    assert ctl["ltv"] == ref["diagnostics"]
    assert set(ref["diagnostics"]) == set(ctl["draws"][0])
    assert len(ref["w_theta"]) == lm.d_model
    own = acc["own_shift"]["accuracy"]
    assert len(own["correct"]) == prof.n_test and sum(own["correct"]) == own["successes"]


def test_mechanism_plan_puts_label_space_tasks_first_and_sweeps_one():
    from ltvlib.study.linearity import mechanism_plan
    from ltvlib.study.profiles import get_profile
    from ltvlib.tasks import get_task

    class Depth:
        n_layers, middle_layer = 30, 15

    from ltvlib.study.extracted import ltv_layers

    cpu = mechanism_plan(Depth(), get_profile("cpu"))
    assert list(cpu) == ["trec", "sst2", "antonym"] and cpu["sst2"] == cpu["antonym"] == [15]
    # chapter 01's cached TREC vectors, without layer 0 and the last fifth, enough for a slope and two early layers
    assert set(cpu["trec"]) <= set(ltv_layers(Depth(), "trec", get_profile("cpu")))
    assert 3 <= len(cpu["trec"]) <= 7 and 15 in cpu["trec"] and max(cpu["trec"]) < 24 and min(cpu["trec"]) > 0
    assert len([l for l in cpu["trec"] if l < 15]) >= 2
    smoke = mechanism_plan(Depth(), get_profile("smoke"))
    assert smoke == {"sst2": [8, 15, 22], "antonym": [15]}
    paper = mechanism_plan(Depth(), get_profile("paper"))
    labelled = [t for t in paper if get_task(t).labels]
    assert list(paper)[: len(labelled)] == labelled and all(v == list(range(30)) for v in paper.values())
