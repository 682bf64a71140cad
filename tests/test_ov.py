"""OV circuits read from the weights match what the attention module computes; the reconstructions are the
sums they claim to be; the measured norm scales and the MLP control match direct computations."""

from __future__ import annotations

import pytest
import torch

from ltvlib.analysis.controls import random_like
from ltvlib.analysis.key_heads import LastTokenRunner
from ltvlib.analysis.ov import (
    CONTROL_VARIANTS,
    OV_VARIANTS,
    NormScales,
    injected_accuracy,
    measure_norm_scales,
    mlp_map,
    mlp_response,
    mlp_states,
    ov_control,
    ov_matrix,
    ov_outputs,
    ov_reconstruction,
    paper_ov,
    reconstruct,
)
from ltvlib.heads import HeadPatch, o_proj, patch_heads
from ltvlib.inject import VectorEdit, inject, record_residual
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.sites import (
    attn_input_norm,
    attn_output_norm,
    decoder_layers,
    get_module,
    mlp,
    mlp_input_norm,
    mlp_output_norm,
    norm_gain,
)
from ltvlib.tasks import get_task, load_splits
from tests.models_fixtures import tiny_gemma3, tiny_llama


def _examples(n=4):
    return load_splits("antonym").train[:n]


def _rms(x, module):
    eps = getattr(module, "variance_epsilon", None) or module.eps  # Llama-style, Gemma-style
    return torch.sqrt(x.pow(2).mean(-1) + eps)


@pytest.mark.parametrize("layer", [0, 2])
def test_ov_matrix_is_the_attention_of_one_head_on_one_token(tiny, layer):
    """A one-token sequence attends only to itself, so with the other heads zeroed the attention output
    (o_proj's output) is exactly OV_h applied to the normalised input: OV_h x / rms(x)."""
    g = tiny.geometry
    torch.manual_seed(1)
    x = 3 * torch.randn(g.d_model)
    ids = torch.tensor([[7]])
    mask = torch.ones_like(ids)
    norm = attn_input_norm(tiny, layer)
    for head in range(g.n_heads):
        others = [HeadPatch(layer, h, -1, torch.zeros(g.head_dim)) for h in range(g.n_heads) if h != head]
        seen: dict = {}
        handle = o_proj(tiny, layer).register_forward_hook(
            lambda m, a, out, seen=seen: seen.__setitem__("y", out.detach()))
        try:
            with inject(tiny, [VectorEdit(layer, -1, x, mode="replace")], attention_mask=mask), \
                    patch_heads(tiny, others, attention_mask=mask):
                forward_tokens(tiny, ids, mask)
        finally:
            handle.remove()
        expected = seen["y"][0, -1]
        got = ov_matrix(tiny, layer, head) @ x / _rms(x, norm)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ov_outputs(tiny, layer, x)[head], ov_matrix(tiny, layer, head) @ x,
                                   rtol=1e-4, atol=1e-5)


