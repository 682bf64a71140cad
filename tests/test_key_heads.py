"""Key heads: the last-token runner matches full forwards; saliency is gradient times activation; ablation
touches exactly the chosen slice and always removes its hooks; attention statistics survive left padding."""

from __future__ import annotations

import math

import pytest
import torch

from ltvlib.analysis.key_heads import (
    LastTokenRunner,
    ablate_heads,
    attention_stats,
    check_heads,
    head_accuracy,
    head_saliency,
    hypergeometric_sf,
    mean_head_outputs,
    random_heads,
    top_heads,
    u_shape_test,
)
from ltvlib.heads import HeadPatch, o_proj, patch_heads, record_heads
from ltvlib.inject import HookNotFiredError, VectorEdit, inject
from ltvlib.kv_cache import forward_tokens
from ltvlib.prompts import answer_ids, encode_prompts, pad_left
from ltvlib.tasks import get_task, load_splits

TASK = get_task("capital")


def _examples(n=5):
    # different lengths, so batches are left-padded
    pool = sorted(load_splits(TASK).train, key=lambda e: len(e.input.split()))
    return [pool[0], pool[-1], pool[1], pool[-2], pool[len(pool) // 2]][:n]


def _full(lm, examples):
    prompts = encode_prompts(lm.tokenizer, TASK, examples)
    ids, mask = pad_left(prompts.full_rows(), lm.tokenizer.pad_token_id)
    gold = torch.tensor([a[0] for a in answer_ids(lm.tokenizer, TASK, [e.output for e in examples])])
    return ids, mask, gold


def _edits(lm):
    torch.manual_seed(5)
    return [VectorEdit(1, -1, 2 * torch.randn(lm.d_model))]


def test_runner_logits_equal_full_forward(tiny):
    examples = _examples()
    ids, mask, gold = _full(tiny, examples)
    assert (mask == 0).any(), "the test needs left padding"
    edits = _edits(tiny)
    with inject(tiny, edits, attention_mask=mask):
        full, _ = forward_tokens(tiny, ids, mask)
    runner = LastTokenRunner(tiny, TASK, examples, batch_size=2)
    got = torch.cat([runner.forward(b, edits) for b in runner.batches])
    torch.testing.assert_close(got, full[:, -1], rtol=1e-4, atol=1e-4)
    acc = head_accuracy(tiny, runner, edits)
    assert acc["correct"] == (full[:, -1].argmax(-1) == gold).tolist()


@pytest.mark.parametrize("layer,head", [(2, 1), (0, 3)])
def test_saliency_is_gradient_times_activation(tiny, layer, head):
    examples = _examples()
    edits = _edits(tiny)
    runner = LastTokenRunner(tiny, TASK, examples, batch_size=3)
    saliency = head_saliency(tiny, runner, edits)
    assert saliency.shape == (tiny.n_layers, tiny.geometry.n_heads)
    # by hand: a full forward, the head's last-position output made a leaf through a replace patch
    ids, mask, gold = _full(tiny, examples)
    with record_heads(tiny, [layer], attention_mask=mask, positions=[-1]) as rec, \
            inject(tiny, edits, attention_mask=mask):
        forward_tokens(tiny, ids, mask)
    a = rec[layer][:, 0, head].clone().requires_grad_(True)
    with inject(tiny, edits, attention_mask=mask), patch_heads(tiny, [HeadPatch(layer, head, -1, a)], attention_mask=mask):
        logits, _ = forward_tokens(tiny, ids, mask)
    p = logits[:, -1].softmax(-1).gather(1, gold[:, None])
    (grad,) = torch.autograd.grad(p.sum(), a)
    expected = (a.detach() * grad).sum(-1).abs().mean()
    torch.testing.assert_close(saliency[layer, head], expected, rtol=1e-3, atol=1e-7)


def test_top_and_random_heads():
    s = torch.tensor([[0.1, 0.9, 0.3], [0.5, 0.0, 0.7]])
    assert top_heads(s, 0.34) == [(0, 1), (1, 2)]
    assert top_heads(s, 0.01) == [(0, 1)]
    with pytest.raises(ValueError, match="fraction"):
        top_heads(s, 0.0)
    assert top_heads(s, 0.34, min_layer=1) == [(1, 2), (1, 0)]
    assert top_heads(s, 1.0, min_layer=1) == [(1, 2), (1, 0), (1, 1)]  # capped at the candidates
    with pytest.raises(ValueError, match="min_layer"):
        top_heads(s, 0.1, min_layer=2)


def test_random_heads_are_seeded_and_exclude(tiny):
    keys = [(0, 0), (1, 1)]
    a = random_heads(tiny, 3, seed=4, exclude=keys)
    assert a == random_heads(tiny, 3, seed=4, exclude=keys)
    assert not set(a) & set(keys) and len(set(a)) == 3
    late = random_heads(tiny, 3, seed=4, min_layer=2)
    assert all(l == 2 for l, _ in late)
    with pytest.raises(ValueError, match="cannot draw"):
        random_heads(tiny, tiny.n_layers * tiny.geometry.n_heads, seed=0, exclude=keys)


def test_ablation_changes_exactly_the_chosen_slice(tiny):
    ids, mask, _ = _full(tiny, _examples())
    g = tiny.geometry
    layers = list(range(g.n_layers))
    with record_heads(tiny, layers) as before:
        forward_tokens(tiny, ids, mask)
    means = torch.randn(g.n_layers, g.n_heads, g.head_dim)
    for mode, value in (("zero", torch.zeros(g.head_dim)), ("mean", means[1, 2])):
        # ablate first: its hook must run before the recording one
        with ablate_heads(tiny, [(1, 2)], attention_mask=mask, mode=mode, means=means), record_heads(tiny, layers) as after:
            forward_tokens(tiny, ids, mask)
        torch.testing.assert_close(after[1][:, -1, 2], value.expand(len(ids), -1))
        changed = (after[1] - before[1]).abs() > 0
        changed[:, -1, 2] = False
        assert not changed.any(), "ablation leaked outside its head slice at the last position"
        torch.testing.assert_close(after[0], before[0])
        # later layers: only the last position can change (causal attention)
        torch.testing.assert_close(after[2][:, :-1], before[2][:, :-1])
        assert not torch.allclose(after[2][:, -1], before[2][:, -1])


def test_ablation_hooks_are_removed_and_must_fire(tiny):
    _, mask, _ = _full(tiny, _examples())
    with pytest.raises(RuntimeError, match="boom"), ablate_heads(tiny, [(0, 1), (2, 0)], attention_mask=mask):
        raise RuntimeError("boom")
    for layer in range(tiny.n_layers):
        assert not o_proj(tiny, layer)._forward_pre_hooks, "a hook survived the exception"
    with pytest.raises(HookNotFiredError), ablate_heads(tiny, [(1, 0)], attention_mask=mask):
        pass


def test_bad_head_sets_raise(tiny):
    _, mask, _ = _full(tiny, _examples())
    g = tiny.geometry
    for heads, match in (([], "empty"), ([(g.n_layers, 0)], "layer"), ([(0, g.n_heads)], "head"),
                         ([(0, 1), (0, 1)], "repeats")):
        with pytest.raises(ValueError, match=match):
            check_heads(tiny, heads)
        with pytest.raises(ValueError, match=match), ablate_heads(tiny, heads, attention_mask=mask):
            pass
    with pytest.raises(ValueError, match="mean ablation needs means"), \
            ablate_heads(tiny, [(0, 0)], attention_mask=mask, mode="mean"):
        pass
    with pytest.raises(ValueError, match="unknown ablation mode"), \
            ablate_heads(tiny, [(0, 0)], attention_mask=mask, mode="half"):  # type: ignore[arg-type]
        pass


def test_mean_outputs_and_mean_ablation_accuracy(tiny):
    examples = _examples()
    edits = _edits(tiny)
    runner = LastTokenRunner(tiny, TASK, examples, batch_size=2)
    means = mean_head_outputs(tiny, runner, edits)
    ids, mask, _ = _full(tiny, examples)
    layers = list(range(tiny.n_layers))
    with record_heads(tiny, layers, attention_mask=mask, positions=[-1]) as rec, inject(tiny, edits, attention_mask=mask):
        forward_tokens(tiny, ids, mask)
    expected = torch.stack([rec[l][:, 0].mean(0) for l in layers])
    torch.testing.assert_close(means, expected, rtol=1e-4, atol=1e-5)
    every = [(l, h) for l in layers for h in range(tiny.geometry.n_heads)]
    base = head_accuracy(tiny, runner, edits)
    ablated = head_accuracy(tiny, runner, edits, heads=every, mode="mean", means=means)
    assert ablated["n"] == base["n"] == len(examples)
    assert ablated["gold_prob"] != pytest.approx(base["gold_prob"], rel=1e-6)


def test_attention_stats_under_left_padding(tiny):
    examples = _examples()
    edits = _edits(tiny)
    implementation = tiny.model.config._attn_implementation
    batched = attention_stats(tiny, LastTokenRunner(tiny, TASK, examples, batch_size=len(examples)), edits)
    singles = [attention_stats(tiny, LastTokenRunner(tiny, TASK, [e]), edits) for e in examples]
    torch.testing.assert_close(batched.first, torch.stack([s.first for s in singles]).mean(0), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(batched.final, torch.stack([s.final for s in singles]).mean(0), rtol=1e-4, atol=1e-5)
    assert batched.n == len(examples)
    both = batched.first + batched.final
    assert bool((batched.first > 0).all()) and bool((batched.final > 0).all())
    assert bool((both <= 1 + 1e-5).all()), "first and final are different tokens: their masses add to at most 1"
    assert tiny.model.config._attn_implementation == implementation, "eager attention was not switched back"


def test_hypergeometric_tail_by_enumeration():
    """P(X >= k) for 3 draws from 6 items, 2 marked: enumerate all 20 subsets."""
    from itertools import combinations
    subsets = list(combinations(range(6), 3))
    for k in range(4):
        expected = sum(1 for s in subsets if sum(i < 2 for i in s) >= k) / len(subsets)
        assert hypergeometric_sf(k, 6, 2, 3) == pytest.approx(expected)


def test_u_shape_statistic_on_synthetic_key_heads():
    n_layers, n_heads, layer = 30, 9, 6  # 24 layers from the injection layer on: thirds of 8
    # U-shaped: heads right after the injection layer and in the last layers, plus some before it
    u = [(l, h) for l in (6, 7, 8, 27, 28, 29) for h in range(4)] + [(0, 0), (1, 1), (2, 2)]
    res = u_shape_test(u, layer, n_layers, n_heads)
    assert res.n == 24 and res.n_before == 3
    assert res.thirds_layers == (8, 8, 8) and res.counts == (12, 0, 12)
    assert res.expected == pytest.approx((8.0, 8.0, 8.0)) and res.expected_fraction == pytest.approx(2 / 3)
    assert res.fraction == 1.0 and res.effect == pytest.approx(1 / 3)
    assert res.effect_low > 0 and res.effect_high == pytest.approx(1 / 3)
    # all 24 drawn heads land in the outer 144 of 216 heads
    assert res.p_value == pytest.approx(math.comb(144, 24) / math.comb(216, 24))
    assert res.p_value < 1e-3
    assert res.chi2 == pytest.approx(12.0) and res.chi2_p == pytest.approx(math.exp(-6.0))
    # uniform: the same number of heads in every post-injection layer
    flat = [(l, h) for l in range(layer, n_layers) for h in range(2)]
    even = u_shape_test(flat, layer, n_layers, n_heads)
    assert even.counts == (16, 16, 16) and even.fraction == pytest.approx(2 / 3)
    assert even.chi2 == 0.0 and even.chi2_p == 1.0
    assert even.p_value > 0.4 and even.effect_low < 0 < even.effect_high
    # middle-heavy: the one-sided test sees no U
    mid = [(l, h) for l in range(14, 22) for h in range(3)]
    assert u_shape_test(mid, layer, n_layers, n_heads).p_value == 1.0
    assert set(res.to_dict()) >= {"counts", "expected", "p_value", "effect", "effect_low", "effect_high", "chi2"}


def test_u_shape_thirds_of_an_uneven_layer_count_and_errors():
    res = u_shape_test([(3, 0), (4, 1), (9, 0)], 3, 10, 2)  # 7 layers: ranks 0-2 | 3-4 | 5-6
    assert res.thirds_layers == (3, 2, 2) and res.counts == (2, 0, 1)
    assert res.expected_fraction == pytest.approx(5 / 7)
    with pytest.raises(ValueError, match="at least 3 layers"):
        u_shape_test([(9, 0)], 8, 10, 2)
    with pytest.raises(ValueError, match="no key head"):
        u_shape_test([(0, 0)], 3, 10, 2)
    with pytest.raises(ValueError, match="distinct"):
        u_shape_test([(4, 0), (4, 0)], 3, 10, 2)
    with pytest.raises(ValueError, match="distinct"):
        u_shape_test([(4, 5)], 3, 10, 2)


def test_head_accuracy_reports_label_restricted_accuracy(tiny):
    task = get_task("sst2")
    examples = load_splits(task).test[:6]
    runner = LastTokenRunner(tiny, task, examples, batch_size=4)
    res = head_accuracy(tiny, runner, _edits(tiny))
    prompts = encode_prompts(tiny.tokenizer, task, examples)
    ids, mask = pad_left(prompts.full_rows(), tiny.tokenizer.pad_token_id)
    with inject(tiny, _edits(tiny), attention_mask=mask):
        logits, _ = forward_tokens(tiny, ids, mask)
    labels = [a[0] for a in answer_ids(tiny.tokenizer, task, task.labels)]
    pred = [labels[i] for i in logits[:, -1, labels].argmax(-1).tolist()]
    gold = [a[0] for a in answer_ids(tiny.tokenizer, task, [e.output for e in examples])]
    assert res["label_correct"] == [p == g for p, g in zip(pred, gold)]
    assert res["label_accuracy"] == pytest.approx(sum(res["label_correct"]) / 6)
    open_vocab = head_accuracy(tiny, LastTokenRunner(tiny, TASK, _examples()))
    assert open_vocab["label_accuracy"] is None and open_vocab["label_correct"] is None
