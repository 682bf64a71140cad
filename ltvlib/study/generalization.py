"""LTVs across tasks: similarity of vectors trained with several seeds, 2-D projections, cross-task transfer.

Every vector here is the paper's baseline LTV: one vector ``(d_model,)`` *added* to the residual stream entering
the middle block ``L // 2`` at the last prompt position, trained on zero-shot prompts
(:func:`ltvlib.study.ltvs.trained_ltv`, the same cache entries as chapter 0; seed 0 is chapter 0's vector).
Seeds change the initialisation and the order in which training queries are drawn, never the data split.

- :func:`task_vectors` trains (or reads back) the LTVs of several tasks and seeds; :func:`stack_vectors`,
  :func:`cosine_matrix` and :func:`similarity_summary` compare them; :func:`initial_vectors` rebuilds each
  vector's random starting point, so the part of a vector that training added can be compared too.
- :func:`pca_2d` and :func:`tsne_2d` project the vectors to two dimensions (t-SNE needs scikit-learn, an
  optional dependency; without it :func:`tsne_2d` returns ``None``).
- :func:`transfer_accuracy` injects the LTV of task A (at its own site) into the zero-shot test prompts of
  task B and scores it against B's gold answers with the book's metric (top-1 token over the whole vocabulary
  equals the first token of the gold answer; label-restricted accuracy beside it when B is a classification
  task). Results are cached per (vector, target task, test set) with the source of this module in the key,
  with each query's correctness, so two vectors on the same target can be compared query by query.
- Intervals and controls: :func:`random_transfer` runs random vectors of an LTV's norm on a target's prompts
  (the control of a transfer number); :func:`gap_interval` bootstraps the same-task minus cross-task cosine over
  tasks, :func:`gap_permutation` compares it with label-shuffled groupings, and :func:`control_margin` turns
  such a control into an interval a verdict rule can read.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..analysis.controls import ControlSummary, random_like, summarise_control
from ..cache import cached_json, dependency_hash, task_key
from ..evaluate import EvalSet, evaluate
from ..inject import VectorEdit
from ..ltv import LearnedTaskVector
from ..memo import memo
from ..prompts import encode_prompts
from ..stats import Estimate
from ..tasks import get_task
from .ltvs import RunSizes, task_splits, trained_ltv
from .sizes import GeneralizationSizes

if TYPE_CHECKING:
    from ..models import LoadedModel

#: The paper's cross-task transfer number: the SNLI-trained LTV evaluated on RTE (Llama-3.1-8B), in %.
PAPER_SNLI_TO_RTE = 46.21

# --------------------------------------------------------------------------------------------------------
# Vectors
# --------------------------------------------------------------------------------------------------------


def task_vectors(
    lm: LoadedModel, run_sizes: RunSizes, sizes: GeneralizationSizes, *, progress: bool = False
) -> dict[tuple[str, int], LearnedTaskVector]:
    """The middle-layer, last-position LTV of every task and seed of ``sizes``, keyed ``(task, seed)``.

    Seeds of one task are trained one after the other, so the training prompts' cached prefixes (kept in
    memory by :mod:`ltvlib.ltv`) serve every seed.
    """
    out = {}
    for task in sizes.tasks:
        for seed in sizes.seeds_of(task):
            out[(task, seed)] = trained_ltv(lm, task, run_sizes, layers=[lm.middle_layer], seed=seed, progress=progress)
    return out


def single_site_vector(ltv: LearnedTaskVector) -> Tensor:
    """The ``(d_model,)`` vector of a one-site LTV; ``ValueError`` for an LTV with several sites."""
    if ltv.vectors.shape[0] != 1:
        raise ValueError(
            f"LTV of {ltv.task!r} has {ltv.vectors.shape[0]} sites (layers {ltv.layers}, positions "
            f"{ltv.positions}); this comparison needs one vector"
        )
    return ltv.vectors[0].float()


def stack_vectors(ltvs: Mapping[tuple[str, int], LearnedTaskVector]) -> tuple[list[tuple[str, int]], Tensor]:
    """The keys in order and their vectors as rows of one ``(n, d_model)`` float32 matrix.

    Raises:
        ValueError: the vectors sit at different sites (comparing them would mean nothing).
    """
    keys = list(ltvs)
    sites = {(ltvs[k].layers, ltvs[k].positions) for k in keys}
    if len(sites) != 1:
        raise ValueError(f"vectors at different sites cannot be compared: {sorted(sites)}")
    return keys, torch.stack([single_site_vector(ltvs[k]) for k in keys])


def initial_vectors(ltv: LearnedTaskVector) -> Tensor:
    """The random vectors an LTV started from, ``(n_sites, d_model)``.

    :func:`ltvlib.ltv.train_ltv` draws them as ``U(-r, r)`` from ``torch.Generator().manual_seed(seed)``
    with ``r`` the row's ``effective_init`` (the recipe's ``init_range``, times the stream RMS at the row's site
    for a stream-relative recipe; ``config.init_range`` for files that predate it), row by row as the trainer
    does (its first random draw); ``tests/test_generalization.py`` checks that this matches by training with a
    zero learning rate.
    """
    gen = torch.Generator().manual_seed(ltv.seed)
    n, d = ltv.vectors.shape
    draw = torch.rand(n, d, generator=gen) * 2 - 1
    ranges = ltv.training.effective_init or (ltv.config.init_range,) * n
    return torch.stack([draw[i] * r for i, r in enumerate(ranges)])


def cosine_matrix(x: Tensor) -> Tensor:
    """Cosine similarity between the rows of ``x`` ``(n, d)``: ``(n, n)``, float64."""
    x = x.double()
    unit = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


def similarity_summary(groups: Sequence[str], cos: Tensor) -> dict[str, Any]:
    """How vectors of one group (task) resemble each other against vectors of other groups.

    Args:
        groups: the group of each row of ``cos``.
        cos: ``(n, n)`` similarity matrix.

    Returns:
        ``within`` (mean over pairs of distinct vectors of the same group; NaN if no group has two),
        ``across`` (mean over pairs of different groups), ``within_by_group`` ``{group: mean}`` (groups with
        at least two vectors), ``nearest_same_group`` (fraction of vectors whose most similar *other* vector
        is of their own group, among groups with at least two vectors; chance is about (k - 1) / (n - 1)).
    """
    n = len(groups)
    if cos.shape != (n, n):
        raise ValueError(f"cos has shape {tuple(cos.shape)}, expected ({n}, {n})")
    c = cos.double().cpu()
    within, across = [], []
    by_group: dict[str, list[float]] = {}
    for i in range(n):
        for j in range(i + 1, n):
            if groups[i] == groups[j]:
                within.append(float(c[i, j]))
                by_group.setdefault(groups[i], []).append(float(c[i, j]))
            else:
                across.append(float(c[i, j]))
    counts = Counter(groups)
    hits, total = 0, 0
    for i in range(n):
        if counts[groups[i]] < 2:
            continue
        others = c[i].clone()
        others[i] = -math.inf
        hits += groups[int(others.argmax())] == groups[i]
        total += 1
    return {
        "within": float(np.mean(within)) if within else math.nan,
        "across": float(np.mean(across)) if across else math.nan,
        "within_by_group": {g: float(np.mean(v)) for g, v in by_group.items()},
        "nearest_same_group": hits / total if total else math.nan,
    }


def pca_2d(x: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``x`` ``(n, d)`` projected on their first two principal components.

    Returns:
        ``coords (n, 2)`` and the fraction of the variance each of the two components explains ``(2,)``.
        The sign of each component is fixed (largest absolute loading positive), so equal inputs give equal
        plots.
    """
    a = x.double().cpu().numpy()
    a = a - a.mean(0, keepdims=True)
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    k = min(2, len(s))
    for i in range(k):
        if vt[i, np.argmax(np.abs(vt[i]))] < 0:
            u[:, i], vt[i] = -u[:, i], -vt[i]
    coords = np.zeros((a.shape[0], 2))
    coords[:, :k] = u[:, :k] * s[:k]
    var = s**2
    ratio = np.zeros(2)
    ratio[:k] = var[:k] / var.sum() if var.sum() > 0 else 0.0
    return coords, ratio


