"""bench/dual_layout.py: the prototype layout computes what nn.Linear computes, and puts everything back."""

from __future__ import annotations

import torch
from torch import nn

from ltvlib.sites import decoder_layers
from tests.bench_scripts import load_bench

dual_layout = load_bench("dual_layout")


def test_dual_layout_gives_the_same_logits_and_input_gradients_and_restores_the_blocks(tiny):
    blocks = decoder_layers(tiny.model)
    ids = torch.randint(0, 200, (3, 9), generator=torch.Generator().manual_seed(0))
    emb = tiny.model.get_input_embeddings()(ids).detach()

    def run():
        x = emb.clone().requires_grad_(True)
        logits = tiny.model(inputs_embeds=x).logits
        logits.square().mean().backward()
        return logits.detach(), x.grad

    stock_logits, stock_grad = run()
    with dual_layout.dual_layout(blocks) as copied:
        assert copied == sum(m.weight.numel() * 4 for m in blocks.modules() if isinstance(m, nn.Linear))
        dual_logits, dual_grad = run()
    torch.testing.assert_close(dual_logits, stock_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dual_grad, stock_grad, rtol=1e-4, atol=1e-6)
    for m in blocks.modules():
        if isinstance(m, nn.Linear):
            assert "forward" not in vars(m) and not hasattr(m, "_weight_t")
    again_logits, _ = run()
    assert torch.equal(again_logits, stock_logits)  # the stock path is back, bit for bit
