"""Flexibility settings (Table 1): valid sites, extracted vectors where documented, one setting end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ltvlib.baselines.function_vector import FunctionVector, FunctionVectorConfig
from ltvlib.baselines.vanilla_tv import VanillaTaskVector, VanillaTVConfig
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.forward import PositionTail
from ltvlib.inject import inject, record_residual, resolve_positions
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.stats import seed_interval, wilson_interval
from ltvlib.study.flexibility import (
    PAPER_COLUMNS,
    PAPER_TABLE1,
    FlexSizes,
    Setting,
    cell_estimate,
    check_setting,
    every_nth_layer,
    extracted_edits,
    flex_splits,
    keep_share,
    late_layers,
    late_settings,
    setting_result,
    table1_settings,
    task_mean_contrast,
)
from ltvlib.study.plans import flex_sizes, get_profile, headline_seeds, run_sizes
from ltvlib.tasks import PAPER_TASKS, get_task, load_splits
from tests.margins import PATH_GAP, smallest_margin


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_settings_of_a_30_layer_model():
    s = {x.name: x for x in table1_settings(30)}
    assert list(s) == ["baseline", "position4", "last5", "every4", "every2", "layers_x_positions", "icl8"]
    assert s["baseline"].layers == (15,) and s["baseline"].positions == (-1,) and s["baseline"].shots == 0
    assert s["position4"].positions == (4,) and s["position4"].layers == (15,)
    assert s["last5"].positions == (-5, -4, -3, -2, -1)
    assert s["every4"].layers == (0, 4, 8, 12, 16, 20, 24, 28)
    assert s["every2"].layers == tuple(range(0, 30, 2)) and s["every2"].paper_column is None
    assert s["layers_x_positions"].n_sites == 8 * 5
    assert s["icl8"].shots == 8 and s["icl8"].layers == (15,)
    assert [x.paper_column for x in s.values() if x.paper_column] == list(PAPER_COLUMNS)
    assert all(set(PAPER_TABLE1[m]) == set(PAPER_COLUMNS) for m in PAPER_TABLE1)
    assert late_layers(30) == (22, 26, 29) and late_layers(32, 2) == (24, 31) and late_layers(3) == (2,)
    assert late_layers(30, None) == tuple(range(22, 30)) and late_layers(30, 1) == (29,)
    assert flex_sizes(get_profile("cpu")).icl_shots == 8 and flex_sizes(get_profile("paper")).n_late is None
    assert [x.layers for x in late_settings(30)] == [(22,), (26,), (29,)]


def test_bad_setting_arguments():
    with pytest.raises(ValueError, match="layer step"):
        every_nth_layer(30, 0)
    with pytest.raises(ValueError, match="position must count"):
        table1_settings(30, position=-2)
    with pytest.raises(ValueError, match="k must be"):
        late_layers(30, 0)


@pytest.mark.parametrize("model", ["llama", "gemma"])
def test_settings_resolve_to_valid_sites(model, request):
    lm = request.getfixturevalue(model)
    run = run_sizes(get_profile("smoke"))
    for setting in table1_settings(lm.n_layers, layer_steps=(2, 1)) + late_settings(lm.n_layers):
        checked = check_setting(lm, "antonym", setting, run)
        assert all(0 <= l < lm.n_layers for l in checked.layers)
        # every position exists in every prompt of the task
        splits = load_splits("antonym", n_train=run.n_train, n_val=run.n_val)
        rows = encode_prompts(lm.tokenizer, get_task("antonym"), splits.test[:8]).rows
        _, mask = pad_left(rows, lm.tokenizer.pad_token_id, lm.device)
        resolve_positions(mask, checked.positions)
    with pytest.raises(ValueError, match="outside the shortest"):
        check_setting(lm, "antonym", Setting("far", "far", (0,), (40,)), run)
    with pytest.raises(ValueError, match="layer"):
        check_setting(lm, "antonym", Setting("deep", "deep", (lm.n_layers,), (-1,)), run)


def _fake_vectors(lm):
    g = torch.Generator().manual_seed(0)
    icl = torch.randn(lm.n_layers, lm.d_model, generator=g)
    zero = torch.randn(lm.n_layers, lm.d_model, generator=g)
    tv = VanillaTaskVector(icl, zero, lm.name, "antonym", VanillaTVConfig())
    fv = FunctionVector(torch.randn(lm.d_model, generator=g), ((0, 0),), 0, torch.zeros(lm.n_layers, 4),
                        torch.zeros(lm.n_layers, 4, 16), torch.zeros(lm.n_layers, 4, lm.d_model), lm.name, "antonym",
                        FunctionVectorConfig())
    return tv, fv


def _prompts(lm):
    rows = encode_prompts(lm.tokenizer, get_task("antonym"), load_splits("antonym").test[:6]).rows
    return pad_left(rows, lm.tokenizer.pad_token_id, lm.device)


def test_multi_site_vanilla_tv_replaces_each_layer_state_at_each_position(llama):
    tv, _ = _fake_vectors(llama)
    setting = Setting("x", "x", (0, 2), (1, -2, -1))
    edits = extracted_edits("vanilla_tv", tv, setting)
    assert {(e.site, e.mode) for e in edits} == {("block_output", "replace")} and len(edits) == setting.n_sites
    ids, mask = _prompts(llama)
    cols = resolve_positions(mask, setting.positions)
    rows = torch.arange(ids.shape[0])[:, None]
    with record_residual(llama, [0, 1, 2], site="block_output") as clean:
        forward_tokens(llama, ids, mask)
    clean = {l: v.clone() for l, v in clean.items()}
    with inject(llama, edits, attention_mask=mask):
        with record_residual(llama, [0, 1, 2], site="block_output") as rec:
            forward_tokens(llama, ids, mask)
    for layer in setting.layers:
        # each layer gets its own recorded ICL state, at every position of the setting
        torch.testing.assert_close(rec[layer][rows, cols], tv.icl_states[layer].expand(ids.shape[0], 3, -1))
    # layer 1 is not a site: its output differs only through the layer-0 edit, and untouched columns of
    # layer 0 (before the first edited position) keep their clean values
    first = int(cols.min())
    torch.testing.assert_close(rec[0][:, :first], clean[0][:, :first])
    assert not torch.allclose(rec[1][rows, cols], tv.icl_states[1].expand(ids.shape[0], 3, -1))


def test_multi_site_function_vector_adds_the_same_vector_everywhere(llama):
    tv, fv = _fake_vectors(llama)
    setting = Setting("x", "x", (0, 1), (-2, -1))
    edits = extracted_edits("function_vector", fv, setting)
    assert {(e.site, e.mode) for e in edits} == {("block_output", "add")}
    assert [(e.layer, e.position) for e in edits] == [(0, -2), (0, -1), (1, -2), (1, -1)]
    assert all(torch.equal(e.vector, fv.vector) for e in edits)
    ids, mask = _prompts(llama)
    cols = resolve_positions(mask, setting.positions)
    rows = torch.arange(ids.shape[0])[:, None]
    with record_residual(llama, [0], site="block_output") as clean:
        forward_tokens(llama, ids, mask)
    base = clean[0].clone()
    with inject(llama, edits, attention_mask=mask):
        with record_residual(llama, [0], site="block_output") as rec:
            forward_tokens(llama, ids, mask)
    torch.testing.assert_close(rec[0][rows, cols] - base[rows, cols], fv.vector.expand(ids.shape[0], 2, -1))
    untouched = torch.ones_like(mask, dtype=torch.bool)
    untouched[rows, cols] = False
    torch.testing.assert_close(rec[0][untouched], base[untouched])
    diff_edits = extracted_edits("vanilla_tv_difference", tv, setting)
    assert {(e.site, e.mode) for e in diff_edits} == {("block_output", "add")}
    torch.testing.assert_close(diff_edits[2].vector, tv.icl_states[1] - tv.zero_shot_states[1])
    with pytest.raises(ValueError, match="unknown method"):
        extracted_edits("ltv", tv, setting)
    with pytest.raises(TypeError, match="needs a FunctionVector"):
        extracted_edits("function_vector", tv, setting)


def test_a_non_final_position_setting_end_to_end(llama, cache, monkeypatch):
    run = run_sizes(get_profile("smoke"))
    setting = next(s for s in table1_settings(llama.n_layers, layer_steps=(2,)) if s.name == "position4")
    from ltvlib.study import flexibility

    tails = []
    real_evalset = flexibility.EvalSet

    def recording_evalset(*args, **kwargs):
        tails.append(kwargs.get("tail"))
        return real_evalset(*args, **kwargs)

    monkeypatch.setattr(flexibility, "EvalSet", recording_evalset)
    res = setting_result(llama, "antonym", run, setting, seeds=(0, 1))
    # P={4} is evaluated on the per-row tail, and its LTVs were trained with the prefix cache (the tail)
    assert tails == [PositionTail((4,))]
    assert all(v.config.prefix_cache and v.positions == (4,) for v in res.ltvs)
    assert [v.seed for v in res.ltvs] == [0, 1] and res.n == run.n_test
    assert res.correct["ltv"].shape == (2, run.n_test)
    for method in ("none", "vanilla_tv", "vanilla_tv_difference", "function_vector"):
        assert res.correct[method].shape == (1, run.n_test) and res.correct[method].dtype == bool
    assert "ltv_zero_shot_trained" not in res.correct and res.zero_shot_ltvs == ()
    # the extracted numbers are what evaluating the documented edits gives
    from ltvlib.study.flexibility import vanilla_tv_task_template
    from ltvlib.study.ltvs import task_splits

    tv = vanilla_tv_task_template(llama, "antonym", run)
    es = EvalSet(llama, "antonym", task_splits("antonym", run).test, tail=None)
    edits = extracted_edits("vanilla_tv", tv, setting)
    assert smallest_margin(es, edits) > PATH_GAP  # predictions agree across paths
    assert evaluate(es, edits).correct == res.correct["vanilla_tv"][0].tolist()
    # the LTV rows: the same path (per-row tail) gives the same correctness (seed 1 has a near tie on this
    # tiny model, so the full-forward path is not compared here)
    tail_es = real_evalset(llama, "antonym", task_splits("antonym", run).test, tail=PositionTail((4,)))
    assert evaluate(tail_es, res.ltvs[1].edits()).correct == res.correct["ltv"][1].tolist()
    # cached: the second call reads the same correctness back, without evaluating
    tails.clear()
    again = setting_result(llama, "antonym", run, setting, seeds=(0, 1))
    assert tails == [] and all((again.correct[m] == res.correct[m]).all() for m in res.correct)
    assert len(list((cache / "results" / "flexibility").glob("*.json"))) == 1
    # fewer test queries: a prefix of the same queries
    fewer = setting_result(llama, "antonym", run, setting, seeds=(0,), n_test=5, extracted=False)
    assert fewer.n == 5 and (fewer.correct["ltv"][0] == res.correct["ltv"][0][:5]).all()
    assert set(fewer.correct) == {"ltv", "none"}


def test_icl_setting_trains_on_k_shot_prompts(llama, cache):
    run = run_sizes(get_profile("smoke"))
    setting = Setting("icl2", "icl", (1,), (-1,), shots=2)
    res = setting_result(llama, "antonym", run, setting, extracted=False, zero_shot_seeds=(0, 1))
    assert res.correct["ltv"].shape == (1, run.n_test) and "vanilla_tv" not in res.correct
    assert res.ltvs[0].shots == 2
    assert res.correct["ltv_zero_shot_trained"].shape == (2, run.n_test)
    assert [v.shots for v in res.zero_shot_ltvs] == [0, 0] and [v.seed for v in res.zero_shot_ltvs] == [0, 1]
    # the no-vector row is the k-shot prompt alone on the same queries and demonstration blocks (two paths:
    # exact agreement holds since no prediction is near a tie, tests/margins.py)
    splits = flex_splits("antonym", run)
    es = EvalSet(llama, "antonym", splits.test, shots=2, demo_pool=splits.train, seed=0,
                 demo_sets=run.icl_demo_sets, tail=None)
    assert smallest_margin(es) > PATH_GAP
    assert evaluate(es).correct == res.correct["none"][0].tolist()
    # the zero-shot-trained LTV on the k-shot prompts: the chapter's path (last-token tail) gives the same rows
    same_path = EvalSet(llama, "antonym", splits.test, shots=2, demo_pool=splits.train, seed=0,
                        demo_sets=run.icl_demo_sets, tail=1)
    assert evaluate(same_path, res.zero_shot_ltvs[1].edits()).correct == res.correct["ltv_zero_shot_trained"][1].tolist()


def test_flex_splits_share_test_queries_across_shots():
    run = run_sizes(get_profile("smoke"))
    full = load_splits("antonym", n_train=run.n_train, n_val=run.n_val)
    assert flex_splits("antonym", run).test == full.test[: run.n_test]
    assert flex_splits("antonym", run, 3).test == full.test[:3]
    paper = run_sizes(get_profile("paper"))
    assert flex_splits("antonym", paper).test == load_splits("antonym", n_train=600, n_val=400).test
    with pytest.raises(ValueError, match="n_test"):
        flex_splits("antonym", run, 0)


def test_the_cpu_profile_covers_the_seven_tasks_in_every_column():
    cpu = flex_sizes(get_profile("cpu"))
    assert cpu.tasks == PAPER_TASKS and cpu.icl_shots == 8
    # every column on the seven tasks, as in the paper's Table 1
    names = [s.name for s in table1_settings(30, layer_steps=cpu.layer_steps, icl_shots=cpu.icl_shots)]
    names += [s.name for s in late_settings(30, cpu.n_late)]
    assert names == ["baseline", "position4", "last5", "every4", "layers_x_positions", "icl8", "late29"]
    assert all(cpu.tasks_of(n) == PAPER_TASKS for n in names) and not cpu.setting_tasks
    assert cpu.n_test == 100
    # a chapter's own task list keeps its order; a restricted column is cut to its own tasks
    assert cpu.tasks_of("last5", ("rte", "trec", "antonym")) == ("rte", "trec", "antonym")
    sub = FlexSizes(tasks=PAPER_TASKS, setting_tasks={"icl8": ("trec", "antonym")})
    assert sub.tasks_of("icl8", ("rte", "trec", "antonym")) == ("trec", "antonym")
    assert sub.tasks_of("baseline", ("rte", "trec")) == ("rte", "trec")
    paper = flex_sizes(get_profile("paper"))
    assert all(paper.tasks_of(n) == PAPER_TASKS for n in names)
    smoke = flex_sizes(get_profile("smoke"))
    assert smoke.tasks_of(f"icl{smoke.icl_shots}") == ("antonym",) and smoke.tasks_of("last5") == smoke.tasks
    with pytest.raises(ValueError, match="baseline"):
        FlexSizes(tasks=("antonym",), setting_tasks={"baseline": ("antonym",)})
    with pytest.raises(ValueError, match="subset"):
        FlexSizes(tasks=("antonym",), setting_tasks={"last5": ("sst2",)})
    with pytest.raises(ValueError, match="subset"):
        FlexSizes(tasks=("antonym",), setting_tasks={"last5": ()})
    # the baseline column reads back chapter 00's three middle-layer seeds
    assert headline_seeds(get_profile("cpu")) == (0, 1, 2)
    assert cpu.layer_steps[0] == 4  # the paper's column
    assert flex_sizes(get_profile("paper")).seeds == (0, 1, 2)
    with pytest.raises(ValueError, match="n_late"):
        FlexSizes(tasks=("antonym",), n_late=-1)
    with pytest.raises(ValueError, match="seeds"):
        FlexSizes(tasks=("antonym",), seeds=())


def test_task_mean_is_the_equal_weight_mean_with_a_stratified_interval():
    rng = np.random.default_rng(1)
    a = {"x": rng.random(200) < 0.8, "y": rng.random(50) < 0.2}
    est = task_mean_contrast(a)
    # equal weights per task, not per query
    assert est.value == pytest.approx((a["x"].mean() + a["y"].mean()) / 2)
    assert est.n == 250 and est.seeds == 1 and not est.difference and est.low < est.value < est.high
    # one task: the seed-query bootstrap of that task (same draws for the same seed)
    one = task_mean_contrast({"x": a["x"]})
    ref = seed_interval(a["x"])
    assert (one.value, one.low, one.high) == pytest.approx((ref.value, ref.low, ref.high))
    # averaging two tasks halves each one's share of the spread: narrower than the noisier task alone
    assert est.high - est.low < task_mean_contrast({"y": a["y"]}).high - task_mean_contrast({"y": a["y"]}).low


def test_task_mean_contrast_is_paired_and_weighted():
    rng = np.random.default_rng(2)
    base = {t: rng.random((3, 120)) < p for t, p in (("x", 0.6), ("y", 0.4))}
    one_seed = {t: m[:1] for t, m in base.items()}
    same = task_mean_contrast(one_seed, one_seed)  # paired: the same queries drawn for both, so exactly 0
    assert same.value == 0 and same.low == 0 and same.high == 0 and same.difference and same.seeds == 1
    assert task_mean_contrast(base, base).seeds == 3
    # a one-seed column against the three-seed baseline rests on one seed when both are marked as trained
    assert task_mean_contrast(one_seed, base, weight=0.9, rows=("seeds", "seeds")).seeds == 1
    assert task_mean_contrast(one_seed, base, weight=0.9).seeds == 3
    # a method that is right exactly where the baseline's first seed is, plus 12 more queries per task
    better = {}
    for t, m in base.items():
        row = m[0].copy()
        row[np.flatnonzero(~row)[:12]] = True
        better[t] = row
    d = task_mean_contrast(better, one_seed)
    assert d.value == pytest.approx(0.1) and d.low > 0  # paired: the 12 extra queries always show
    keep = task_mean_contrast(better, base, weight=0.9)
    want = np.mean([better[t].mean() - 0.9 * base[t].mean() for t in base])
    assert keep.value == pytest.approx(want) and keep.low <= keep.value <= keep.high
    with pytest.raises(ValueError, match="different tasks"):
        task_mean_contrast(better, {"x": base["x"]})
    with pytest.raises(ValueError, match="different queries"):
        task_mean_contrast({"x": better["x"]}, {"x": base["x"][:, :100]})
    with pytest.raises(ValueError, match="no tasks"):
        task_mean_contrast({})


def test_cell_estimate_wilson_for_one_seed_bootstrap_for_several():
    one = cell_estimate(np.array([True] * 30 + [False] * 70))
    assert one.method == "wilson" and one.value == pytest.approx(0.3)
    assert (one.low, one.high) == pytest.approx(wilson_interval(30, 100))
    assert cell_estimate(np.ones((1, 10), dtype=bool)).method == "wilson"
    several = cell_estimate(np.array([[True] * 30 + [False] * 70, [True] * 50 + [False] * 50]))
    assert several.method == "seed-query bootstrap" and several.seeds == 2 and several.value == pytest.approx(0.4)


def test_keep_share_follows_the_papers_column():
    assert keep_share("P={4}") == 0.9 and keep_share("+ 8-shot ICL prompt") == 0.9
    assert keep_share("multi-layer+multi-position") == 0.5  # the paper's LTV keeps 62 % there


def test_position4_training_on_the_per_row_tail_equals_full_forwards(tiny):
    """``P={4}`` with the prefix cache (each prompt cached up to its own position 4) trains the same vector as
    full forwards, on the tiny Llama and the tiny Gemma (BOS): the same steps, validation scores and vectors
    up to float rounding."""
    from ltvlib.ltv import FAST_RECIPE, train_ltv, with_config

    splits = load_splits("antonym", n_train=48, n_val=16, n_test=8)
    config = with_config(FAST_RECIPE, epochs=2, samples_per_epoch=16, batch_size=8, val_queries=None)
    runs = [train_ltv(tiny, "antonym", layers=[1], positions=[4], recipe=with_config(config, prefix_cache=cache),
                      splits=splits, progress=False) for cache in (True, False)]
    cached, full = runs
    assert cached.training.steps == full.training.steps == 4
    torch.testing.assert_close(cached.vectors, full.vectors, atol=1e-5, rtol=1e-4)
    assert ([c.get("val_accuracy") for c in cached.training.curve]
            == [c.get("val_accuracy") for c in full.training.curve])
