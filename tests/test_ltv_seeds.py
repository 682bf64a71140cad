"""Seeds trained together (train_ltv(seeds=...), ltvlib.ltv_seeds passes through): each seed is the run
train_ltv(seed=s) makes, within float tolerance."""

from __future__ import annotations

import pytest
import torch

from ltvlib.ltv import FAST_RECIPE, PAPER_RECIPE, TrainingDivergedError, train_ltv, with_config
from ltvlib.ltv_seeds import train_ltv_seeds
from ltvlib.tasks import load_splits
from tests.same_run import assert_same_run


def _splits(task="antonym"):
    return load_splits(task, n_train=48, n_val=16)


@pytest.mark.parametrize("layers, positions", [([1], (-1,)), ([0, 2], (-2, -1))])
def test_each_seed_is_train_ltvs_run(tiny, layers, positions):
    config = with_config(FAST_RECIPE, epochs=3, samples_per_epoch=24, batch_size=8, lr=3.0, patience=5,
                         retries_without_progress=0)
    together = train_ltv_seeds(tiny, "antonym", [0, 5, 2], layers=layers, positions=positions, recipe=config,
                               splits=_splits())
    assert [t.seed for t in together] == [0, 5, 2]
    for t in together:
        alone = train_ltv(tiny, "antonym", layers=layers, positions=positions, recipe=config, seed=t.seed,
                          splits=_splits(), progress=False)
        assert_same_run(t, alone)
    assert not torch.equal(together[0].vectors, together[1].vectors)
    # the joint run's wall time
    assert len({t.training.seconds for t in together}) == 1 and together[0].training.seconds > 0


def test_seeds_stop_early_and_retry_each_on_their_own(llama, monkeypatch):
    """With patience 1 some seeds stop after an epoch or fail to train (then retried at a third of the learning
    rate) while the others go on: whatever each does, it is what train_ltv does with that seed. (16 validation
    queries never pass the learned rule's interval: here a run learns when its score rises above its start's.)"""
    from ltvlib import ltv as ltv_module

    monkeypatch.setattr(ltv_module, "learned_rule", lambda accuracy, n, no_vector, majority: (True, float("nan")))
    # lr 0.3 of the stream's RMS: a step at which these seeds part ways on the tiny Llama
    config = with_config(FAST_RECIPE, epochs=4, samples_per_epoch=16, batch_size=8, lr=0.3, patience=1,
                         patience_after_gain=False, retries_without_progress=1, lr_stream_statistic="rms")
    seeds = [0, 1, 2, 5]
    together = train_ltv_seeds(llama, "sst2", seeds, layers=[1], recipe=config, splits=_splits("sst2"))
    alone = [train_ltv(llama, "sst2", layers=[1], recipe=config, seed=s, splits=_splits("sst2"), progress=False)
             for s in seeds]
    for t, a in zip(together, alone):
        assert_same_run(t, a)
    # the case this test is for: the seeds did not all run the same number of steps or attempts
    runs = [(a.training.steps, a.training.attempts) for a in alone]
    assert len(set(runs)) > 1, runs


@pytest.mark.parametrize("seeds, match", [([], "distinct seeds"), ([1, 1], "distinct seeds")])
def test_bad_arguments_name_the_value(llama, seeds, match):
    with pytest.raises(ValueError, match=match):
        train_ltv_seeds(llama, "antonym", seeds, layers=[1], recipe=FAST_RECIPE, splits=_splits())
    with pytest.raises(ValueError, match="not both"):
        train_ltv(llama, "antonym", seed=3, seeds=[1, 2], layers=[1], splits=_splits())


@pytest.mark.parametrize("recipe, shots", [(with_config(PAPER_RECIPE, epochs=1, samples_per_epoch=4), 0),
                                           (with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=4), 2)],
                         ids=["paper", "k-shot"])
def test_seeds_that_cannot_share_prompts_run_one_after_another(llama, recipe, shots):
    """Without cached prefixes, or with demonstrations (each seed its own blocks), each seed is exactly its own
    train_ltv run."""
    together = train_ltv(llama, "antonym", seeds=[2, 0], layers=[1], shots=shots, recipe=recipe, splits=_splits(),
                         progress=False)
    for t in together:
        alone = train_ltv(llama, "antonym", seed=t.seed, layers=[1], shots=shots, recipe=recipe, splits=_splits(),
                          progress=False)
        assert torch.equal(t.vectors, alone.vectors) and t.training.curve == alone.training.curve


def test_a_diverging_seed_is_named(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8, max_loss=1e-6)
    with pytest.raises(TrainingDivergedError, match="seed 4"):
        train_ltv_seeds(llama, "antonym", [4, 7], layers=[1], recipe=config, splits=_splits())
