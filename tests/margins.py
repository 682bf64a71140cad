"""How far predictions are from a tie, so tests may compare argmax results of two computation paths exactly.

Two exact paths (full forwards, cached prefixes, other batch compositions) give logits that agree only to
float rounding: within 1e-4 on the tiny models (``tests/test_forward.py`` asserts that bound). Their top-1
tokens, and so accuracies, can differ only where the top two logits are closer than twice that. A test that
compares accuracies of two paths exactly first asserts that no prediction is that close to a tie; the margin
is a property of the fixed model, data and seed, equal on every machine up to the same rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ltvlib.evaluate import EvalSet
from ltvlib.inject import VectorEdit

#: Twice the largest logit difference between two exact paths on the tiny models (1e-4, tests/test_forward.py).
PATH_GAP = 2e-4


@torch.no_grad()
def smallest_margin(evalset: EvalSet, edits: Sequence[VectorEdit] = ()) -> float:
    """Smallest gap between the two highest last-token logits over ``evalset``'s prompts, over the whole
    vocabulary and, for a classification task, among the label tokens too."""
    gaps = []
    for index, runner in evalset.groups:
        last = runner.run(range(len(index)), edits)[0][:, -1].float()
        top = last.topk(2, dim=-1).values
        gaps.append(float((top[:, 0] - top[:, 1]).min()))
        if evalset.label_first is not None:
            top = last[:, evalset.label_first].topk(2, dim=-1).values
            gaps.append(float((top[:, 0] - top[:, 1]).min()))
    return min(gaps)
