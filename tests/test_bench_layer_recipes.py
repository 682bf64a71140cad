"""bench/layer_recipes.py: recipe names stand for the configs they say."""

from __future__ import annotations

import pytest

from ltvlib.ltv import FAST_RECIPE, FAST_REFERENCE_RMS, PAPER_RECIPE
from tests.bench_scripts import load_bench

layer_recipes = load_bench("layer_recipes")


@pytest.mark.parametrize(("name", "lr", "weight"), [
    ("default", FAST_RECIPE.lr, FAST_RECIPE.lr_final_stream_weight),
    ("lr*3", 3 * FAST_RECIPE.lr, FAST_RECIPE.lr_final_stream_weight),
    ("lr/3", FAST_RECIPE.lr / 3, FAST_RECIPE.lr_final_stream_weight),
    ("lr*0.5", FAST_RECIPE.lr / 2, FAST_RECIPE.lr_final_stream_weight),
    ("site*27", 2.7 / FAST_REFERENCE_RMS, 0.0),  # the default before 2026-12-03
    ("last*9", 0.9 / FAST_REFERENCE_RMS, 1.0),
])
def test_scaled_recipes_change_only_the_learning_rate_and_its_stream(name, lr, weight):
    config = layer_recipes.recipe(name)
    assert config.lr == pytest.approx(lr, rel=1e-12) and config.lr_final_stream_weight == weight
    assert config.init_range == FAST_RECIPE.init_range and config.epochs == FAST_RECIPE.epochs


def test_the_default_is_last_times_9_and_paper_is_the_released_recipe():
    assert layer_recipes.recipe("last*9").lr == pytest.approx(FAST_RECIPE.lr, rel=1e-12)
    assert layer_recipes.recipe("paper") is PAPER_RECIPE


@pytest.mark.parametrize("name", ["site/3", "lr*0", "x9", "lr*-1", "fast"])
def test_an_unknown_recipe_names_what_is_allowed(name):
    with pytest.raises(SystemExit, match="allowed: default, paper, lr\\*N"):
        layer_recipes.recipe(name)


def test_named_layers_resolve_and_bad_ones_stop():
    assert [layer_recipes.resolve_layer(s, 30) for s in ("early", "middle", "last", "7")] == [5, 15, 29, 7]
    with pytest.raises(SystemExit, match="out of range"):
        layer_recipes.resolve_layer("30", 30)
