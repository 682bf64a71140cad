"""One run through the trainer that steps several runs as rows of one batch is the run the trainer made before
it could (tests/data/ltv_reference.pt, see tests/ltv_reference_cases.py): the same steps, the same validation
accuracies and, to float precision, the same vectors and losses. On the machine that wrote the reference they
are equal bit for bit; another CPU's vector instructions round sums differently (losses moved in the 7th digit
on CI, the recorded step sizes in the 8th on another machine), so the floats are compared at a relative 1e-5."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from ltvlib.ltv import train_ltv
from tests.ltv_reference_cases import CASES, REFERENCE, outcome, splits

RTOL = 1e-5
ROUNDED = ("loss", "lr")
"""Curve fields computed from float sums (the step size scales with the stream's RMS), compared at ``RTOL``."""


def _close(got: Any, want: Any) -> bool:
    """Equal, or floats equal to ``RTOL`` (NaN equal to NaN), through dicts, lists and tuples."""
    if isinstance(want, float) and isinstance(got, float):
        return (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, rel_tol=RTOL, abs_tol=1e-9)
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_close(got[k], want[k]) for k in want)
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        return len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want))
    return bool(got == want)


def test_close_tells_a_real_difference() -> None:
    assert _close({"loss": [1.0, 2.0000001]}, {"loss": [1.0, 2.0]})
    assert not _close({"loss": [1.0, 2.001]}, {"loss": [1.0, 2.0]})
    assert not _close({"step": 3}, {"step": 4})
    assert _close(float("nan"), float("nan"))


@pytest.mark.parametrize("name", list(CASES))
def test_one_run_matches_the_reference(request, name):
    fixture, task, kwargs = CASES[name]
    lm = request.getfixturevalue(fixture)
    want = torch.load(REFERENCE, weights_only=False)[name]
    got = outcome(train_ltv(lm, task, splits=splits(task), progress=False, **kwargs))
    scale = float(want["vectors"].abs().max())
    torch.testing.assert_close(got["vectors"], want["vectors"], rtol=RTOL, atol=RTOL * scale)
    assert [{k: v for k, v in c.items() if k not in ROUNDED} for c in got["curve"]] == \
        [{k: v for k, v in c.items() if k not in ROUNDED} for c in want["curve"]]  # steps, epochs, accuracies exact
    assert _close(got["curve"], want["curve"])
    rest = [k for k in want if k not in ("vectors", "curve")]
    assert _close({k: got[k] for k in rest}, {k: want[k] for k in rest})
