"""Chapter 08's glue (ltvlib.study.across_models) on tiny random models (its plan per profile and layer
choices are tests/test_plans.py's): one stream-relative recipe (no per-model scaling
left here), the code-path checks (which must catch a wrong site table), the ICL fallback beyond a sliding
window, summaries equal to the earlier chapters' measurements, per-query correctness whose means are those
measurements (for paired intervals), and the check that the heads write what the attention block adds."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ltvlib import memo
from ltvlib.analysis import key_heads
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.study import linearity
from ltvlib.study.across_models import (
    architecture_row,
    attention_write_check,
    check_code_paths,
    clear_memory,
    correct_at,
    function_vector_write,
    icl_reference,
    key_head_correct,
    key_head_results,
    linearity_results,
    middle_layer_results,
    middle_ltv,
    stream_rms,
    sweep_ltvs,
    sweep_results,
)
from ltvlib.study.extracted import extracted_curve
from ltvlib.study.ltvs import icl_accuracy, ltv_accuracy, task_splits, trained_ltv
from ltvlib.study.plans import across_models_plan
from ltvlib.tasks import load_splits
from tests.margins import PATH_GAP, smallest_margin
from tests.test_gemma3_known_issues import windowed_gemma3


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    return tmp_path


PLAN = across_models_plan("smoke")
SMOKE = PLAN.run_sizes


def middle_row(lm, task="antonym"):
    """Chapter 08's middle-layer row of ``task`` in the smoke plan."""
    return middle_layer_results(lm, task, SMOKE, icl_shots=PLAN.icl_shots,
                                extracted_layers=PLAN.layers(lm.n_layers).extracted[task])


def sweep_row(lm, task="antonym", curve_layers=None):
    """Chapter 08's layer sweep of ``task`` in the smoke plan (``curve_layers``: None = chapter 01's)."""
    at = PLAN.layers(lm.n_layers)
    return sweep_results(lm, task, SMOKE, ltv_layers=at.sweep_ltv[task],
                         curve_layers=at.table if curve_layers is None else curve_layers)


def test_one_stream_relative_recipe_for_every_model():
    import ltvlib.study.across_models as am

    # the trainer's relative_to_stream is the one mechanism: nothing here rescales a recipe per model
    assert across_models_plan("cpu").run_sizes.recipe.relative_to_stream
    for leftover in ("ltv_profile", "unscaled_recipe", "recipe_scale", "scale_for", "REFERENCE_STREAM_RMS"):
        assert not hasattr(am, leftover), leftover


def test_stream_rms(llama):
    from ltvlib.inject import record_residual
    from ltvlib.prompts import encode_prompts, pad_left

    rms = stream_rms(llama, n=5)
    assert sorted(rms) == [0, 1, 2]
    rows = encode_prompts(llama.tokenizer, load_splits("antonym").task, load_splits("antonym").test[:5]).full_rows()
    ids, mask = pad_left(rows, llama.tokenizer.pad_token_id)
    with torch.no_grad(), record_residual(llama, [1]) as rec:
        llama.model(input_ids=ids, attention_mask=mask)
    assert rms[1] == pytest.approx(float(rec[1][:, -1].pow(2).mean().sqrt()), rel=1e-5)


def test_code_paths_agree_on_tiny_models(tiny):
    result = check_code_paths(tiny, n=5)
    assert set(result["checks"]) >= {"runner logits", "runner gradient", "last-token runner logits",
                                     "shift probe final state", "block 0 input vs embedding x scale",
                                     "block 0 input vs hidden_states[0]", "final norm vs x / rms(x) * gain"}
    for name, value in result["checks"].items():
        assert value < 1e-4, name
    assert all(result["argmax_equal"].values())
    assert result["prompt_tokens"][0] < result["prompt_tokens"][1]  # left padding is exercised
    assert result["sliding_window"] == (512 if tiny.table.family == "gemma3" else None)
    assert result["final_norm_input_rms"] > 0


def test_code_paths_catch_a_wrong_site_table(gemma):
    # Gemma scales its embeddings by sqrt(d) and its norms by 1 + weight; a table that forgets either is caught
    wrong = dataclasses.replace(gemma, table=dataclasses.replace(gemma.table, scales_embeddings=False,
                                                                 norm_weight_offset=0.0))
    checks = check_code_paths(wrong, n=4)["checks"]
    assert checks["block 0 input vs embedding x scale"] > 1.0
    assert checks["final norm vs x / rms(x) * gain"] > 0.1
    assert checks["runner logits"] < 1e-4  # the forward paths do not read those two fields


