"""Several seeds of one learned task vector trained together: their queries are rows of one batch per step.

Where the vectors go: as :func:`ltvlib.ltv.train_ltv`'s, one per (layer, position), *added* to the residual
stream entering block ``layer`` at prompt position ``position``. Each seed is the run ``train_ltv(seed=s)`` makes
(its own initial draw, query sampler, optimiser, learning-rate schedule, early stopping and retries); what the
seeds share is each step's forward and backward: the active seeds' queries go through the model as one batch,
each row carrying its own seed's vector, and the loss is the sum of the seeds' own losses, so each vector gets
its own gradient. The model's matrix products run at a better rate on more rows: three seeds at SmolLM2-135M's
middle layer took 1/1.28 of the time of one after another (TREC 1.66x, SST-2 1.32x, Antonym 1.04x; measured,
``bench/seeds_together.py``, bench/RESULTS.md "session 24"). Validation stays per seed (as in ``train_ltv``).

The vectors equal ``train_ltv``'s within float tolerance, not bitwise: a batch of other rows sums in another
order. Zero-shot prompts only (with demonstrations each seed draws its own blocks, i.e. other prompts).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor

from .evaluate import evaluate
from .forward import tail_needed
from .inject import VectorEdit, resolve_positions
from .ltv import (
    LearnedTaskVector,
    TrainConfig,
    TrainingDivergedError,
    _BatchSampler,
    _grid_edits,
    _training_prompts,
    _validation_set,
    answer_loss,
    resolve_recipe,
    step_scales,
    validation_metric,
)
from .prompts import answer_ids, encode_prompts
from .sites import check_layer
from .stream_scale import site_stream_rms
from .tasks import Task, TaskSplits, get_task, load_splits

if TYPE_CHECKING:
    from .models import LoadedModel


@dataclass
class _SeedRun:
    """One seed's attempt: what ``ltv._train_attempt`` keeps in local variables."""

    seed: int
    lr_factor: float
    sampler: _BatchSampler
    params: list[Tensor]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    effective_lr: tuple[float, ...]
    curve: list[dict[str, float | None]] = field(default_factory=list)
    accuracies: dict[int, float] = field(default_factory=dict)
    step: int = 0
    stale: int = 0
    gained: bool = False
    start_score: float = float("nan")
    best_score: float = float("nan")
    best: Tensor | None = None
    best_epoch: int = 0
    best_step: int = 0
    active: bool = True

    def current(self) -> Tensor:
        return torch.stack([p.detach() for p in self.params])


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
) -> list[LearnedTaskVector]:
    """Train ``train_ltv(lm, task, seed=s, ...)`` for every ``s`` in ``seeds`` at once (zero-shot prompts).

    Each result is that seed's own run (its vectors, curve, steps, validation scores, attempts), equal to
    :func:`~ltvlib.ltv.train_ltv`'s within float tolerance; ``seconds`` is the wall time of the joint run, the
    same for every seed. No on-disk cache: use ``train_ltv(..., cache=True)`` per seed for that.

    Args:
        lm, task, layers, positions, recipe, splits, n_train, n_val: as :func:`~ltvlib.ltv.train_ltv`.
        seeds: distinct seeds, at least one; results come in this order.

    Raises:
        ValueError: no seeds or a repeated one, a recipe without prefix caching (the released recipe runs one
            full forward per query), an unknown recipe, a layer or position out of range.
        TrainingDivergedError: a seed's loss became NaN/inf or exceeded ``config.max_loss`` (named).
    """
    start = time.perf_counter()
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"train_ltv_seeds needs distinct seeds, at least one; got {seeds!r}")
    config = resolve_recipe(recipe)
    if not config.prefix_cache:
        raise ValueError(f"train_ltv_seeds batches cached prefixes; recipe {config.recipe!r} has prefix_cache=False "
                         "(train its seeds with train_ltv)")
    scores: dict[int, list[float]] = {s: [] for s in seeds}
    factors = {s: 1.0 for s in seeds}
    results: dict[int, LearnedTaskVector] = {}
    pending = list(seeds)
    while pending:
        for ltv in _attempt(lm, task, pending, factors, layers=layers, positions=positions, config=config,
                            splits=splits, n_train=n_train, n_val=n_val):
            scores[ltv.seed].append(ltv.best_val_score)
            results[ltv.seed] = ltv
        # the retry rule of ltv._train_ltv, per seed
        pending = [s for s in pending
                   if not results[s].trained and len(scores[s]) <= config.retries_without_progress]
        for s in pending:
            factors[s] *= config.retry_lr_factor
    seconds = time.perf_counter() - start
    for s in seeds:
        ltv = results[s]
        ltv.attempts, ltv.attempt_scores, ltv.seconds = len(scores[s]), tuple(scores[s]), seconds
    return [results[s] for s in seeds]