def test_ov_matrix_by_hand_with_grouped_query_attention(llama):
    """Independent of the attention module: gain (read from the norm itself), v_proj, the head's KV group
    h // (H / H_kv), o_proj with the other heads' columns zeroed."""
    g = llama.geometry
    assert g.n_kv_heads < g.n_heads
    layer = 1
    block = decoder_layers(llama.model)[layer]
    norm = get_module(block, "input_layernorm")
    x = torch.randn(g.d_model)
    gained = norm(x) * _rms(x, norm)  # gain * x, whatever the family's gain convention
    v = block.self_attn.v_proj(gained).view(g.n_kv_heads, g.head_dim)
    for head in range(g.n_heads):
        heads_in = torch.zeros(g.n_heads, g.head_dim)
        heads_in[head] = v[head // (g.n_heads // g.n_kv_heads)]
        expected = o_proj(llama, layer)(heads_in.flatten())
        torch.testing.assert_close(ov_matrix(llama, layer, head) @ x, expected, rtol=1e-4, atol=1e-5)


def test_ov_matrix_rejects_bad_heads_and_vectors(tiny):
    with pytest.raises(ValueError, match="out of range"):
        ov_matrix(tiny, 0, tiny.geometry.n_heads)
    with pytest.raises(ValueError, match="out of range"):
        ov_matrix(tiny, tiny.n_layers, 0)
    with pytest.raises(ValueError, match="expected"):
        ov_outputs(tiny, 0, torch.zeros(tiny.d_model + 1))


def test_reconstruction_is_the_weighted_sum_over_later_layers(tiny):
    g = tiny.geometry
    torch.manual_seed(2)
    theta = torch.randn(g.d_model)
    weights = torch.rand(g.n_layers, g.n_heads)
    scales = NormScales(attn_in=torch.rand(g.n_layers) + 0.5, attn_out=torch.rand(g.n_layers) + 0.5, n=1)
    for layer in range(g.n_layers):
        raw = torch.zeros(g.d_model)
        full = torch.zeros(g.d_model)
        for l in range(layer, g.n_layers):
            post = attn_output_norm(tiny, l)
            gain = norm_gain(post, tiny.table) if post is not None else 1.0
            unweighted = sum(ov_matrix(tiny, l, h) @ theta for h in range(g.n_heads))
            raw += gain * unweighted
            weighted = sum(weights[l, h] * (ov_matrix(tiny, l, h) @ theta) for h in range(g.n_heads))
            full += gain * weighted * scales.attn_in[l] * (scales.attn_out[l] if post is not None else 1.0)
        torch.testing.assert_close(ov_reconstruction(tiny, theta, layer), raw, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ov_reconstruction(tiny, theta, layer, scales=scales, head_weights=weights), full,
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="head_weights"):
        ov_reconstruction(tiny, theta, 0, head_weights=torch.ones(g.n_heads))


def _full_batch(lm, examples):
    prompts = encode_prompts(lm.tokenizer, get_task("antonym"), examples)
    return pad_left(prompts.full_rows(), lm.tokenizer.pad_token_id)


def test_norm_scales_are_mean_inverse_rms_at_the_last_position(tiny):
    examples = _examples()
    g = tiny.geometry
    theta = torch.randn(g.d_model)
    edits = [VectorEdit(1, -1, theta)]
    runner = LastTokenRunner(tiny, "antonym", examples, batch_size=3)  # two batches, different padding
    scales = measure_norm_scales(tiny, runner, edits)
    ids, mask = _full_batch(tiny, examples)
    layers = list(range(g.n_layers))
    # inject first: its pre-hook must run before the recording one
    with inject(tiny, edits, attention_mask=mask), record_residual(tiny, layers) as rec:
        forward_tokens(tiny, ids, mask)
    for l in layers:
        norm = attn_input_norm(tiny, l)
        expected = (1 / _rms(rec[l][:, -1], norm)).mean()
        torch.testing.assert_close(scales.attn_in[l], expected, rtol=1e-4, atol=1e-6)
    assert (scales.attn_out is not None) == (tiny.table.attn_output_norm is not None)


def test_mlp_response_matches_finite_differences(tiny):
    examples = _examples()
    g = tiny.geometry
    torch.manual_seed(3)
    theta = torch.randn(g.d_model)
    edits = [VectorEdit(1, -1, theta)]
    runner = LastTokenRunner(tiny, "antonym", examples)
    got = mlp_response(tiny, runner, theta, 1, edits)
    ids, mask = _full_batch(tiny, examples)
    states = {}
    handles = [
        mlp_input_norm(tiny, l).register_forward_pre_hook(
            lambda m, a, l=l: states.__setitem__(l, a[0][:, -1].detach().double()))
        for l in range(1, g.n_layers)
    ]
    try:
        with inject(tiny, edits, attention_mask=mask):
            forward_tokens(tiny, ids, mask)
    finally:
        for h in handles:
            h.remove()
    expected = torch.zeros(g.d_model, dtype=torch.float64)
    eps = 1e-3
    blocks = decoder_layers(tiny.model)
    for l, x in states.items():
        blocks[l].double()
        def branch(z, l=l):
            y = mlp(tiny, l)(mlp_input_norm(tiny, l)(z))
            out_norm = mlp_output_norm(tiny, l)
            return out_norm(y) if out_norm is not None else y
        expected += ((branch(x + eps * theta.double()) - branch(x - eps * theta.double())) / (2 * eps)).mean(0)
        blocks[l].float()
    torch.testing.assert_close(got.double(), expected, rtol=2e-3, atol=2e-4)
    # the response does not include blocks before the injection layer
    later = mlp_response(tiny, runner, theta, 2, edits)
    assert not torch.allclose(later, got)


@pytest.mark.parametrize("layer", [0, 2])
def test_ov_term_with_measured_scales_is_what_one_head_writes_into_the_stream(tiny, layer):
    """A one-token sequence attends only to itself. With the other heads zeroed, the attention block's
    contribution to the residual stream (through Gemma's attention-output norm, with a non-trivial gain) is
    exactly head h's term of the OV reconstruction at the scales of that forward: 1/rms of the block input and
    of the attention output."""
    g = tiny.geometry
    x = 3 * torch.randn(g.d_model, generator=torch.Generator().manual_seed(4))
    ids = torch.tensor([[7]])
    mask = torch.ones_like(ids)
    post = attn_output_norm(tiny, layer)
    saved = post.weight.clone() if post is not None else None
    if post is not None:
        with torch.no_grad():
            post.weight.copy_(torch.randn(g.d_model, generator=torch.Generator().manual_seed(5)))
    try:
        for head in range(g.n_heads):
            others = [HeadPatch(layer, h, -1, torch.zeros(g.head_dim)) for h in range(g.n_heads) if h != head]
            seen: dict = {}
            block = decoder_layers(tiny.model)[layer]
            mlp_in = "post_attention_layernorm" if post is None else "pre_feedforward_layernorm"  # the stream after
            handles = [
                get_module(block, mlp_in).register_forward_pre_hook(lambda m, a, seen=seen: seen.__setitem__("y", a[0])),
                o_proj(tiny, layer).register_forward_hook(lambda m, a, out, seen=seen: seen.__setitem__("a", out)),
            ]
            try:
                with torch.no_grad(), inject(tiny, [VectorEdit(layer, -1, x, mode="replace")], attention_mask=mask), \
                        patch_heads(tiny, others, attention_mask=mask):
                    forward_tokens(tiny, ids, mask)
            finally:
                for handle in handles:
                    handle.remove()
            written = (seen["y"][0, -1] - x).double()  # the block input was replaced by x
            attn_in = torch.zeros(g.n_layers)
            attn_in[layer] = 1 / _rms(x, attn_input_norm(tiny, layer))
            attn_out = None
            if post is not None:
                attn_out = torch.zeros(g.n_layers)
                attn_out[layer] = 1 / _rms(seen["a"][0, -1], post)
            weights = torch.zeros(g.n_layers, g.n_heads)
            weights[layer, head] = 1.0
            scales = NormScales(attn_in=attn_in, attn_out=attn_out, n=1)
            got = ov_reconstruction(tiny, x, layer, scales=scales, head_weights=weights).double()
            torch.testing.assert_close(got, written, rtol=1e-4, atol=1e-5 * float(x.abs().max()))
    finally:
        if post is not None:
            with torch.no_grad():
                post.weight.copy_(saved)


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3])
def test_paper_form_is_the_explicit_sum_of_w_o_w_v_theta(build):
    """From the raw weights, without ov_matrix: for every later block and query head, o_proj's column slice of
    the head times v_proj's rows of its KV group times the pre-attention gain times theta, summed (and, for
    Gemma, times the attention-output norm's gain). The norms get random weights so the gains matter. The
    rescaled variant is that direction at |theta|."""
    tiny = build(seed=2)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in tiny.model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
    g = tiny.geometry
    theta = torch.randn(g.d_model, generator=torch.Generator().manual_seed(8)).double()
    for layer in range(g.n_layers):
        expected = torch.zeros(g.d_model, dtype=torch.float64)
        for l in range(layer, g.n_layers):
            block = decoder_layers(tiny.model)[l]
            gain = norm_gain(attn_input_norm(tiny, l), tiny.table).double()
            w_v = block.self_attn.v_proj.weight.double()
            w_o = block.self_attn.o_proj.weight.double()
            term = torch.zeros(g.d_model, dtype=torch.float64)
            for h in range(g.n_heads):
                kv = h // (g.n_heads // g.n_kv_heads)
                rows = w_v[kv * g.head_dim : (kv + 1) * g.head_dim]
                term += w_o[:, h * g.head_dim : (h + 1) * g.head_dim] @ (rows @ (gain * theta))
            post = attn_output_norm(tiny, l)
            expected += term * (norm_gain(post, tiny.table).double() if post is not None else 1.0)
        got = paper_ov(tiny, theta.float(), layer).double()
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
        rescaled = paper_ov(tiny, theta.float(), layer, variant="at |θ|").double()
        assert rescaled.norm() == pytest.approx(float(theta.norm()), rel=1e-5)
        assert float(torch.nn.functional.cosine_similarity(rescaled, expected, dim=0)) == pytest.approx(1.0, abs=1e-5)
    assert OV_VARIANTS["ov_raw"] == "paper"
    assert all("ours" in v for k, v in OV_VARIANTS.items() if k in ("ov", "ov_weighted", "ov_normed"))
    with pytest.raises(ValueError, match="unknown OV variant"):
        paper_ov(tiny, theta.float(), 0, variant="scaled")


