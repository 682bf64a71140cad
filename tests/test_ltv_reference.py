"""One run through the trainer that steps several runs as rows of one batch is the run the trainer made before
it could: vectors and curves bit for bit (tests/data/ltv_reference.pt, see tests/ltv_reference_cases.py)."""

from __future__ import annotations

import pytest
import torch

from ltvlib.ltv import train_ltv
from tests.ltv_reference_cases import CASES, REFERENCE, outcome, splits


@pytest.mark.parametrize("name", list(CASES))
def test_one_run_is_bit_identical_to_the_reference(request, name):
    fixture, task, kwargs = CASES[name]
    lm = request.getfixturevalue(fixture)
    want = torch.load(REFERENCE, weights_only=False)[name]
    got = outcome(train_ltv(lm, task, splits=splits(task), progress=False, **kwargs))
    assert torch.equal(got["vectors"], want["vectors"])
    assert got["curve"] == want["curve"]
    assert {k: v for k, v in got.items() if k not in ("vectors", "curve")} == \
        {k: v for k, v in want.items() if k not in ("vectors", "curve")}