def test_architecture_row(gemma, llama):
    g, ll = architecture_row(gemma), architecture_row(llama)
    assert (g["head_dim"], g["query heads"], g["KV heads"], g["d_model"]) == (32, 4, 1, 64)
    assert g["norm gain"] == "1 + weight" and g["embedding scale"].startswith("sqrt(d)")
    assert g["sliding-window layers"] == 2 and g["sliding window"] == 512
    assert ll["norm gain"] == "weight" and ll["embedding scale"] == "1" and ll["sliding window"] is None


def test_icl_reference_falls_back_to_full_forwards_beyond_the_sliding_window(cache):
    lm = windowed_gemma3(16)
    zero = icl_reference(lm, "antonym", 0, SMOKE)
    assert zero["path"] == "cached prefix"
    assert zero["accuracy"] == icl_accuracy(lm, "antonym", 0, SMOKE)["accuracy"]
    with pytest.raises(ValueError, match="sliding attention window"):
        icl_accuracy(lm, "antonym", 2, SMOKE)
    two = icl_reference(lm, "antonym", 2, SMOKE)
    assert two["path"] == "full"
    splits = task_splits("antonym", SMOKE, icl=True)
    es = EvalSet(lm, "antonym", splits.test, shots=2, demo_pool=splits.train, seed=0,
                 demo_sets=SMOKE.icl_demo_sets, tail=None)
    direct = evaluate(es)
    assert smallest_margin(es) > PATH_GAP  # other batch sizes, same predictions (tests/margins.py)
    assert two["accuracy"] == direct.accuracy and two["n"] == len(splits.test)
    assert icl_reference(lm, "antonym", 2, SMOKE) == two  # cached


def test_middle_layer_table_reports_what_the_window_prevents(cache):
    lm = windowed_gemma3(16)
    row = middle_row(lm)
    # Function Vectors need 4-shot extraction prompts through cached prefixes: longer than the window
    assert row["function_vector"] is None and "sliding attention window" in row["missing"]["function_vector"]
    assert row["icl_path"] == {"2": "full"}
    assert row["vanilla_tv"] is not None and 0 <= row["vanilla_tv"] <= 100


def test_summaries_equal_the_chapters_measurements(llama, cache):
    mid = llama.middle_layer
    row = middle_row(llama)
    ltv = trained_ltv(llama, "antonym", SMOKE, layers=[mid])
    assert middle_ltv(llama, "antonym", SMOKE).metadata() == ltv.metadata()
    assert row["ltv"] == 100 * ltv_accuracy(llama, ltv, SMOKE)["accuracy"]
    assert row["ltv_norm"] == pytest.approx(float(ltv.vectors.norm()))
    assert "ltv_book" not in row
    assert row["icl_n"] == {"0": len(task_splits("antonym", SMOKE).test),
                            "2": len(task_splits("antonym", SMOKE, icl=True).test)}
    at = PLAN.layers(llama.n_layers)
    layers = list(at.table)
    for method in ("vanilla_tv", "vanilla_tv_difference", "function_vector"):
        curve = extracted_curve(llama, "antonym", SMOKE, method, layers)
        assert row[method] == 100 * curve["layers"][str(mid)]["accuracy"]
    assert row["zero-shot"] == 100 * icl_accuracy(llama, "antonym", 0, SMOKE)["accuracy"]
    assert row["missing"] == {} and row["icl_path"] == {"2": "cached prefix"}

    sweep = sweep_row(llama)
    assert sorted(sweep["ltv"]) == list(at.sweep_ltv["antonym"]) == [1, 2]
    assert sweep["ltv"][mid] == row["ltv"]
    assert sorted(sweep_ltvs(llama, "antonym", SMOKE, at.sweep_ltv["antonym"])) == [1, 2]
    assert sorted(sweep["function_vector"]) == layers  # smoke: table layers 0, 1, 2 hold every LTV layer

    kh = key_head_results(llama, "antonym", SMOKE, PLAN.sizes)
    assert kh["n_heads"] == 12 and kh["n_key"] == 1 and kh["ltv"] == row["ltv"]
    for key in ("key_zero", "key_mean", "random_zero", "random_mean"):
        assert 0 <= kh[key] <= 100
    assert kh["random_zero_sd"] >= 0

    # the smoke plan fits SST-2 (a label-space task); the summary is the same function of any task's fits
    assert set(at.linearity) == {"sst2"}
    lin = linearity_results(llama, "antonym", SMOKE, [1, 2], config=PLAN.linearity)
    assert sorted(lin) == [1, 2]
    ref = linearity.cached_linearity(llama, "antonym", SMOKE, 1, config=PLAN.linearity)
    assert lin[1]["w_theta"] == 100 * ref["accuracy"]["reconstruction"]
    assert lin[1]["r2_heldout"] == ref["r2_heldout"]