def tsne_available() -> bool:
    """Whether scikit-learn (for t-SNE) can be imported."""
    try:
        import sklearn.manifold  # noqa: F401
    except ImportError:
        return False
    return True


def tsne_2d(x: Tensor, *, seed: int = 0, perplexity: float | None = None) -> np.ndarray | None:
    """t-SNE of the rows of ``x`` on cosine distances (scikit-learn), or ``None`` without scikit-learn.

    ``perplexity`` defaults to ``min(5, (n - 1) / 3)``: t-SNE needs it below the number of points, and with a
    few vectors per task a small neighbourhood is the one that matters.
    """
    if not tsne_available():
        return None
    from sklearn.manifold import TSNE

    n = x.shape[0]
    if n < 3:
        raise ValueError(f"t-SNE needs at least 3 vectors, got {n}")
    perplexity = perplexity if perplexity is not None else max(1.0, min(5.0, (n - 1) / 3))
    model = TSNE(n_components=2, perplexity=perplexity, metric="cosine", init="pca", random_state=seed)
    return model.fit_transform(x.double().cpu().numpy())


# --------------------------------------------------------------------------------------------------------
# Cross-task transfer
# --------------------------------------------------------------------------------------------------------


def shared_labels(source: str, target: str) -> tuple[str, ...]:
    """Label words that the source and target tasks share (empty unless both are classification tasks)."""
    s, t = get_task(source), get_task(target)
    if s.labels is None or t.labels is None:
        return ()
    return tuple(label for label in t.labels if label in s.labels)


