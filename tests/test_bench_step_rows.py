"""bench/step_rows.py: the weights a step streams, and the line fitted to its times."""

from __future__ import annotations

import pytest

from ltvlib.sites import block, final_norm, unembedding
from tests.bench_scripts import load_bench

step_rows = load_bench("step_rows")


def test_streamed_bytes_are_the_blocks_from_the_layer_the_final_norm_and_the_unembedding(tiny):
    def size(module):
        return sum(p.numel() * p.element_size() for p in module.parameters())

    head = unembedding(tiny).weight
    norm = size(final_norm(tiny))
    for layer in range(tiny.n_layers):
        blocks = sum(size(block(tiny, i)) for i in range(layer, tiny.n_layers))
        assert step_rows.streamed_bytes(tiny, layer) == blocks + norm + head.numel() * head.element_size()
    assert step_rows.streamed_bytes(tiny, 0) > step_rows.streamed_bytes(tiny, tiny.n_layers - 1)


def test_fit_recovers_a_line_and_its_intercept():
    a, b = step_rows.fit([1, 4, 16, 48], [0.03 + 0.01 * n for n in (1, 4, 16, 48)])
    assert a == pytest.approx(0.03) and b == pytest.approx(0.01)
