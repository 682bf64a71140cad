"""Key heads: the last-token runner matches full forwards; saliency is gradient times activation; ablation
touches exactly the chosen slice and always removes its hooks; attention statistics survive left padding."""

from __future__ import annotations

import pytest
import torch

from ltvlib.heads import HeadPatch, o_proj, patch_heads, record_heads
from ltvlib.inject import HookNotFiredError, VectorEdit, inject
from ltvlib.key_heads import (
    LastTokenRunner,
    ablate_heads,
    attention_stats,
    check_heads,
    head_accuracy,
    head_saliency,
    mean_head_outputs,
    random_heads,
    top_heads,
)
from ltvlib.prefix import forward_tokens
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
