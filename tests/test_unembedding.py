"""The unembedding scores the kept positions of a batch as one product: the loaded models' output embeddings copy
a strided input into one block first, and the logits and gradients are those of the full forward's last positions."""

from __future__ import annotations

import torch
from torch import nn

from ltvlib.unembedding import _contiguous_input, has_contiguous_unembedding, use_contiguous_unembedding


def _batch(lm, rows: int = 3, width: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, 60, (rows, width), generator=g)


def test_loaded_models_have_the_hook_once(tiny):
    assert has_contiguous_unembedding(tiny.model)
    head = tiny.model.get_output_embeddings()
    before = list(head._forward_pre_hooks.values())
    assert use_contiguous_unembedding(tiny.model)  # a second call adds nothing
    assert list(head._forward_pre_hooks.values()) == before
    assert sum(h is _contiguous_input for h in before) == 1


def test_the_head_reads_kept_positions_as_one_block(tiny):
    seen: list[bool] = []
    head = tiny.model.get_output_embeddings()
    spy = head.register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
    try:
        with torch.no_grad():
            tiny.model(input_ids=_batch(tiny), logits_to_keep=2)
    finally:
        spy.remove()
    assert seen == [True], "the head was not called, or got the strided slice"


def test_kept_logits_and_gradients_equal_the_full_forwards(tiny):
    """``logits_to_keep=3`` (a strided slice, copied by the hook) against every position's logits (contiguous,
    untouched), cut to the same 3: the same values and the same gradient with respect to the input embeddings."""
    ids = _batch(tiny, rows=4)

    def run(keep: int):
        embeds = tiny.model.get_input_embeddings()(ids).detach().requires_grad_(True)
        logits = tiny.model(inputs_embeds=embeds, logits_to_keep=keep).logits[:, -3:]
        logits.float().logsumexp(-1).sum().backward()
        return logits.detach(), embeds.grad

    kept, kept_grad = run(3)
    full, full_grad = run(0)
    torch.testing.assert_close(kept, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kept_grad, full_grad, rtol=1e-5, atol=1e-5)


def test_the_hook_leaves_contiguous_inputs_alone():
    x = torch.randn(2, 5, 4)
    assert _contiguous_input(nn.Identity(), (x,)) is None
    strided = x[:, -2:]
    (copied,) = _contiguous_input(nn.Identity(), (strided,))  # type: ignore[misc]
    assert copied.is_contiguous() and torch.equal(copied, strided)


def test_a_model_without_an_output_embedding_is_left_as_it_is():
    assert not use_contiguous_unembedding(nn.Linear(3, 3))
    assert not has_contiguous_unembedding(nn.Linear(3, 3))
