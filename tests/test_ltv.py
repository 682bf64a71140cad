"""LTV training: both recipes lower the loss, seeds are reproducible, results round-trip, errors are loud."""

from __future__ import annotations

import pytest
import torch

from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.ltv import (
    FAST_RECIPE,
    PAPER_RECIPE,
    LearnedTaskVector,
    TrainingDivergedError,
    train_ltv,
    with_config,
)
from ltvlib.tasks import load_splits

SMALL = {"n_train": 48, "n_val": 16}


def _splits():
    return load_splits("antonym", **SMALL)


def _first_loss(ltv: LearnedTaskVector, k: int = 3) -> float:
    losses = [c["loss"] for c in ltv.curve if "loss" in c]
    return sum(losses[:k]) / k


def _last_loss(ltv: LearnedTaskVector, k: int = 3) -> float:
    losses = [c["loss"] for c in ltv.curve if "loss" in c]
    return sum(losses[-k:]) / k


@pytest.mark.parametrize(
    "config",
    [
        with_config(PAPER_RECIPE, epochs=2, samples_per_epoch=24, patience=5, lr=5e-2),
        with_config(FAST_RECIPE, epochs=4, samples_per_epoch=32, batch_size=8, patience=5, lr=5e-2),
    ],
    ids=["paper", "fast"],
)
def test_recipes_lower_the_loss(tiny, config):
    ltv = train_ltv(tiny, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)
    assert ltv.steps == config.epochs * -(-config.samples_per_epoch // config.batch_size)
    assert _last_loss(ltv) < _first_loss(ltv)
    assert ltv.vectors.shape == (1, tiny.d_model)


def test_several_layers_and_positions_and_shots(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16, batch_size=8, demo_sets=2)
    ltv = train_ltv(llama, "antonym", layers=[0, 2], positions=[-2, -1], shots=2, recipe=config,
                    splits=_splits(), progress=False)
    assert ltv.vectors.shape == (4, llama.d_model)
    assert [(e.layer, e.position) for e in ltv.edits()] == [(0, -2), (0, -1), (2, -2), (2, -1)]


def test_same_seed_same_vector_other_seed_other_vector(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16, batch_size=8)
    a = train_ltv(llama, "antonym", layers=[1], recipe=config, seed=3, splits=_splits(), progress=False)
    b = train_ltv(llama, "antonym", layers=[1], recipe=config, seed=3, splits=_splits(), progress=False)
    c = train_ltv(llama, "antonym", layers=[1], recipe=config, seed=4, splits=_splits(), progress=False)
    assert torch.equal(a.vectors, b.vectors)
    assert not torch.equal(a.vectors, c.vectors)


def test_save_load_round_trip(llama, tmp_path):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8)
    ltv = train_ltv(llama, "antonym", layers=[2], recipe=config, splits=_splits(), progress=False)
    path = ltv.save(tmp_path / "v.safetensors")
    back = LearnedTaskVector.load(path)
    assert torch.equal(back.vectors, ltv.vectors)
    assert back.metadata() == ltv.metadata()
    # the loaded vector evaluates like the original
    es = EvalSet(llama, "antonym", _splits().test[:8])
    assert evaluate(es, back.edits()).correct == evaluate(es, ltv.edits()).correct


def test_nan_loss_stops_with_clear_error(llama):
    config = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=8, batch_size=8, init_range=float("inf"))
    with pytest.raises(TrainingDivergedError, match="diverged at step 0: loss=nan"):
        train_ltv(llama, "antonym", layers=[1], recipe=config, splits=_splits(), progress=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"layers": [9]}, "layer 9 is out of range"),
        ({"positions": [-99]}, "position -99 is outside the prompt"),
        ({"recipe": "slow"}, "unknown recipe 'slow'"),
    ],
)
def test_bad_arguments_name_the_value(llama, kwargs, match):
    with pytest.raises(ValueError, match=match):
        train_ltv(llama, "antonym", splits=_splits(), progress=False, **kwargs)


def test_unknown_task(llama):
    with pytest.raises(ValueError, match="unknown task 'antonyms'"):
        train_ltv(llama, "antonyms", progress=False)


def test_k_shot_queries_keep_one_block_that_never_shows_them(llama):
    """With k-shot training each query always uses the same demonstration block (so its own prefix is cached
    once), and no block contains its own queries."""
    from ltvlib.ltv import _training_prompts
    from ltvlib.tasks import get_task

    task, train = get_task("antonym"), list(_splits().train)
    data = _training_prompts(llama, task, train, shots=3, n_sets=4, tail=1, seed=0, first_layer=0)
    assert sorted(i for g in data.groups for i in g) == list(range(len(train)))
    from ltvlib.prompts import encode_prompts

    queries = encode_prompts(llama.tokenizer, task, train).rows  # each query's own tokens, "Q: x\nA:"

    def contains(seq: list[int], part: list[int]) -> bool:
        return any(seq[j : j + len(part)] == part for j in range(len(seq) - len(part) + 1))

    for s, group in enumerate(data.groups):
        assert len(data.runners[s]) == len(group)
        shared = list(data.runners[s].prompts.shared)
        shown = [i for i, q in enumerate(queries) if contains(shared, list(q))]
        assert len(shown) == 3  # the check below can see the demonstrations
        assert not set(shown) & set(group)
