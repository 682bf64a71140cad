"""``train_ltv_seeds(lm, task, seeds, ...)``: the same call as ``train_ltv(lm, task, seeds=seeds, ...)``.

It passes its arguments through and adds nothing: :func:`ltvlib.ltv.train_ltv` is the one trainer, and it steps
several seeds as rows of one batch itself (with zero-shot prompts and cached prefixes; otherwise one after
another), each seed's steps those of ``train_ltv(seed=s)`` within float tolerance (see ``train_ltv`` on runs
that amplify rounding). New code calls
``train_ltv(..., seeds=[...])``.
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
    """``train_ltv(lm, task, seeds=list(seeds), ...)`` with the same arguments: one result per seed, in the order
    of ``seeds`` (see :func:`ltvlib.ltv.train_ltv`). Unlike ``train_ltv`` it shows no progress bar by default."""
    return train_ltv(lm, task, seeds=list(seeds), layers=layers, positions=positions, recipe=recipe, splits=splits,
                     n_train=n_train, n_val=n_val, cache=cache, progress=progress)