def _attempt(
    lm: LoadedModel, task: Task | str, seeds: list[int], factors: dict[int, float], *, layers: Sequence[int] | None,
    positions: Sequence[int], config: TrainConfig, splits: TaskSplits | None, n_train: int, n_val: int,
) -> list[LearnedTaskVector]:
    """One attempt of every seed in ``seeds`` (learning rate ``config.lr * factors[seed]``), stepped together."""
    task = get_task(task)
    layers = tuple(check_layer(l, lm.n_layers) for l in (layers if layers is not None else [lm.middle_layer]))
    positions = tuple(positions)
    splits = splits or load_splits(task, seed=0, n_train=n_train, n_val=n_val)
    train, val = list(splits.train), list(splits.validation)[: config.val_queries]
    metric = validation_metric(config, task)
    if metric == "balanced_accuracy" and not task.labels:
        raise ValueError(f"early_stopping='balanced_accuracy' needs a classification task; {task.name!r} has no labels")
    tail = tail_needed(positions)
    answers = answer_ids(lm.tokenizer, task, [e.output for e in train])
    shortest = min(encode_prompts(lm.tokenizer, task, train).rows, key=len)
    resolve_positions(torch.ones(1, len(shortest)), positions)
    first = min(layers)
    # zero-shot: one runner, and neither the prompts nor the validation set depend on the seed
    data = _training_prompts(lm, task, train, 0, 1, tail, seeds[0], first)
    val_set = _validation_set(lm, task, val, train, 0, 1, seeds[0], tail, first)
    rms = site_stream_rms(lm, task, train, layers, positions) if config.relative_to_stream else None
    scales = rms or (1.0,) * (len(layers) * len(positions))
    lr_scales = step_scales(config, lm, task, train, layers, positions, site_rms=rms)
    steps_per_epoch = math.ceil(config.samples_per_epoch / config.batch_size)
    total = config.epochs * steps_per_epoch

    runs = []
    for seed in seeds:  # the order of ltv._train_attempt's draws, per seed
        rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
        lr = config.lr * factors[seed]
        draw = torch.rand(len(scales), lm.d_model, generator=gen) * 2 - 1
        params = [(draw[i] * (config.init_range * s)).to(lm.device).requires_grad_(True) for i, s in enumerate(scales)]
        opt = torch.optim.AdamW([{"params": [p], "lr": lr * s} for p, s in zip(params, lr_scales)],
                                lr=lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / max(total, 1)))
        runs.append(_SeedRun(seed, factors[seed], _BatchSampler(data.groups, rng), params, opt, sched,
                             tuple(lr * s for s in lr_scales)))

    def validate(run: _SeedRun, epoch: int) -> float:
        with torch.no_grad():
            r = evaluate(val_set, _grid_edits(run.current(), layers, positions))
        score = r.accuracy if metric == "accuracy" else r.balanced_accuracy
        assert score is not None  # balanced accuracy without labels raised above
        run.curve.append({"epoch": epoch, "val_accuracy": r.accuracy, "val_balanced_accuracy": r.balanced_accuracy,
                          "val_score": score, "step": run.step})
        run.accuracies[epoch] = r.accuracy
        return score

    for run in runs:
        run.start_score = run.best_score = validate(run, 0)
        run.best = run.current().clone()
    sites = [(l, p) for l in layers for p in positions]
    for epoch in range(1, config.epochs + 1):
        active = [r for r in runs if r.active]
        if not active:
            break
        for b in range(steps_per_epoch):
            size = min(config.batch_size, config.samples_per_epoch - b * config.batch_size)
            local: list[int] = []
            for run in active:
                s, idx = run.sampler.batch(size)
                assert s == 0  # zero-shot: one group
                local += idx
            batch_answers = [answers[data.groups[0][j]] for j in local]
            # each row carries its own seed's vector: (rows, d_model) per site
            edits = [VectorEdit(l, p, torch.cat([run.params[i].expand(size, -1) for run in active]))
                     for i, (l, p) in enumerate(sites)]
            logits, valid = data.runners[0].run(local, edits, answers=batch_answers)
            losses = [answer_loss(logits[k * size:(k + 1) * size], batch_answers[k * size:(k + 1) * size],
                                  valid[k * size:(k + 1) * size]) for k in range(len(active))]
            for run, loss in zip(active, losses):
                if not torch.isfinite(loss) or loss.item() > config.max_loss:
                    raise TrainingDivergedError(
                        f"LTV training of task {task.name!r}, seed {run.seed}, diverged at step {run.step}: "
                        f"loss={loss.item()} (lr={run.sched.get_last_lr()[0]:.3g}); try a smaller learning rate"
                    )
            for run in active:
                run.opt.zero_grad(set_to_none=True)
            cast(Tensor, sum(losses)).backward()  # each seed's vectors get only their own loss's gradient
            for run, loss in zip(active, losses):
                run.opt.step()
                run.sched.step()
                run.step += 1
                run.curve.append({"step": run.step, "loss": loss.item(),
                                  "lr": cast(float, run.sched.get_last_lr()[0])})
        for run in active:
            score = validate(run, epoch)
            if score > run.best_score:
                run.best_score, run.best, run.best_epoch, run.best_step = score, run.current().clone(), epoch, run.step
                run.stale, run.gained = 0, True
            elif run.gained or not config.patience_after_gain:
                run.stale += 1
                if run.stale >= config.patience:
                    run.active = False
    return [
        LearnedTaskVector(
            vectors=cast(Tensor, run.best).cpu(), layers=layers, positions=positions, model=lm.name, task=task.name,
            recipe=config.recipe, seed=run.seed, shots=0, config=config, curve=run.curve,
            best_val_accuracy=run.accuracies[run.best_epoch], steps=run.step,
            start_val_accuracy=run.accuracies[0], val_metric=metric, best_val_score=run.best_score,
            start_val_score=run.start_score, steps_to_best=run.best_step, trained=run.best_score > run.start_score,
            stream_rms=tuple(rms) if rms is not None else None, effective_lr=run.effective_lr,
            effective_init=tuple(config.init_range * s for s in scales),
        )
        for run in runs
    ]
