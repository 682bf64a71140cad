"""The site table: one entry per supported ``model_type``, each naming the modules that the architecture's
``transformers`` decoder layer really uses (checked against names written out independently in
``tests.arch_fixtures.LAYOUT`` and against the model's forward pass)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ltvlib import sites
from ltvlib.analysis.linearity import record_final_norm_input
from ltvlib.inject import record_residual
from ltvlib.kv_cache import forward_from_layer, forward_tokens
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.tasks import get_task, load_splits
from tests.arch_fixtures import BUILDERS, LAYOUT


@pytest.fixture(scope="module", params=list(BUILDERS))
def any_arch(request):
    return BUILDERS[request.param]()


def test_every_supported_model_type_has_a_tiny_model_here():
    assert set(BUILDERS) == set(sites.ARCH_TABLES) == set(LAYOUT)


def test_roles_name_the_architectures_modules(any_arch):
    lm = any_arch
    model_type = lm.model.config.model_type
    blocks_path, attn_write, mlp_in, final = LAYOUT[model_type]
    g = lm.geometry
    blocks = sites.get_module(lm.model, blocks_path)
    assert len(blocks) == g.n_layers
    for layer in range(g.n_layers):
        block = blocks[layer]
        assert sites.block(lm, layer) is block and sites.block(lm, layer - g.n_layers) is block
        assert sites.attention(lm, layer) is block.self_attn
        assert sites.attn_input_norm(lm, layer) is block.input_layernorm
        assert sites.v_proj(lm, layer) is block.self_attn.v_proj
        assert sites.o_proj(lm, layer) is block.self_attn.o_proj
        assert sites.mlp(lm, layer) is block.mlp
        assert sites.mlp_input_norm(lm, layer) is sites.get_module(block, mlp_in)
        out_norm = sites.attn_output_norm(lm, layer)
        if attn_write == "self_attn":  # the attention output is added as is
            assert out_norm is None and sites.mlp_output_norm(lm, layer) is None
        else:
            assert out_norm is sites.get_module(block, attn_write)
            assert sites.mlp_output_norm(lm, layer) is block.post_feedforward_layernorm
        assert out_norm is not sites.mlp_input_norm(lm, layer)  # Llama's post_attention_layernorm is pre-MLP
    assert sites.final_norm(lm) is sites.get_module(lm.model, final)
    assert sites.text_model(lm).layers is blocks and sites.text_model(lm).norm is sites.final_norm(lm)
    assert sites.unembedding(lm) is lm.model.get_output_embeddings()
    # sizes as the config says, head_dim never derived from d_model
    text = lm.model.config.get_text_config()
    assert (g.n_heads, g.n_kv_heads, g.head_dim) == (text.num_attention_heads, text.num_key_value_heads, text.head_dim)
    assert sites.o_proj(lm, 0).weight.shape == (g.d_model, g.n_heads * g.head_dim)
    assert sites.v_proj(lm, 0).weight.shape == (g.n_kv_heads * g.head_dim, g.d_model)
    assert g.n_heads % g.n_kv_heads == 0 and g.group_size == g.n_heads // g.n_kv_heads


def test_norm_conventions_reproduce_each_norm_module(any_arch):
    """gain (weight + the table's offset), eps and 1/rms reproduce every RMSNorm of the path."""
    lm = any_arch
    x = 3 * torch.randn(5, lm.d_model, generator=torch.Generator().manual_seed(0))
    norms = [sites.final_norm(lm)] + [
        m for layer in range(lm.n_layers)
        for m in (sites.attn_input_norm(lm, layer), sites.attn_output_norm(lm, layer),
                  sites.mlp_input_norm(lm, layer), sites.mlp_output_norm(lm, layer)) if m is not None
    ]
    for norm in norms:
        with torch.no_grad():
            norm.weight.copy_(torch.randn(norm.weight.shape, generator=torch.Generator().manual_seed(1)))
        expected = x.double() * sites.inverse_rms(x, norm)[:, None] * sites.norm_gain(norm, lm.table).double()
        torch.testing.assert_close(norm(x).double(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="not an RMSNorm"):
        sites.norm_eps(nn.Linear(2, 2))


def test_block_sites_and_final_norm_match_hidden_states(any_arch):
    lm = any_arch
    prompts = encode_prompts(lm.tokenizer, get_task("antonym"), load_splits("antonym").train[:2])
    ids, mask = pad_left(prompts.full_rows(), lm.tokenizer.pad_token_id)
    layers = list(range(lm.n_layers))
    with torch.no_grad(), record_residual(lm, layers) as inputs, record_final_norm_input(lm) as final:
        out = lm.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    for layer in layers:
        torch.testing.assert_close(inputs[layer], out.hidden_states[layer])
    # the final norm reads the last block's output; hidden_states[-1] is already normalised
    logits = sites.unembedding(lm)(sites.final_norm(lm)(final[0]))
    torch.testing.assert_close(logits, out.logits, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(forward_tokens(lm, ids, mask)[0], out.logits[:, -1:], rtol=1e-5, atol=1e-5)
        # resuming the forward at a block from its recorded input (the text model's parts, from the table)
        resumed = forward_from_layer(lm, inputs[1], 1, mask, logits_to_keep=ids.shape[1])
    torch.testing.assert_close(resumed, out.logits, rtol=1e-4, atol=1e-4)


def test_unknown_layer_or_architecture_is_refused(llama):
    with pytest.raises(ValueError, match="layer 3 is out of range"):
        sites.o_proj(llama, 3)

    class Config:
        model_type = "gemma2"

    with pytest.raises(ValueError, match=r"model_type='gemma2'; supported: gemma3, gemma3_text, llama, mistral, qwen2"):
        sites.arch_table(Config())
