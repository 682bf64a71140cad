"""One check shared by the tests of runs trained together (seeds, tasks): a run equals the one trained alone."""

from __future__ import annotations

import pytest
import torch


def assert_same_run(together, alone) -> None:
    """``together`` (trained with other runs as rows of one step) is the run ``alone`` within float tolerance: the
    same task and seed, steps, attempts (and their steps), outcome, validation curve, losses and vectors (within a
    float tolerance of the vector's largest entry: other rows sum in another order), and the same step sizes."""
    assert (together.task, together.seed) == (alone.task, alone.seed)
    assert together.training.steps == alone.training.steps and together.training.attempts == alone.training.attempts
    assert together.training.attempt_steps == alone.training.attempt_steps
    assert together.training.best_val_accuracy == alone.training.best_val_accuracy
    assert together.training.learned == alone.training.learned and together.training.trained == alone.training.trained
    assert together.training.steps_to_best == alone.training.steps_to_best
    assert together.training.no_vector_val_accuracy == alone.training.no_vector_val_accuracy
    assert [c.get("val_score") for c in together.training.curve] == [c.get("val_score") for c in alone.training.curve]
    torch.testing.assert_close(torch.tensor([c["loss"] for c in together.training.curve if "loss" in c]),
                               torch.tensor([c["loss"] for c in alone.training.curve if "loss" in c]),
                               rtol=1e-4, atol=1e-5)
    scale = float(alone.vectors.abs().max())
    torch.testing.assert_close(together.vectors, alone.vectors, rtol=1e-3, atol=1e-4 * scale)
    assert together.training.effective_lr == pytest.approx(alone.training.effective_lr)
    assert together.training.effective_init == pytest.approx(alone.training.effective_init)
    assert together.training.stream_rms == pytest.approx(alone.training.stream_rms)
