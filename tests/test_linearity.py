"""Tests of ltvlib.analysis.linearity on tiny random models: the fitted map, the final-norm hooks,
polar factors, lens."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ltvlib.analysis.controls import random_like
from ltvlib.analysis.linearity import (
    LinearityConfig,
    ShiftProbe,
    add_before_final_norm,
    additivity,
    effective_unembedding,
    final_norm,
    fit_linear_map,
    homogeneity,
    lens_logits,
    linearity_control,
    logit_difference,
    logit_lens,
    polar,
    record_final_norm_input,
    shift_accuracies,
    task_alignment,
    vector_diagnostics,
)
from ltvlib.inject import HookNotFiredError, VectorEdit, inject
from ltvlib.prompts import answer_ids, encode_prompts, pad_left
from ltvlib.sites import decoder_layers
from ltvlib.tasks import get_task, load_splits
from tests.models_fixtures import tiny_gemma3, tiny_llama

TASK = get_task("antonym")


def queries(lm, n: int, length: int | None = None):
    """``n`` antonym test queries; with ``length``, only prompts of exactly that many tokens."""
    pool = load_splits("antonym", n_train=600, n_val=400).test
    if length is None:
        return list(pool[:n])
    enc = encode_prompts(lm.tokenizer, TASK, pool)
    same = [ex for ex, row in zip(pool, enc.full_rows()) if len(row) == length]
    assert len(same) >= n
    return same[:n]


def full_forward(lm, examples, edits=(), final_vector=None):
    """Logits and final-norm input at the last token of left-padded full forwards."""
    rows = encode_prompts(lm.tokenizer, TASK, examples).full_rows()
    ids, mask = pad_left(rows, lm.tokenizer.pad_token_id)
    with torch.no_grad(), record_final_norm_input(lm) as cap, inject(lm, edits, attention_mask=mask):
        if final_vector is not None:
            with add_before_final_norm(lm, final_vector):
                logits = lm.model(input_ids=ids, attention_mask=mask).logits
        else:
            logits = lm.model(input_ids=ids, attention_mask=mask).logits
    return logits[:, -1], cap[-1][:, -1]


def linearize(lm, start: int, attention: str, n_tokens: int) -> torch.Tensor:
    """Make blocks ``start..L-1`` of a tiny Llama linear in the last token's state; return the true map.

    Norms become identities and each MLP a random linear map ``A``. ``attention="zero"`` zeroes ``o_proj``
    (block map ``I + A``); ``"uniform"`` zeroes ``q_proj`` so every query attends uniformly to the ``n`` real
    tokens, and the last token's own value enters with weight ``1/n`` (block map ``(I + A)(I + O V / n)``,
    exact for prompts of ``n`` tokens).
    """
    d = lm.d_model
    g = lm.geometry
    gen = torch.Generator().manual_seed(7)
    true_map = torch.eye(d, dtype=torch.float64)
    for block in decoder_layers(lm.model)[start:]:
        block.input_layernorm = nn.Identity()
        block.post_attention_layernorm = nn.Identity()
        mlp = nn.Linear(d, d, bias=False)
        mlp.weight.data = torch.randn((d, d), generator=gen) * 0.3 / d**0.5
        mlp.requires_grad_(False)
        block.mlp = mlp
        attn = torch.zeros((d, d), dtype=torch.float64)
        if attention == "zero":
            block.self_attn.o_proj.weight.data.zero_()
        else:
            block.self_attn.q_proj.weight.data.zero_()
            v = block.self_attn.v_proj.weight.double().reshape(g.n_kv_heads, g.head_dim, d)
            v_per_head = v.repeat_interleave(g.group_size, dim=0).reshape(g.n_heads * g.head_dim, d)
            attn = block.self_attn.o_proj.weight.double() @ v_per_head
        eye = torch.eye(d, dtype=torch.float64)
        true_map = (eye + mlp.weight.double()) @ (eye + attn / n_tokens) @ true_map
    return true_map.float()


@pytest.mark.parametrize("attention", ["zero", "uniform"])
def test_fitted_map_equals_the_true_map_of_a_linear_tail_and_reconstructs_the_logits(attention):
    lm = tiny_llama(seed=3)
    layer = 1
    true_map = linearize(lm, layer, attention, n_tokens=6)  # "Q : word \n A :", no BOS
    qs = queries(lm, 6, length=6)
    probe = ShiftProbe(lm, TASK, qs)
    theta = torch.randn(lm.d_model, generator=torch.Generator().manual_seed(1))
    fit = fit_linear_map(probe, layer, theta, LinearityConfig(n_queries=6, n_heldout=32, ridge=0.0))
    torch.testing.assert_close(fit.W, true_map, atol=2e-4, rtol=1e-3)
    assert fit.r2_heldout > 0.99999
    assert fit.n_fit >= lm.d_model
    # the map really is non-trivial
    assert (true_map - torch.eye(lm.d_model)).abs().max() > 0.05
    injected, _ = full_forward(lm, qs, [VectorEdit(layer, -1, theta)])
    rebuilt, _ = full_forward(lm, qs, final_vector=fit.W @ theta)
    torch.testing.assert_close(rebuilt, injected, atol=1e-4, rtol=1e-4)
    # direct checks agree: homogeneous and additive
    for row in homogeneity(probe, layer, theta, (-1.0, 0.5, 2.0)):
        assert row["coef"] == pytest.approx(row["scale"], rel=1e-4)
        assert row["rel_dev"] < 1e-4
    add = additivity(probe, layer, theta, torch.randn(lm.d_model))
    assert add["rel_err"] < 1e-4 and add["cos"] == pytest.approx(1.0, abs=1e-6)


def test_nonlinear_model_gives_an_imperfect_fit_and_fails_the_direct_checks():
    lm = tiny_llama(seed=4)
    for block in decoder_layers(lm.model):  # random init is nearly the identity: make the blocks matter
        for name, p in block.named_parameters():
            if "norm" not in name:
                p.data.mul_(20)
    probe = ShiftProbe(lm, TASK, queries(lm, 8))
    theta = torch.randn(lm.d_model, generator=torch.Generator().manual_seed(2))
    fit = fit_linear_map(probe, 0, theta, LinearityConfig(n_queries=8, n_heldout=64))
    assert fit.r2_heldout < 0.9
    assert fit.r2_train > fit.r2_heldout
    rows = {r["scale"]: r for r in homogeneity(probe, 0, theta, (1.0, 4.0))}
    assert rows[1.0]["coef"] == pytest.approx(1.0) and rows[1.0]["rel_dev"] == pytest.approx(0.0, abs=1e-6)
    assert abs(rows[4.0]["coef"] - 4.0) > 1.0 and rows[4.0]["rel_dev"] > 0.1


def test_probe_shifts_equal_full_forward_differences(tiny):
    qs = queries(tiny, 5)
    probe = ShiftProbe(tiny, TASK, qs, max_batch=3)  # several batches of mixed queries
    gen = torch.Generator().manual_seed(0)
    vectors = torch.randn((5, tiny.d_model), generator=gen)
    for layer in (0, 1, tiny.n_layers - 1):
        shifts = probe.shifts(layer, vectors, range(5))
        _, base = full_forward(tiny, qs)
        _, pushed = full_forward(tiny, qs, [VectorEdit(layer, -1, vectors)])
        torch.testing.assert_close(shifts, pushed - base, atol=2e-4, rtol=1e-3)
    # A zero vector shifts nothing. Run in the base's own batches ([0, 1, 2], [3, 4]) the two forwards are the
    # same computation on the same inputs, so the shift is exactly zero.
    assert probe.shifts(1, torch.zeros((5, tiny.d_model)), range(5)).abs().max() == 0
    # Rows [0, 3] run as one batch of two, while the base ran them in batches of three and two: the same
    # float32 sums, possibly in another order (BLAS picks kernels and blockings by shape, per machine), so the
    # two final states agree only to rounding. Each output element is a chain of d_model-long dot products
    # through a few blocks; reordering a sum of d terms moves it by at most about d * eps * (sum of |terms|),
    # and the terms are of the size of the states themselves. So the bound is d_model * eps * max|state|
    # (measured: 1.5e-8 on one machine, 0 on another; a real shift would be of the states' own size).
    zero = probe.shifts(1, torch.zeros((2, tiny.d_model)), [0, 3])
    bound = tiny.d_model * torch.finfo(torch.float32).eps * probe.base(1).abs().max()
    assert zero.abs().max() <= bound


def test_hook_before_final_norm_is_the_last_block_output_and_cleans_up(tiny):
    qs = queries(tiny, 4)
    v = torch.randn(tiny.d_model) * 2
    via_inject, _ = full_forward(tiny, qs, [VectorEdit(tiny.n_layers - 1, -1, v, site="block_output")])
    via_hook, _ = full_forward(tiny, qs, final_vector=v)
    torch.testing.assert_close(via_hook, via_inject, atol=1e-5, rtol=1e-5)
    norm = final_norm(tiny)
    assert not norm._forward_pre_hooks
    with pytest.raises(HookNotFiredError), add_before_final_norm(tiny, v):
        pass
    with pytest.raises(RuntimeError, match="boom"), add_before_final_norm(tiny, v):
        raise RuntimeError("boom")
    assert not norm._forward_pre_hooks
    with pytest.raises(ValueError, match="expected"), add_before_final_norm(tiny, torch.zeros(3)):
        pass
    assert not norm._forward_pre_hooks


def test_polar_factors():
    w = torch.randn((12, 12), generator=torch.Generator().manual_seed(4))
    q, s = polar(w)
    eye = torch.eye(12)
    torch.testing.assert_close(q.T @ q, eye, atol=1e-5, rtol=0)
    torch.testing.assert_close(s, s.T)
    assert torch.linalg.eigvalsh(s.double()).min() > -1e-6
    torch.testing.assert_close(q @ s, w, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="square"):
        polar(torch.zeros(3, 4))


def test_logit_lens_of_an_unembedding_row_returns_that_token_first(tiny):
    unembed = tiny.model.get_output_embeddings().weight
    for t in (10, 57, 200):
        assert int(lens_logits(tiny, unembed[t]).argmax()) == t
        assert logit_lens(tiny, unembed[t], k=3)[0] == tiny.tokenizer.decode([t])


def test_task_alignment_and_logit_difference(llama):
    labels = [10, 11, 12]
    rows = effective_unembedding(llama, labels)
    assert task_alignment(llama, rows, labels) == pytest.approx(torch.ones(3), abs=1e-5)
    basis = torch.linalg.qr(rows.T).Q  # (d, 3)
    other = torch.randn(llama.d_model)
    other = other - basis @ (basis.T @ other)
    assert float(task_alignment(llama, other, labels)) == pytest.approx(0.0, abs=1e-5)
    # states pointing at the gold label's effective unembedding give a positive difference
    states = rows[[0, 1]] * 50
    assert logit_difference(llama, states, [10, 11], labels) > 0
    logits = lens_logits(llama, states)[:, labels]
    manual = ((logits[0, 0] - logits[0, 1:].mean()) + (logits[1, 1] - logits[1, [0, 2]].mean())) / 2
    assert logit_difference(llama, states, [10, 11], labels) == pytest.approx(float(manual), rel=1e-5)
    with pytest.raises(ValueError, match="not among"):
        logit_difference(llama, states, [10, 99], labels)


def test_errors_name_the_bad_value(llama):
    probe = ShiftProbe(llama, TASK, queries(llama, 2))
    with pytest.raises(ValueError, match="layer 99"):
        probe.shifts(99, torch.zeros((1, llama.d_model)), [0])
    with pytest.raises(ValueError, match="layer -9"):
        fit_linear_map(probe, -9, torch.zeros(llama.d_model))
    with pytest.raises(ValueError, match="theta has 5"):
        fit_linear_map(probe, 0, torch.zeros(5))
    with pytest.raises(ValueError, match="query indices"):
        probe.shifts(0, torch.zeros((1, llama.d_model)), [7])
    with pytest.raises(ValueError, match="fit_factor"):
        LinearityConfig(fit_factor=0.5)


def test_gemma_linear_tail_with_zeroed_attention():
    lm = tiny_gemma3(seed=2)
    d = lm.d_model
    gen = torch.Generator().manual_seed(5)
    true_map = torch.eye(d)
    for block in decoder_layers(lm.model)[1:]:
        for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            setattr(block, name, nn.Identity())
        block.self_attn.o_proj.weight.data.zero_()
        mlp = nn.Linear(d, d, bias=False)
        mlp.weight.data = torch.randn((d, d), generator=gen) * 0.3 / d**0.5
        mlp.requires_grad_(False)
        block.mlp = mlp
        true_map = (torch.eye(d) + mlp.weight) @ true_map
    probe = ShiftProbe(lm, TASK, queries(lm, 4))
    theta = torch.randn(d, generator=gen)
    fit = fit_linear_map(probe, 1, theta, LinearityConfig(n_queries=4, n_heldout=16, ridge=0.0))
    torch.testing.assert_close(fit.W, true_map, atol=2e-4, rtol=1e-3)


def test_shift_accuracies_own_shift_is_the_injected_forward(tiny):
    """``own_shift`` is each query's real shift: its accuracy is the full forward's with theta injected at the
    layer; the constant equal to the mean shift scores as ``mean_shift``; label-restricted beside full."""
    task = get_task("sst2")
    qs = load_splits(task).test[:6]
    probe = ShiftProbe(tiny, task, qs)
    theta = 3 * torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(5))
    layer = 1
    labels = [a[0] for a in answer_ids(tiny.tokenizer, task, task.labels)]
    res = shift_accuracies(probe, layer, theta, probe.shift_all(layer, theta).mean(0), labels)
    rows = encode_prompts(tiny.tokenizer, task, qs).full_rows()
    ids, mask = pad_left(rows, tiny.tokenizer.pad_token_id)
    with torch.no_grad(), inject(tiny, [VectorEdit(layer, -1, theta)], attention_mask=mask):
        logits = tiny.model(input_ids=ids, attention_mask=mask).logits[:, -1]
    gold = torch.tensor(probe.gold)
    full = int((logits.argmax(-1) == gold).sum())
    restricted = int((torch.tensor(labels)[logits[:, labels].argmax(-1)] == gold).sum())
    assert res["own_shift"]["accuracy"]["successes"] == full
    assert res["own_shift"]["label_accuracy"]["successes"] == restricted
    assert res["constant"] == res["mean_shift"]
    for rec in res.values():
        assert rec["accuracy"]["n"] == 6 and rec["accuracy"]["low"] <= rec["accuracy"]["value"] <= rec["accuracy"]["high"]
    assert shift_accuracies(probe, layer, theta, theta)["own_shift"]["label_accuracy"] is None


def test_linearity_control_measures_every_draw(tiny):
    qs = queries(tiny, 4)
    probe = ShiftProbe(tiny, TASK, qs)
    theta = 2 * torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(6))
    token_ids = [a[0] for a in answer_ids(tiny.tokenizer, TASK, [e.output for e in qs])]
    config = LinearityConfig(n_queries=4, fit_factor=1.0, n_heldout=8)
    draws = random_like(theta, 2, seed=3)
    res = linearity_control(probe, 1, theta, token_ids, draws, config)
    keys = {"cos_mean_shift", "alignment", "alignment_mean_shift", "cos_theta_Qtheta", "alignment_Qtheta",
            "alignment_Wtheta", "r2_heldout", "norm_ratio"}
    assert set(res["ltv"]) == keys and len(res["draws"]) == 2 and res["n_draws"] == 2
    # each draw's values are that vector's own diagnostics (its own fit), and the LTV's are theta's
    assert res["draws"][1] == vector_diagnostics(probe, 1, draws[1], token_ids, config)
    fit = fit_linear_map(probe, 1, theta, config)
    q, _ = polar(fit.W)
    qt = q @ theta
    assert res["ltv"]["cos_theta_Qtheta"] == pytest.approx(float(qt @ theta / (qt.norm() * theta.norm())), abs=1e-5)
    assert res["ltv"]["alignment"] == pytest.approx(float(task_alignment(tiny, theta, token_ids)), abs=1e-6)
    for k in keys:
        summ = res["summary"][k]
        assert summ["draws"] == [r[k] for r in res["draws"]] and summ["value"] == res["ltv"][k]
        assert summ["low"] <= summ["high"] and 1 / 3 <= summ["p_value"] <= 1
    cheap = linearity_control(probe, 1, theta, token_ids, draws, config, fit=False)
    assert set(cheap["ltv"]) == {"cos_mean_shift", "alignment", "alignment_mean_shift"}
    assert cheap["draws"][0]["cos_mean_shift"] == res["draws"][0]["cos_mean_shift"]
    with pytest.raises(ValueError, match="draws of shape"):
        linearity_control(probe, 1, theta, token_ids, draws[0], config)
