"""Run profiles: ``paper`` trains with the released recipe, and any profile can take either recipe."""

from __future__ import annotations

import pytest

from ltvlib.ltv import FAST_RECIPE, PAPER_RECIPE
from ltvlib.study.profiles import PROFILES, get_profile


def test_each_profile_has_its_recipe():
    assert get_profile("paper").recipe == PAPER_RECIPE
    assert get_profile("cpu").recipe == FAST_RECIPE
    smoke = get_profile("smoke").recipe
    assert smoke.relative_to_stream and (smoke.epochs, smoke.samples_per_epoch) == (1, 32)


def test_any_profile_takes_either_recipe():
    assert get_profile("cpu", recipe="paper").recipe == PAPER_RECIPE
    assert get_profile("smoke", recipe="paper").recipe == PAPER_RECIPE
    fast_at_paper_sizes = get_profile("paper", recipe="fast")
    assert fast_at_paper_sizes.recipe.recipe == "fast" and fast_at_paper_sizes.recipe.val_queries is None
    assert fast_at_paper_sizes.n_val == PROFILES["paper"].n_val and fast_at_paper_sizes.n_test is None
    # the profile's own recipe asked for by name: the same profile object (same cache entries)
    assert get_profile("cpu", recipe="fast") is get_profile("cpu") is PROFILES["cpu"]
    assert get_profile("paper", recipe="paper") is PROFILES["paper"]
    assert get_profile("smoke", recipe="fast") is PROFILES["smoke"]


@pytest.mark.parametrize(("args", "match"), [(("gpu",), "unknown profile 'gpu'; allowed: smoke, cpu, paper"),
                                             (("cpu", "slow"), "unknown recipe 'slow'; allowed: paper, fast")])
def test_unknown_names_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        get_profile(*args)
