"""Flexibility settings (Table 1): valid sites, extracted vectors where documented, one setting end to end."""

from __future__ import annotations

import pytest
import torch

from ltvlib.baselines.function_vector import FunctionVector, FunctionVectorConfig
from ltvlib.baselines.vanilla_tv import VanillaTaskVector, VanillaTVConfig
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.flexibility import (
    PAPER_COLUMNS,
    PAPER_TABLE1,
    Setting,
    check_setting,
    every_nth_layer,
    extracted_edits,
    flex_sizes,
    late_layers,
    late_settings,
    setting_result,
    table1_settings,
)
from ltvlib.inject import inject, record_residual, resolve_positions
from ltvlib.prefix import forward_tokens
from ltvlib.profiles import get_profile
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.tasks import get_task, load_splits
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
    prof = get_profile("smoke")
    for setting in table1_settings(lm.n_layers, layer_steps=(2, 1)) + late_settings(lm.n_layers):
        checked = check_setting(lm, "antonym", setting, prof)
        assert all(0 <= l < lm.n_layers for l in checked.layers)
        # every position exists in every prompt of the task
        splits = load_splits("antonym", n_train=prof.n_train, n_val=prof.n_val)
        rows = encode_prompts(lm.tokenizer, get_task("antonym"), splits.test[:8]).rows
        _, mask = pad_left(rows, lm.tokenizer.pad_token_id, lm.device)
        resolve_positions(mask, checked.positions)
    with pytest.raises(ValueError, match="outside the shortest"):
        check_setting(lm, "antonym", Setting("far", "far", (0,), (40,)), prof)
    with pytest.raises(ValueError, match="layer"):
        check_setting(lm, "antonym", Setting("deep", "deep", (lm.n_layers,), (-1,)), prof)


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
    edits, site, mode = extracted_edits("vanilla_tv", tv, setting)
    assert (site, mode) == ("block_output", "replace") and len(edits) == setting.n_sites
    ids, mask = _prompts(llama)
    cols = resolve_positions(mask, setting.positions)
    rows = torch.arange(ids.shape[0])[:, None]
    with record_residual(llama, [0, 1, 2], site="block_output") as clean:
        forward_tokens(llama, ids, mask)
    clean = {l: v.clone() for l, v in clean.items()}
    with inject(llama, edits, attention_mask=mask, site=site, mode=mode):
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
    edits, site, mode = extracted_edits("function_vector", fv, setting)
    assert (site, mode) == ("block_output", "add")
    assert [(e.layer, e.position) for e in edits] == [(0, -2), (0, -1), (1, -2), (1, -1)]
    assert all(torch.equal(e.vector, fv.vector) for e in edits)
    ids, mask = _prompts(llama)
    cols = resolve_positions(mask, setting.positions)
    rows = torch.arange(ids.shape[0])[:, None]
    with record_residual(llama, [0], site="block_output") as clean:
        forward_tokens(llama, ids, mask)
    base = clean[0].clone()
    with inject(llama, edits, attention_mask=mask, site=site, mode=mode):
        with record_residual(llama, [0], site="block_output") as rec:
            forward_tokens(llama, ids, mask)
    torch.testing.assert_close(rec[0][rows, cols] - base[rows, cols], fv.vector.expand(ids.shape[0], 2, -1))
    untouched = torch.ones_like(mask, dtype=torch.bool)
    untouched[rows, cols] = False
    torch.testing.assert_close(rec[0][untouched], base[untouched])
    diff_edits, _, diff_mode = extracted_edits("vanilla_tv_difference", tv, setting)
    assert diff_mode == "add"
    torch.testing.assert_close(diff_edits[2].vector, tv.icl_states[1] - tv.zero_shot_states[1])
    with pytest.raises(ValueError, match="unknown method"):
        extracted_edits("ltv", tv, setting)
    with pytest.raises(TypeError, match="needs a FunctionVector"):
        extracted_edits("function_vector", tv, setting)


def test_a_non_final_position_setting_end_to_end(llama, cache):
    prof = get_profile("smoke")
    setting = next(s for s in table1_settings(llama.n_layers, layer_steps=(2,)) if s.name == "position4")
    res = setting_result(llama, "antonym", prof, setting)
    for method in ("ltv", "none", "vanilla_tv", "vanilla_tv_difference", "function_vector"):
        assert 0.0 <= res[method]["accuracy"] <= 1.0 and res[method]["n"] == prof.n_test
    assert res["setting"]["positions"] == [4] and res["ltv"]["steps"] >= 1
    # the extracted numbers are what evaluating the documented edits gives
    from ltvlib.experiments import profile_splits
    from ltvlib.flexibility import profile_vanilla_tv_task_template

    tv = profile_vanilla_tv_task_template(llama, "antonym", prof)
    es = EvalSet(llama, "antonym", profile_splits("antonym", prof).test, tail=None)
    edits, site, mode = extracted_edits("vanilla_tv", tv, setting)
    assert smallest_margin(es, edits, site=site, mode=mode) > PATH_GAP  # predictions agree across paths
    assert evaluate(es, edits, site=site, mode=mode).accuracy == res["vanilla_tv"]["accuracy"]
    # cached: the second call reads the same dict back
    assert setting_result(llama, "antonym", prof, setting) == res
    assert len(list((cache / "results" / "flexibility").glob("*.json"))) == 1


def test_icl_setting_trains_on_k_shot_prompts(llama, cache):
    prof = get_profile("smoke")
    setting = Setting("icl2", "icl", (1,), (-1,), shots=2)
    res = setting_result(llama, "antonym", prof, setting, extracted=False)
    assert res["ltv"]["n"] == prof.n_test_icl and "vanilla_tv" not in res
    assert res["ltv_zero_shot_trained"]["n"] == prof.n_test_icl
    from ltvlib.experiments import icl_accuracy, profile_splits

    # the no-vector row of the ICL setting is the profile's ICL reference on the same prompts (two paths:
    # exact agreement holds since no prediction is near a tie, tests/margins.py)
    splits = profile_splits("antonym", prof, icl=True)
    es = EvalSet(llama, "antonym", splits.test, shots=2, demo_pool=splits.train, seed=0,
                 demo_sets=prof.icl_demo_sets, tail=None)
    assert smallest_margin(es) > PATH_GAP
    assert res["none"]["accuracy"] == icl_accuracy(llama, "antonym", 2, prof)["accuracy"]


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
    assert cached.steps == full.steps == 4
    torch.testing.assert_close(cached.vectors, full.vectors, atol=1e-5, rtol=1e-4)
    assert [c.get("val_accuracy") for c in cached.curve] == [c.get("val_accuracy") for c in full.curve]