# The targets' test prompts with their cached prefixes; one target's set is evaluated with every source vector
# in turn, so the model's memo (:mod:`ltvlib.memo`) keeps only the last one.
def _target_set(lm: LoadedModel, target: str, run_sizes: RunSizes, layer: int) -> EvalSet:
    splits = task_splits(target, run_sizes)

    def build() -> EvalSet:
        task = get_task(target)
        # Shortest prompts first, so a batch pads little (RTE prompts run from 20 to 300 tokens); accuracy and
        # the prediction counts do not depend on the order.
        lengths = [len(r) for r in encode_prompts(lm.tokenizer, task, splits.test).rows]
        ordered = [splits.test[i] for i in sorted(range(len(lengths)), key=lengths.__getitem__)]
        # Keys/values from the injection block on (the blocks before it are unaffected by the vector), with
        # room for every prompt of the longest tasks: each row's prefix is computed once, then every vector
        # costs one single-token pass from the injection block.
        return EvalSet(lm, task, ordered, tail=1, cache_rows=True, max_cache_bytes=2 * 2**30, first_layer=layer)

    return memo(lm, "generalization.target_sets", (target, splits.test, layer), build, keep=1)


def _top_predictions(predicted: Sequence[str], k: int = 3) -> list[list[Any]]:
    n = len(predicted)
    return [[tok, count / n] for tok, count in Counter(predicted).most_common(k)]


