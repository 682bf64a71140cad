"""Tests of ltvlib.study.ov (and the cached key-head experiment beside it) on a tiny random model: the chapter
helpers, their cache and their control."""

from __future__ import annotations

import pytest

from ltvlib.analysis.controls import random_like
from ltvlib.analysis.ov import (
    ov_control,
)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_chapter_helpers_label_the_paper_form_and_report_the_control(llama, cache):
    """On a classification task: ov_experiment names its paper variant and gives label-restricted accuracy
    with intervals; ov_control_experiment is ov_control on the LTV's norm-matched draws (and cached);
    key_head_experiment carries the U-shape statistic of its key heads after the injection layer."""
    from ltvlib.analysis.key_heads import last_token_runner
    from ltvlib.study.key_heads import key_head_experiment
    from ltvlib.study.ltvs import task_splits, trained_ltv
    from ltvlib.study.ov import ov_control_experiment, ov_experiment
    from ltvlib.study.plans import get_profile, run_sizes

    run = run_sizes(get_profile("smoke"))
    ltv = trained_ltv(llama, "sst2", run, layers=[0])
    splits = task_splits("sst2", run)
    queries, test = list(splits.validation[:6]), list(splits.test)
    res = ov_experiment(llama, ltv, queries, test)
    assert res["paper_variant"] == "ov_raw" and res["variants"]["ov_raw"] == "paper"
    assert set(res["label_accuracy"]) == set(res["accuracy"])
    for name, rec in res["proportions"].items():
        assert rec["accuracy"]["value"] == res["accuracy"][name] and rec["accuracy"]["n"] == len(test)
        assert rec["label_accuracy"]["value"] == res["label_accuracy"][name]
    ctl = ov_control_experiment(llama, ltv, test, n_draws=2, seed=5)
    assert ctl["n_draws"] == 2 and len(ctl["draws"]) == 2 and ctl["variant"] == "paper"
    theta = ltv.vectors[0].float()
    direct = ov_control(llama, last_token_runner(llama, "sst2", test), theta, 0, random_like(theta, 2, seed=5))
    assert ctl["draws"] == direct["draws"] and ctl["ltv"] == direct["ltv"]
    assert ctl["ltv"]["accuracy"]["value"] == res["accuracy"]["ov_raw"]
    assert ov_control_experiment(llama, ltv, test, n_draws=2, seed=5) == ctl
    # the equal-norm controls: the OV sum and the MLP control, each rescaled to |θ| for the LTV and every draw
    for path in ("ov", "mlp"):
        eq = ov_control_experiment(llama, ltv, test, n_draws=2, seed=5, variant="at |θ|", path=path, queries=queries)
        assert eq["path"] == path and eq["norm"] == pytest.approx(1.0, rel=1e-3) and len(eq["draws"]) == 2
    with pytest.raises(ValueError, match="analysis queries"):
        ov_control_experiment(llama, ltv, test, n_draws=2, path="mlp")
    kh = key_head_experiment(llama, ltv, queries, test, fraction=0.25, n_random=1)
    u = kh["key_after_u_shape"]
    assert u["n"] == len(kh["key_after_heads"]) == 3 and u["n_before"] == 0 and sum(u["counts"]) == 3
    assert 0 < u["p_value"] <= 1 and u["effect_low"] <= u["effect"] <= u["effect_high"]
    # per-query correctness behind every accuracy, for paired intervals in the chapter
    for name, rec in res["proportions"].items():
        assert len(rec["accuracy"]["correct"]) == len(test) and sum(rec["accuracy"]["correct"]) == rec["accuracy"]["successes"]
        assert sum(rec["label_accuracy"]["correct"]) == rec["label_accuracy"]["successes"]
    assert [len(d["accuracy"]["correct"]) for d in ctl["draws"]] == [len(test)] * 2
    assert kh["correct"]["full"] and sum(kh["correct"]["full"]) / len(test) == pytest.approx(kh["accuracy"])
    assert len(kh["zero_shot_correct"]["label"]) == len(test)
    for name in ("key", "key_after"):
        for mode in ("zero", "mean"):
            assert sum(kh[f"{name}_correct"][mode]["full"]) / len(test) == pytest.approx(kh[name][mode])
    assert [sum(d["full"]) / len(test) for d in kh["random_correct"]["zero"]] == pytest.approx(kh["random"]["zero"])
