"""Several seeds of one learned task vector trained together: ``train_ltv(..., seeds=[...])``.

Kept as a pass-through for callers of :func:`train_ltv_seeds`; the trainer itself (:func:`ltvlib.ltv.train_ltv`)
steps the seeds as rows of one batch (zero-shot prompts, cached prefixes; otherwise one after another), each seed
the run ``train_ltv(seed=s)`` makes within float tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .ltv import LearnedTaskVector, TrainConfig, train_ltv
from .tasks import Task, TaskSplits

if TYPE_CHECKING:
    from .models import LoadedModel


def train_ltv_seeds(
    lm: LoadedModel,
    task: Task | str,
    seeds: Sequence[int],
    *,
    layers: Sequence[int] | None = None,
    positions: Sequence[int] = (-1,),
    recipe: str | TrainConfig = "fast",
    splits: TaskSplits | None = None,
    n_train: int = 600,
    n_val: int = 400,
    cache: bool = False,
    progress: bool = False,
) -> list[LearnedTaskVector]:
    """``train_ltv(lm, task, seeds=seeds, ...)``: one result per seed, in order (see :func:`ltvlib.ltv.train_ltv`)."""
    return train_ltv(lm, task, seeds=list(seeds), layers=layers, positions=positions, recipe=recipe, splits=splits,
                     n_train=n_train, n_val=n_val, cache=cache, progress=progress)