def transfer_accuracy(lm: LoadedModel, ltv: LearnedTaskVector, target: str, run_sizes: RunSizes) -> dict[str, Any]:
    """Accuracy of ``ltv`` (trained on its own task) injected as trained into ``target``'s zero-shot test prompts.

    The vector is added at its own sites (block input of its layer, its positions); the prompts, gold
    answers and metric are the target's. On the diagonal (``target == ltv.task``) the number equals
    :func:`ltvlib.study.ltvs.ltv_accuracy` (tested); it is computed here on the same cached prompts as the
    rest of the target's column rather than read from that function's cache, since those prompts must be run
    for the other sources anyway.

    Returns:
        ``{"accuracy", "label_accuracy" (None for a generation target), "n", "top_predictions": [[token,
        share], ...] (the three most frequent top-1 tokens), "correct" (per test query, 0/1, in the target
        set's order: shortest prompts first), "label_correct" (the same for the label-restricted prediction,
        None for a generation target), "source", "seed", "target"}``.
    """
    get_task(target)
    if ltv.positions != (-1,):
        raise ValueError(f"transfer evaluates last-position LTVs; this one sits at positions {ltv.positions}")
    splits = task_splits(target, run_sizes)
    key = {"what": "ltv-transfer", "model": lm.name, "target": task_key(target), "n_test": len(splits.test),
           "ltv": ltv.metadata(without=("curve",)), "vector_sum": float(ltv.vectors.double().sum()),
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        es = _target_set(lm, target, run_sizes, min(ltv.layers))
        return {**_scored(es, ltv.edits()), "source": ltv.task, "seed": ltv.seed, "target": target}

    return cached_json("ltv-transfer", key, compute)


def _scored(es: EvalSet, edits: Sequence[Any]) -> dict[str, Any]:
    r = evaluate(es, edits)
    label_correct = (None if r.label_predicted is None else
                     [float(p == e.output) for p, e in zip(r.label_predicted, es.examples)])
    return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n,
            "top_predictions": _top_predictions(r.predicted), "correct": [float(c) for c in r.correct],
            "label_correct": label_correct}