def test_ov_control_gives_each_draw_an_accuracy_with_its_interval(tiny):
    task = get_task("sst2")
    test = load_splits(task).test[:8]
    runner = LastTokenRunner(tiny, task, test, batch_size=5)
    theta = 4 * torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(9))
    draws = random_like(theta, 3, seed=1)
    for variant in CONTROL_VARIANTS:
        res = ov_control(tiny, runner, theta, 1, draws, variant=variant)
        assert res["variant"] == variant and len(res["draws"]) == 3
        for row in [res["ltv"], *res["draws"]]:
            for key in ("accuracy", "label_accuracy"):
                rec = row[key]
                assert rec["n"] == 8 and rec["value"] == rec["successes"] / 8
                assert 0 <= rec["low"] <= rec["value"] <= rec["high"] <= 1 and rec["high"] > rec["low"]
        # each draw's record is the accuracy of that draw's theta_OV injected where theta was
        again = injected_accuracy(tiny, runner, paper_ov(tiny, draws[2], 1, variant=variant), 1)
        assert again == res["draws"][2]
        for key in ("accuracy", "label_accuracy"):
            summ = res["summary"][key]
            vals = [r[key]["value"] for r in res["draws"]]
            assert summ["draws"] == vals and summ["value"] == res["ltv"][key]["value"]
            assert summ["p_value"] == pytest.approx((1 + sum(v >= summ["value"] for v in vals)) / 4)
    open_runner = LastTokenRunner(tiny, "antonym", _examples())
    res = ov_control(tiny, open_runner, theta, 0, draws[:1])
    assert res["ltv"]["label_accuracy"] is None and set(res["summary"]) == {"accuracy"}
    with pytest.raises(ValueError, match="draws of shape"):
        ov_control(tiny, runner, theta, 1, draws[0])


