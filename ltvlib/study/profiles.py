"""Run profiles: how much data and compute a chapter spends.

- ``smoke``: seconds per chapter; checks that everything runs (tests, CI). Numbers are not meaningful.
- ``cpu`` (default): the book as built on a 2-core CPU with the embedded model; fewer test queries and a
  layer subset, every claim still measured.
- ``paper``: the paper's sizes (600/400 train/validation, full test sets, every layer) and the paper's
  released LTV recipe (:data:`~ltvlib.ltv.PAPER_RECIPE`: batch 1, lr 5e-3, full forwards), for a GPU.

Any profile can train with another recipe: ``get_profile("cpu", recipe="paper")`` (the released recipe at
the ``cpu`` sizes) or ``get_profile("paper", recipe="fast")`` (the paper's sizes with the book's fast
recipe, validating on all of the profile's validation queries as the paper's recipe does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..ltv import FAST_RECIPE, PAPER_RECIPE, RECIPES, TrainConfig, with_config
from ..tasks import PAPER_TASKS


@dataclass(frozen=True)
class Profile:
    """Sizes shared by the chapters.

    Attributes:
        name: smoke, cpu or paper.
        tasks: the tasks a chapter covers by default.
        ltv_tasks: the tasks whose LTVs the overview trains.
        n_train, n_val: LTV training and validation queries per task (the ``cpu`` profile validates on 200
            instead of the paper's 400: the long-prompt tasks' validation passes dominate training time).
        n_test: test queries per task (None = the whole test split).
        n_test_icl: test queries for k-shot evaluations, whose prompts are long.
        icl_shots: demonstration counts of the ICL references.
        icl_demo_sets: fixed demonstration blocks for k-shot evaluation (None = fresh demos per query).
        recipe: the LTV training config (``smoke``: a one-epoch fast recipe; ``cpu``: the fast recipe;
            ``paper``: the released recipe). Choose another with :func:`get_profile`'s ``recipe``.
        n_sweep_layers: layers in a layer sweep (None = every layer).
        headline_seeds: training seeds of the headline middle-layer LTVs of chapters 00 and 01 (offsets to a
            chapter's ``seed``; :func:`ltvlib.study.ltvs.headline_seeds`): ``cpu`` and ``paper`` train three, so
            an interval across seeds covers training noise as well as the test queries; later chapters reuse
            the same vectors from the cache.
    """

    name: str
    tasks: tuple[str, ...]
    ltv_tasks: tuple[str, ...]
    n_train: int
    n_val: int
    n_test: int | None
    n_test_icl: int | None
    icl_shots: tuple[int, ...]
    icl_demo_sets: int | None
    recipe: TrainConfig
    n_sweep_layers: int | None
    headline_seeds: tuple[int, ...] = (0,)


def profile_recipe(profile_name: str, recipe: str) -> TrainConfig:
    """The LTV recipe ``recipe`` (``"fast"`` or ``"paper"``) as the profile ``profile_name`` runs it.

    ``paper`` is always the released recipe as released. ``fast`` is :data:`~ltvlib.ltv.FAST_RECIPE`, with
    one epoch of 32 queries in ``smoke`` (seconds; numbers not meaningful) and validation on every
    validation query in ``paper`` (as the released recipe does)."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; allowed: {', '.join(RECIPES)}")
    if recipe == "paper":
        return PAPER_RECIPE
    if profile_name == "smoke":
        return with_config(FAST_RECIPE, epochs=1, samples_per_epoch=32)
    if profile_name == "paper":
        return with_config(FAST_RECIPE, val_queries=None)
    return FAST_RECIPE


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke", tasks=("antonym", "sst2"), ltv_tasks=("antonym", "sst2"), n_train=32, n_val=16, n_test=16, n_test_icl=8, icl_shots=(2,),
        icl_demo_sets=2, recipe=profile_recipe("smoke", "fast"), n_sweep_layers=3,
        headline_seeds=(0, 1),
    ),
    "cpu": Profile(
        name="cpu", tasks=PAPER_TASKS, ltv_tasks=PAPER_TASKS, n_train=600, n_val=200, n_test=200, n_test_icl=200, icl_shots=(5, 10),
        icl_demo_sets=8, recipe=profile_recipe("cpu", "fast"), n_sweep_layers=10,
        headline_seeds=(0, 1, 2),
    ),
    "paper": Profile(
        name="paper", tasks=PAPER_TASKS, ltv_tasks=PAPER_TASKS, n_train=600, n_val=400, n_test=None, n_test_icl=None, icl_shots=(5, 10),
        icl_demo_sets=None, recipe=profile_recipe("paper", "paper"), n_sweep_layers=None,
        headline_seeds=(0, 1, 2),
    ),
}


def get_profile(name: str, recipe: str | None = None) -> Profile:
    """The profile called ``name``, optionally with another LTV recipe.

    Args:
        name: ``smoke``, ``cpu`` or ``paper``.
        recipe: None: the profile's own (``fast`` for smoke and cpu, the released ``paper`` recipe for paper);
            ``"fast"`` or ``"paper"``: that recipe at the profile's sizes (:func:`profile_recipe`).

    Raises:
        ValueError: an unknown profile or recipe, naming it and the allowed values.
    """
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; allowed: {', '.join(PROFILES)}")
    if recipe is None:
        return PROFILES[name]
    config = profile_recipe(name, recipe)
    return PROFILES[name] if config == PROFILES[name].recipe else replace(PROFILES[name], recipe=config)


def sweep_layers(n_layers: int, profile: Profile) -> list[int]:
    """Evenly spread layers from 0 to ``n_layers - 1`` (all of them when the profile says so)."""
    k = profile.n_sweep_layers
    if k is None or k >= n_layers:
        return list(range(n_layers))
    return sorted({round(i * (n_layers - 1) / (k - 1)) for i in range(k)})
