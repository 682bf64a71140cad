"""Run profiles: how much data and compute a chapter spends.

- ``smoke``: seconds per chapter; checks that everything runs (tests, CI). Numbers are not meaningful.
- ``cpu`` (default): the book as built on a 2-core CPU with the embedded model; fewer test queries and a
  layer subset, every claim still measured.
- ``paper``: the paper's sizes (600/400 train/validation, full test sets, every layer), for a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ltv import FAST_RECIPE, TrainConfig, with_config
from .tasks import PAPER_TASKS


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
        recipe: the LTV training config (``paper`` lets the fast recipe's early stopping see all 400
            validation queries, as the paper's recipe does).
        n_sweep_layers: layers in a layer sweep (None = every layer).
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


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke", tasks=("antonym", "sst2"), ltv_tasks=("antonym", "sst2"), n_train=32, n_val=16, n_test=16, n_test_icl=8, icl_shots=(2,),
        icl_demo_sets=2, recipe=with_config(FAST_RECIPE, epochs=1, samples_per_epoch=32), n_sweep_layers=3,
    ),
    "cpu": Profile(
        name="cpu", tasks=PAPER_TASKS, ltv_tasks=PAPER_TASKS, n_train=600, n_val=200, n_test=200, n_test_icl=200, icl_shots=(5, 10),
        icl_demo_sets=8, recipe=FAST_RECIPE, n_sweep_layers=10,
    ),
    "paper": Profile(
        name="paper", tasks=PAPER_TASKS, ltv_tasks=PAPER_TASKS, n_train=600, n_val=400, n_test=None, n_test_icl=None, icl_shots=(5, 10),
        icl_demo_sets=None, recipe=with_config(FAST_RECIPE, val_queries=None), n_sweep_layers=None,
    ),
}


def get_profile(name: str) -> Profile:
    """The profile called ``name``; raises ``ValueError`` listing the allowed names."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; allowed: {', '.join(PROFILES)}")
    return PROFILES[name]


def sweep_layers(n_layers: int, profile: Profile) -> list[int]:
    """Evenly spread layers from 0 to ``n_layers - 1`` (all of them when the profile says so)."""
    k = profile.n_sweep_layers
    if k is None or k >= n_layers:
        return list(range(n_layers))
    return sorted({round(i * (n_layers - 1) / (k - 1)) for i in range(k)})