@pytest.mark.parametrize("build", [tiny_llama, tiny_gemma3])
def test_equal_norm_control_sends_theta_and_every_draw_through_the_same_map_at_theta_norm(build):
    """The OV control at equal norm: for the OV sum and for the MLP control, the LTV's reconstruction and every
    random draw's are rescaled to |theta| before injection (the paper's form keeps the map's own scale, which the
    control reports as a ratio); each draw's record is the accuracy of that draw's reconstruction, and the MLP map
    is linear and is what mlp_response gives."""
    tiny = build(seed=4)
    task = get_task("sst2")
    splits = load_splits(task)
    runner = LastTokenRunner(tiny, task, splits.test[:6], batch_size=4)
    analysis = LastTokenRunner(tiny, task, splits.validation[:4], batch_size=4)
    theta = 3 * torch.randn(tiny.d_model, generator=torch.Generator().manual_seed(5))
    draws = random_like(theta, 3, seed=2)
    layer = 1
    states = mlp_states(tiny, analysis, layer, [VectorEdit(layer, -1, theta)])
    # the MLP map is linear in the vector and is the MLP control of mlp_response
    v = draws[0]
    torch.testing.assert_close(mlp_map(tiny, states, 2 * v).double(), 2 * mlp_map(tiny, states, v).double(),
                               rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(mlp_map(tiny, states, theta),
                               mlp_response(tiny, analysis, theta, layer, [VectorEdit(layer, -1, theta)]))
    for path in ("ov", "mlp"):
        raw = reconstruct(tiny, theta, layer, path=path, states=states)
        for vec in (theta, *draws):
            out = reconstruct(tiny, vec, layer, path=path, variant="at |θ|", states=states)
            assert float(out.double().norm()) == pytest.approx(float(theta.double().norm()), rel=1e-4)
            same_direction = reconstruct(tiny, vec, layer, path=path, states=states)
            assert float(torch.nn.functional.cosine_similarity(out.double(), same_direction.double(), dim=0)) \
                == pytest.approx(1.0, abs=1e-5)
        res = ov_control(tiny, runner, theta, layer, draws, variant="at |θ|", path=path, states=states)
        assert res["path"] == path and res["variant"] == "at |θ|" and res["norm"] == pytest.approx(1.0, rel=1e-4)
        for i, d in enumerate(draws):
            again = injected_accuracy(tiny, runner, reconstruct(tiny, d, layer, path=path, variant="at |θ|",
                                                                 states=states), layer)
            assert again == res["draws"][i]
        paper = ov_control(tiny, runner, theta, layer, draws[:1], path=path, states=states)
        assert paper["norm"] == pytest.approx(float(raw.double().norm() / theta.double().norm()), rel=1e-4)
    with pytest.raises(ValueError, match="needs mlp_states"):
        reconstruct(tiny, theta, layer, path="mlp")
    with pytest.raises(ValueError, match="needs mlp_states"):
        reconstruct(tiny, theta, 0, path="mlp", states=states)
    with pytest.raises(ValueError, match="unknown reconstruction path"):
        reconstruct(tiny, theta, layer, path="attention")