def test_sweep_measures_extracted_vectors_at_every_ltv_layer(llama, cache):
    sweep = sweep_row(llama, curve_layers=[0, 1])  # a table that lacks LTV layer 2
    assert sorted(sweep["ltv"]) == [1, 2]
    for method in ("vanilla_tv", "vanilla_tv_difference", "function_vector"):
        assert list(sweep[method]) == [0, 1, 2]  # chapter 01's curve, then the missing layer in a second one
        extra = extracted_curve(llama, "antonym", SMOKE, method, [2])
        assert sweep[method][2] == 100 * extra["layers"]["2"]["accuracy"]
        first = extracted_curve(llama, "antonym", SMOKE, method, [0, 1])
        assert sweep[method][0] == 100 * first["layers"]["0"]["accuracy"]


def test_clear_memory_empties_the_stores(llama, cache):
    ltv = trained_ltv(llama, "antonym", SMOKE)
    ltv_accuracy(llama, ltv, SMOKE)
    key_heads.last_token_runner(llama, "antonym", load_splits("antonym").test[:4])
    assert memo.entries(llama, "ltvs.test_sets") and memo.entries(llama, "key_heads.runners")
    clear_memory()
    assert not memo.entries(llama, "ltvs.test_sets") and not memo.entries(llama, "key_heads.runners")


def _fake_fv(lm, heads, seed=0, vector=None):
    from types import SimpleNamespace

    g = lm.geometry
    means = torch.randn(g.n_layers, g.n_heads, g.head_dim, generator=torch.Generator().manual_seed(seed))
    if vector is None:  # the FV of a family without an attention-output norm: the sum of the heads' terms
        from ltvlib.heads import o_proj

        vector = sum(o_proj(lm, l).weight.detach()[:, h * g.head_dim : (h + 1) * g.head_dim] @ means[l, h]
                     for l, h in heads)
    return SimpleNamespace(mean_outputs=means, heads=tuple(heads), vector=vector)


def test_function_vector_write_is_the_fv_where_nothing_normalises_the_attention_output(llama):
    fv = _fake_fv(llama, [(0, 1), (2, 3)])
    r = function_vector_write(llama, fv)
    assert r["norm_ratio"] == pytest.approx(1.0) and r["cos"] == pytest.approx(1.0)
    assert r["marginal_norm"] == pytest.approx(r["written_norm"]) == pytest.approx(r["unnormalised_norm"])


def test_function_vector_write_follows_gemmas_attention_output_norm():
    from ltvlib.heads import o_proj
    from ltvlib.sites import decoder_layers
    from tests.models_fixtures import tiny_gemma3

    lm = tiny_gemma3()  # fresh: the gains below must not leak into the shared fixture
    gen = torch.Generator().manual_seed(3)
    for block in decoder_layers(lm.model):
        with torch.no_grad():
            block.post_attention_layernorm.weight.copy_(torch.randn(lm.d_model, generator=gen))
    heads = [(0, 1), (2, 3), (2, 0)]
    hd, eps = lm.geometry.head_dim, 1e-3
    means = _fake_fv(lm, heads, vector=torch.zeros(lm.d_model)).mean_outputs
    # what the heads write at the mean: each head's term through the real norm's numerator, at the norm's scale of
    # the whole attention output (the norm applied to x, rescaled to the term); and the first-order marginal effect
    # of each term, by finite differences of the real norm module around x
    shares = torch.zeros(lm.d_model, dtype=torch.float64)
    marginal = torch.zeros(lm.d_model, dtype=torch.float64)
    with torch.no_grad():
        for layer, head in heads:
            w = o_proj(lm, layer).weight.double()
            term = w[:, head * hd : (head + 1) * hd] @ means[layer, head].double()
            x = w @ means[layer].reshape(-1).double()
            norm = decoder_layers(lm.model)[layer].post_attention_layernorm.double()
            shares += norm(x) * term / x  # N(x) = g * x / rms(x), so g * term / rms(x) = N(x) * term / x
            marginal += (norm(x + eps * term) - norm(x - eps * term)) / (2 * eps)
            norm.float()
    fv = _fake_fv(lm, heads, vector=shares.float())  # an FV built from these shares
    r = function_vector_write(lm, fv)
    assert r["written_norm"] == pytest.approx(float(shares.norm()), rel=1e-4)
    assert r["norm_ratio"] == pytest.approx(1.0, rel=1e-4) and r["cos"] == pytest.approx(1.0, abs=1e-5)
    assert r["marginal_norm"] == pytest.approx(float(marginal.norm()), rel=1e-4)
    assert abs(r["marginal_norm"] / r["written_norm"] - 1) > 0.05  # the marginal effect is another vector


