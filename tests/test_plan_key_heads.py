"""Chapter 04's count (:func:`ltvlib.study.cost.ov_key_heads_cost`) against ``FlopCounterMode``: the key-head
experiment, the OV experiment and the four OV controls of one LTV on a tiny model, run as the chapter runs them
(from empty runner memos and result caches), within 10 % of what torch counts."""

from __future__ import annotations

import pytest
from models_fixtures import tiny_gemma3, tiny_llama

from ltvlib.ltv import FAST_RECIPE, train_ltv, with_config
from ltvlib.study.cost import key_head_experiment_cost, ov_key_heads_cost
from ltvlib.study.key_heads import key_head_experiment
from ltvlib.study.ov import ov_control_experiment, ov_experiment
from ltvlib.tasks import load_splits
from tests.test_plan import _check, _counted, _lengths, _shape

N_RANDOM, N_DRAWS = 3, 5


@pytest.mark.parametrize(("task", "build"), [("sst2", tiny_llama), ("antonym", tiny_llama), ("sst2", tiny_gemma3)])
def test_chapter_04_is_counted_per_learned_task(task, build, tmp_path, monkeypatch):
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = build(seed=70)
    splits = load_splits(task, seed=0, n_train=64, n_val=40)
    recipe = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16, retries_without_progress=0)
    ltv = train_ltv(lm, task, layers=[1], recipe=recipe, splits=splits, progress=False)
    queries, test = list(splits.validation[:24]), list(splits.test)[:70]  # two test batches: one padded alone

    def chapter() -> None:
        key_head_experiment(lm, ltv, queries, test, fraction=0.1, n_random=N_RANDOM, seed=0)
        ov_experiment(lm, ltv, queries, test)
        for path in ("ov", "mlp"):
            for variant in ("at |θ|", "paper"):
                ov_control_experiment(lm, ltv, test, n_draws=N_DRAWS, seed=0, variant=variant, path=path,
                                      queries=queries)

    measured, _ = _counted(chapter)
    lengths = _lengths(lm, task, test)
    estimate = ov_key_heads_cost(_shape(lm), lengths, 1, len(queries), len(test), N_RANDOM, N_DRAWS)
    _check(estimate.flops, measured, f"chapter 04 on {task}, {lm.name}")


def test_chapter_08_key_heads_are_counted(tmp_path, monkeypatch):
    """Chapter 08 runs the key-head experiment alone (its own number of random head sets)."""
    monkeypatch.setenv("LTV_CACHE_DIR", str(tmp_path))
    lm = tiny_llama(seed=71)
    splits = load_splits("sst2", seed=0, n_train=64, n_val=40)
    recipe = with_config(FAST_RECIPE, epochs=1, samples_per_epoch=16, retries_without_progress=0)
    ltv = train_ltv(lm, "sst2", layers=[1], recipe=recipe, splits=splits, progress=False)
    queries, test = list(splits.validation[:30]), list(splits.test)[:40]
    measured, _ = _counted(lambda: key_head_experiment(lm, ltv, queries, test, fraction=0.1, n_random=5, seed=0))
    estimate = key_head_experiment_cost(_shape(lm), _lengths(lm, "sst2", test), len(queries), len(test), 5)
    _check(estimate.flops, measured, "key heads, 5 random sets")
