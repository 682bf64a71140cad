"""The stream RMS: one forward measures every layer, each layer's value as measured alone."""

from __future__ import annotations

import math

from ltvlib import stream_scale
from ltvlib.inject import record_residual
from ltvlib.prompts import encode_prompts, pad_left
from ltvlib.stream_scale import site_stream_rms
from ltvlib.tasks import load_splits


def test_every_layer_from_one_forward_equals_a_direct_measurement(tiny, monkeypatch, tmp_path):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(stream_scale, "_MEMORY", {})
    calls = {"n": 0}
    forward = tiny.model.forward

    def counting(*args, **kwargs):
        calls["n"] += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny.model, "forward", counting)
    splits = load_splits("antonym", n_train=48, n_val=16)
    both = site_stream_rms(tiny, splits.task, splits.train, [2, 0], [-1, -2])
    one = site_stream_rms(tiny, splits.task, splits.train, [1], [-1, -2])
    assert calls["n"] == 1  # the second request is served by the first forward
    rows = encode_prompts(tiny.tokenizer, splits.task, list(splits.train)[:32]).full_rows()
    ids, mask = pad_left(rows, tiny.tokenizer.pad_token_id, tiny.device)
    with record_residual(tiny, [0, 1, 2]) as rec:
        forward(input_ids=ids, attention_mask=mask)
    def direct(layer, back):
        h = rec[layer][:, -back].double()  # left padding: the last columns are every row's last tokens
        return math.sqrt(float(h.pow(2).mean()))
    expected = (direct(2, 1), direct(2, 2), direct(0, 1), direct(0, 2))
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(both, expected))
    assert math.isclose(one[0], direct(1, 1), rel_tol=1e-6)