def random_transfer(
    lm: LoadedModel, ltv: LearnedTaskVector, target: str, run_sizes: RunSizes, *, n_draws: int, seed: int = 0
) -> list[dict[str, Any]]:
    """The control of :func:`transfer_accuracy`: ``n_draws`` random vectors with ``ltv``'s norm per site
    (:func:`ltvlib.analysis.controls.random_like`, seeded by ``seed``) injected where ``ltv`` goes, on ``target``'s
    test prompts (the same prompts, in the same order, as :func:`transfer_accuracy`'s). Cached.

    Returns:
        One dict per draw as :func:`transfer_accuracy` returns (``source`` = ``"random"``, ``draw``).
    """
    if n_draws < 1:
        raise ValueError(f"n_draws must be at least 1, got {n_draws}")
    splits = task_splits(target, run_sizes)
    key = {"what": "ltv-transfer-random", "model": lm.name, "target": task_key(target), "n_test": len(splits.test),
           "ltv": ltv.metadata(without=("curve",)), "vector_sum": float(ltv.vectors.double().sum()),
           "n_draws": n_draws, "seed": seed, "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        es = _target_set(lm, target, run_sizes, min(ltv.layers))
        draws = random_like(ltv.vectors.float(), n_draws, seed)
        out = []
        for k in range(n_draws):
            edits = [VectorEdit(e.layer, e.position, row) for e, row in zip(ltv.edits(), draws[k])]
            out.append({**_scored(es, edits), "source": "random", "draw": k, "target": target})
        return {"draws": out}

    return cached_json("ltv-transfer-random", key, compute)["draws"]


# --------------------------------------------------------------------------------------------------------
# Intervals and controls of the clustering
# --------------------------------------------------------------------------------------------------------


def cluster_gap(groups: Sequence[str], cos: Tensor) -> float:
    """Mean same-group cosine minus mean cross-group cosine (pairs of distinct vectors; NaN without a group of
    two)."""
    s = similarity_summary(groups, cos)
    return s["within"] - s["across"]


def task_gaps(groups: Sequence[str], cos: Tensor) -> dict[str, float]:
    """Per group with at least two vectors: the mean cosine between its own vectors minus the mean cosine of its
    vectors to every other group's vectors."""
    c = cos.double().cpu()
    n = len(groups)
    out = {}
    for g in dict.fromkeys(groups):
        mine = [i for i in range(n) if groups[i] == g]
        if len(mine) < 2:
            continue
        within = [float(c[i, j]) for a, i in enumerate(mine) for j in mine[a + 1:]]
        across = [float(c[i, j]) for i in mine for j in range(n) if groups[j] != g]
        out[g] = float(np.mean(within)) - (float(np.mean(across)) if across else 0.0)
    return out


def gap_interval(
    groups: Sequence[str], cos: Tensor, *, n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95
) -> Estimate:
    """The mean over groups of :func:`task_gaps` with a percentile bootstrap over the groups (each group's gap
    resampled as a unit; ``n`` = groups with at least two vectors, ``seeds`` = their smallest vector count).

    Raises:
        ValueError: fewer than two groups with two vectors each.
    """
    gaps = task_gaps(groups, cos)
    if len(gaps) < 2:
        raise ValueError(f"an interval over groups needs at least two groups with two vectors, got {len(gaps)}")
    vals = np.array(list(gaps.values()))
    rng = np.random.default_rng(seed)
    means = vals[rng.integers(0, len(vals), size=(n_resamples, len(vals)))].mean(1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    value = float(vals.mean())
    counts = Counter(groups)
    return Estimate(value, min(float(lo), value), max(float(hi), value), n=len(vals),
                    seeds=min(counts[g] for g in gaps), confidence=confidence, method="group bootstrap",
                    resamples=n_resamples, difference=True)


def gap_permutation(groups: Sequence[str], cos: Tensor, *, n_permutations: int = 999, seed: int = 0) -> ControlSummary:
    """The control of :func:`cluster_gap`: the same statistic with the group labels shuffled among the vectors
    (:func:`ltvlib.analysis.controls.summarise_control`, one-sided ``"greater"``): what any grouping of these vectors
    into groups of these sizes gives."""
    rng = np.random.default_rng(seed)
    labels = list(groups)
    draws = []
    for _ in range(n_permutations):
        perm = [labels[i] for i in rng.permutation(len(labels))]
        draws.append(cluster_gap(perm, cos))
    return summarise_control(cluster_gap(groups, cos), draws, alternative="greater")


def control_margin(summary: ControlSummary, *, n: int, seeds: int = 1, confidence: float = 0.95) -> Estimate:
    """A measured value against its control distribution as an interval: value minus the draws' mean, with
    bounds value minus the draws' upper and lower ``confidence`` quantiles. Its low bound is above 0 exactly
    when the value lies above that share of the draws (a one-sided test at ``(1 - confidence) / 2``)."""
    alpha = (1 - confidence) / 2
    qlo, qhi = np.quantile(np.asarray(summary.draws), [alpha, 1 - alpha])
    v = summary.value - summary.mean
    return Estimate(v, min(summary.value - float(qhi), v), max(summary.value - float(qlo), v), n=n, seeds=seeds,
                    confidence=confidence, method="permutation", resamples=summary.n_draws, difference=True)


def transfer_matrix(
    lm: LoadedModel, ltvs: Mapping[tuple[str, int], LearnedTaskVector], run_sizes: RunSizes, sizes: GeneralizationSizes,
) -> list[dict[str, Any]]:
    """:func:`transfer_accuracy` of every ``sizes.transfer_seeds`` vector of every task on every task, and of
    every trained seed on its own task.

    Loops target-major so each target's prompt prefixes are computed once for all the vectors evaluated on it.
    """
    rows = []
    for target in sizes.tasks:
        for source in sizes.tasks:
            seeds = sizes.seeds_of(source) if source == target else sizes.transfer_seeds
            for seed in seeds:
                rows.append(transfer_accuracy(lm, ltvs[(source, seed)], target, run_sizes))
    return rows