def test_per_query_correctness_averages_to_the_chapters_accuracies(llama, cache):
    mid = llama.middle_layer
    n = len(task_splits("antonym", SMOKE).test)
    got = correct_at(llama, "antonym", SMOKE, mid)
    assert got["n"] == n
    for method in ("zero-shot", "ltv", "vanilla_tv", "vanilla_tv_difference", "function_vector"):
        assert len(got[method]) == n and all(isinstance(c, bool) for c in got[method]), method
    row = middle_row(llama)
    # the same queries as the chapters' accuracies: the means are those numbers exactly
    for method in ("ltv", "vanilla_tv", "vanilla_tv_difference", "function_vector"):
        assert 100 * sum(got[method]) / n == pytest.approx(row[method], abs=1e-9), method
    zero = extracted_curve(llama, "antonym", SMOKE, "function_vector", PLAN.layers(llama.n_layers).table)["zero_shot"]
    assert sum(got["zero-shot"]) / n == pytest.approx(zero["accuracy"], abs=1e-9)
    # another layer: that layer's LTV and extracted vectors
    other = correct_at(llama, "antonym", SMOKE, 2)
    sweep = sweep_row(llama)
    for method in ("ltv", "vanilla_tv", "function_vector"):
        assert 100 * sum(other[method]) / n == pytest.approx(sweep[method][2], abs=1e-9), method
    assert correct_at(llama, "antonym", SMOKE, mid) == got  # cached


def test_correct_at_reports_what_the_window_prevents(cache):
    lm = windowed_gemma3(16)
    got = correct_at(lm, "antonym", SMOKE, lm.middle_layer)
    assert got["function_vector"] is None  # 4-shot extraction prompts are longer than the window
    assert got["vanilla_tv"] is not None and len(got["ltv"]) == got["n"]


def test_key_head_correctness_averages_to_the_ablation(llama, cache):
    kh = key_head_results(llama, "antonym", SMOKE, PLAN.sizes)
    got = key_head_correct(llama, "antonym", SMOKE, PLAN.sizes)
    n = got["n"]
    assert n == len(task_splits("antonym", SMOKE).test) and got["n_key"] == kh["n_key"]
    assert 100 * sum(got["ltv"]) / n == pytest.approx(kh["ltv"], abs=1e-9)
    assert 100 * sum(got["key_zero"]) / n == pytest.approx(kh["key_zero"], abs=1e-9)
    assert len(got["random_zero"]) == PLAN.sizes.n_random
    mean_random = 100 * sum(sum(d) / n for d in got["random_zero"]) / len(got["random_zero"])
    assert mean_random == pytest.approx(kh["random_zero"], abs=1e-9)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_attention_write_check_finds_the_heads_write_what_the_block_adds(family):
    from ltvlib.sites import decoder_layers
    from tests.models_fixtures import tiny_gemma3, tiny_llama

    lm = tiny_gemma3() if family == "gemma3" else tiny_llama()  # fresh: the gains below must not leak
    gen = torch.Generator().manual_seed(5)
    for blk in decoder_layers(lm.model):
        with torch.no_grad():
            for name, module in blk.named_modules():
                if name.endswith("layernorm"):
                    module.weight.copy_(1 + 0.5 * torch.randn(module.weight.shape, generator=gen))
    got = attention_write_check(lm, [0, 2], n=4)
    assert sorted(got) == [0, 2]
    for layer, r in got.items():
        assert r["relative_error"] < 1e-4, (layer, r)
        assert r["contribution_norm"] > 0
        if family == "gemma3":  # the norm matters: the bare W_O terms are another size
            assert abs(r["bare_ratio"] - 1) > 0.05, (layer, r)
        else:
            assert r["bare_ratio"] == pytest.approx(1.0, rel=1e-4)
