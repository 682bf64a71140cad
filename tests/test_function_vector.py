"""Function vectors: the vector is the sum of the top heads' mean writes into the residual stream (through
Gemma's attention-output norm), and the batched cached-prefix indirect effect equals the straightforward
one-head-at-a-time full forward."""

from __future__ import annotations

import pytest
import torch

from ltvlib.baselines.function_vector import (
    FunctionVector,
    FunctionVectorConfig,
    build_function_vector,
    clean_prompts,
    corrupted_prompts,
    extract_function_vector,
    head_means,
    indirect_effects,
    mean_head_outputs,
    top_heads,
)
from ltvlib.heads import head_writes, o_proj, record_heads
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import pad_left
from ltvlib.tasks import get_task, load_splits


def _means(lm, n=4, shots=3):
    task = get_task("antonym")
    pool = load_splits(task).train[:60]
    return task, pool, mean_head_outputs(lm, clean_prompts(lm, task, pool, shots=shots, n=n, seed=0))


def test_function_vector_is_the_sum_of_the_heads_mean_writes(tiny):
    task = get_task("antonym")
    pool = load_splits(task).train[:60]
    prompts = clean_prompts(tiny, task, pool, shots=3, n=4, seed=0)
    means = head_means(tiny, prompts)
    g = tiny.geometry
    assert means.outputs.shape == (g.n_layers, g.n_heads, g.head_dim)
    assert means.writes.shape == (g.n_layers, g.n_heads, g.d_model)
    heads = [(0, 1), (2, 3), (1, 0)]
    # one prompt per forward, the writes of each head at its last token, then the mean
    per_prompt = []
    for row in prompts.full_rows():
        ids, mask = pad_left([row], tiny.tokenizer.pad_token_id)
        with record_heads(tiny, [l for l, _ in heads]) as cap:
            forward_tokens(tiny, ids, mask)
        per_prompt.append(sum(head_writes(tiny, l, cap[l][0, -1])[h] for l, h in heads))
    expected = torch.stack(per_prompt).mean(0)
    fv = build_function_vector(tiny, means.writes, heads)
    torch.testing.assert_close(fv, expected, atol=1e-5, rtol=1e-4)
    # the projection of the mean outputs through each head's slice of W_O
    bare = torch.zeros(g.d_model)
    for l, h in heads:
        w = o_proj(tiny, l).weight  # (d_model, n_heads * head_dim); head h owns its own columns, GQA or not
        bare += w[:, h * g.head_dim : (h + 1) * g.head_dim] @ means.outputs[l, h]
    if tiny.table.attn_output_norm is None:  # the write is that projection: the mean commutes with W_O
        torch.testing.assert_close(fv, bare, atol=1e-5, rtol=1e-5)
    else:  # Gemma: the attention-output norm rescales each token's write by its gain and 1/rms
        assert abs(float(fv.norm() / bare.norm()) - 1) > 0.1


def test_mean_outputs_and_writes_do_not_depend_on_batching(tiny):
    task = get_task("antonym")
    pool = load_splits(task).train[:60]
    prompts = clean_prompts(tiny, task, pool, shots=3, n=5, seed=1)
    batched = head_means(tiny, prompts)
    single = head_means(tiny, prompts, max_tokens=1)  # one prompt per forward
    torch.testing.assert_close(batched.outputs, single.outputs, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(batched.writes, single.writes, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mean_head_outputs(tiny, prompts), batched.outputs)


def test_cached_indirect_effect_equals_full_forward_per_head(tiny):
    task, pool, means = _means(tiny)
    # make the patches matter on a random model
    means = means * 5
    prompts, gold = corrupted_prompts(tiny, task, pool, shots=3, n=3, seed=0)
    heads = [(0, 0), (0, 3), (1, 2), (2, 1), (2, 3)]
    full = indirect_effects(tiny, prompts, gold, means, method="full", heads=heads)
    # a tiny byte budget forces several passes per prompt
    cached = indirect_effects(tiny, prompts, gold, means, method="cached", heads=heads, max_cache_bytes=1)
    cached_one_pass = indirect_effects(tiny, prompts, gold, means, method="cached", heads=heads)
    assert full.shape == (3, len(heads))
    assert full.abs().max() > 0
    torch.testing.assert_close(cached, full, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(cached_one_pass, full, atol=1e-6, rtol=1e-4)


def test_corrupted_prompts_shuffle_labels_not_queries(llama):
    task = get_task("antonym")
    pool = load_splits(task).train[:60]
    prompts, gold = corrupted_prompts(llama, task, pool, shots=4, n=3, seed=0)
    assert len(prompts) == 3 and len(gold) == 3
    assert all(text.endswith("A:") for text in prompts.texts)


def test_top_heads_order_and_errors(llama):
    ie = torch.tensor([[0.1, 0.5], [0.5, -1.0], [0.3, 0.0]])
    assert top_heads(ie, 3) == ((0, 1), (1, 0), (2, 0))
    with pytest.raises(ValueError, match="k must be"):
        top_heads(ie, 0)
    means = torch.zeros(llama.n_layers, llama.geometry.n_heads, llama.geometry.head_dim)
    writes = torch.zeros(llama.n_layers, llama.geometry.n_heads, llama.d_model)
    with pytest.raises(ValueError, match="head set is empty"):
        build_function_vector(llama, writes, [])
    with pytest.raises(ValueError, match="layer 5 is out of range"):
        build_function_vector(llama, writes, [(5, 0)])
    with pytest.raises(ValueError, match="head 9 is out of range"):
        build_function_vector(llama, writes, [(0, 9)])
    with pytest.raises(ValueError, match="expected the mean head writes"):
        build_function_vector(llama, means, [(0, 1)])
    with pytest.raises(ValueError, match="unknown method"):
        indirect_effects(llama, *corrupted_prompts(llama, get_task("antonym"), load_splits("antonym").train[:20],
                                                   shots=2, n=1, seed=0), means, method="fast")


def test_extract_save_load_roundtrip(llama, tmp_path):
    pool = load_splits("antonym").train[:40]
    config = FunctionVectorConfig(shots=3, n_mean=4, n_ie=2, k=3)
    fv = extract_function_vector(llama, "antonym", pool, config)
    assert fv.vector.shape == (llama.d_model,) and len(fv.heads) == 3 and fv.layer == llama.n_layers // 3
    torch.testing.assert_close(fv.vector, build_function_vector(llama, fv.mean_writes, fv.heads))
    assert fv.heads == top_heads(fv.indirect_effect, 3)
    back = FunctionVector.load(fv.save(tmp_path / "fv.safetensors"))
    assert back.heads == fv.heads and back.config == config and back.layer == fv.layer
    torch.testing.assert_close(back.vector, fv.vector)
    torch.testing.assert_close(back.mean_writes, fv.mean_writes)
    torch.testing.assert_close(back.mean_outputs, fv.mean_outputs)
    (edit,) = back.edits(layer=2)
    assert edit.layer == 2 and edit.position == -1
    with pytest.raises(ValueError, match="layer 3 is out of range"):
        extract_function_vector(llama, "antonym", pool, FunctionVectorConfig(shots=2, n_mean=2, n_ie=1, k=2, layer=3))
