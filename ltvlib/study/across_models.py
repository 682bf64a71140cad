"""The book's headline measurements on several models side by side (chapter 08).

Nothing here defines a new measurement. Each function calls the one an earlier chapter uses, with the
arguments that chapter passes, so that on the book's default model the vectors, and all but a few single-layer
evaluations, are read back from the cache those chapters filled, and on any other model they are computed the
same way:

- :func:`middle_layer_results`: chapter 01's baseline setting: zero-shot and ICL
  (:func:`ltvlib.study.ltvs.icl_accuracy`), the LTV at the middle layer (``trained_ltv`` +
  ``ltv_accuracy``: *added* at the input of block ``L // 2``, last prompt token), and the extracted vectors
  injected at the *output* of block ``L // 2`` (:func:`ltvlib.study.extracted.extracted_curve`, at
  :func:`ltvlib.study.plans.extracted_layers`: chapter 01's layers for the sweep tasks, the middle layer alone for
  the others;
  Vanilla TV *replacing* the last-token state, its difference form and the Function Vector *added*).
- :func:`sweep_results`: the same vectors across layers (LTVs at :func:`ltvlib.study.plans.sweep_ltv_layers`,
  extracted vectors at chapter 01's :func:`ltvlib.study.plans.table_layers`).
- :func:`key_head_results`: chapter 04's ablation of the top 10 % of heads by saliency against random heads
  (:func:`ltvlib.study.key_heads.key_head_experiment`, heads zeroed or mean-ablated at the last position).
- :func:`linearity_results`: chapter 05's linear map ``W`` from the LTV at block ``l`` to the shift of the
  final-norm input, and the accuracy of ``W theta`` added there instead of the LTV
  (:func:`ltvlib.study.linearity.cached_linearity`), at three layers (:func:`ltvlib.study.plans.linearity_layers`).

:func:`check_code_paths` verifies on a real model that the shortcuts every chapter relies on (cached prompt
prefixes, single-token passes from a middle block, the site table's norm and embedding conventions) give
the model's own forward pass.

**The LTV's step size.** The fast recipe's steps are relative to the residual stream
(``TrainConfig.relative_to_stream``): the trainer scales each vector's initial range by the stream's RMS at its
own site and its learning rate by the typical coordinate of the stream entering the last block (the median over
coordinates, which a few massive ones do not move: :mod:`ltvlib.stream_scale`, ``TrainConfig.lr_final_stream_weight``
and ``lr_stream_statistic``), on every model and at every layer alike; this module scales nothing. :func:`stream_rms`
measures the stream's size by depth, for the chapter's figure of why one absolute recipe could not serve both
models.

**Intervals.** The verdicts compare methods on the same test queries, so the chapter needs each query's
correctness, not only accuracies: :func:`correct_at` (zero-shot, the LTV and the three extracted vectors at
one layer) and :func:`key_head_correct` (the LTV with key or random heads zeroed) return it, for
:func:`ltvlib.stats.paired_bootstrap_difference`.

**The Function Vector's size.** :func:`attention_write_check` verifies on real prompts that what the heads write
(:func:`ltvlib.heads.head_writes`, Gemma's attention-output norm included) sums to what the attention block
adds to the stream, and :func:`function_vector_write` compares the FV with its heads' write recomputed at their
mean outputs and with the bare ``W_O`` terms (the size the FV had before the norm was taken into account).

Sliding-window attention (Gemma 3: 512 tokens) limits the cached-prefix paths to prompts shorter than the
window (:func:`ltvlib.kv_cache.forward_tokens` refuses longer ones). ICL references then fall back on full
forwards (exact, slower; :func:`icl_reference`); an extracted vector that cannot be computed is reported as
missing with the reason (:func:`middle_layer_results`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, cast

import torch

from .. import memo
from ..analysis.key_heads import LastTokenRunner
from ..analysis.linearity import LinearityConfig, ShiftProbe, final_norm, record_final_norm_input
from ..cache import cached_json, dependency_hash, task_key
from ..evaluate import EvalSet, evaluate
from ..forward import PromptRunner
from ..hooks import Hook, first_input, hooked
from ..inject import VectorEdit, inject, record_residual
from ..prompts import answer_ids, encode_prompts, pad_left
from ..sites import norm_gain
from ..tasks import load_splits
from .extracted import extracted_curve
from .key_heads import key_head_experiment
from .linearity import cached_linearity
from .ltvs import RunSizes, icl_accuracy, ltv_accuracy, sweep_with_middle, task_splits, trained_ltv
from .sizes import AcrossModelsSizes

if TYPE_CHECKING:
    from ..baselines.vanilla_tv import Form
    from ..models import LoadedModel

EXTRACTED = ("vanilla_tv", "vanilla_tv_difference", "function_vector")
"""The extracted-vector methods of chapter 01, in its column order."""

_WINDOW_ERROR = "sliding attention window"  # ltvlib.kv_cache's message for prompts longer than the window


# -------------------------------------------------------------------------------------------------------------
# The size of the residual stream by depth


@torch.no_grad()
def stream_rms(lm: LoadedModel, layers: list[int] | None = None, *, task: str = "antonym", n: int = 32) -> dict[int, float]:
    """RMS per coordinate of the last-token residual stream entering each of ``layers`` (default: every layer),
    over the first ``n`` zero-shot test prompts of ``task``: ``sqrt(mean over prompts of |h_l|^2 / d)``."""
    layers = list(range(lm.n_layers)) if layers is None else layers
    splits = load_splits(task, n_train=600, n_val=400)
    rows = encode_prompts(lm.tokenizer, splits.task, splits.test[:n]).full_rows()
    ids, mask = pad_left(rows, lm.tokenizer.pad_token_id, lm.device)
    with record_residual(lm, layers) as rec:
        lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    return {l: float(rec[l][:, -1].double().pow(2).mean().sqrt()) for l in layers}


# -------------------------------------------------------------------------------------------------------------
# The measurements


def icl_reference(lm: LoadedModel, task: str, shots: int, run_sizes: RunSizes, *, seed: int = 0) -> dict[str, Any]:
    """:func:`ltvlib.study.ltvs.icl_accuracy`, or the same prompts run as full forwards when a prompt is
    longer than the model's sliding attention window (the cached-prefix path refuses those).

    Returns ``{"accuracy", "label_accuracy", "n", "path"}`` with ``path`` ``"cached prefix"`` or ``"full"``.
    """
    try:
        return icl_accuracy(lm, task, shots, run_sizes, seed=seed) | {"path": "cached prefix"}
    except ValueError as exc:
        if _WINDOW_ERROR not in str(exc):
            raise
    splits = task_splits(task, run_sizes, icl=shots > 0)
    key = {"what": "icl-full", "model": lm.name, "task": task_key(task), "shots": shots, "n_test": len(splits.test),
           "n_train": len(splits.train), "demo_sets": run_sizes.icl_demo_sets, "seed": seed,
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        es = EvalSet(lm, task, splits.test, shots=shots, demo_pool=splits.train, seed=seed,
                     demo_sets=run_sizes.icl_demo_sets if shots else None, tail=None, cache_rows=False)
        r = evaluate(es, batch_size=8)
        return {"accuracy": r.accuracy, "label_accuracy": r.label_accuracy, "n": r.n}

    return cached_json("across-models/icl-full", key, compute) | {"path": "full"}


def _curve(lm: LoadedModel, task: str, run_sizes: RunSizes, method: str, layers: list[int], seed: int) -> dict[str, Any] | None:
    """An extracted-vector curve, or None when the model's sliding window makes it uncomputable here."""
    try:
        return extracted_curve(lm, task, run_sizes, method, layers, seed=seed)  # type: ignore[arg-type]
    except ValueError as exc:
        if _WINDOW_ERROR not in str(exc):
            raise
        return None


def middle_layer_results(
    lm: LoadedModel, task: str, run_sizes: RunSizes, *, icl_shots: Sequence[int], extracted_layers: Sequence[int],
    seed: int = 0,
) -> dict[str, Any]:
    """Chapter 01's middle-layer row of one task, in percent: ICL at each of ``icl_shots``, the extracted vectors'
    curves at ``extracted_layers`` (the middle layer among them).

    Returns:
        ``{"zero-shot", "<k>-shot ICL" (each of ``icl_shots``), "ltv", "vanilla_tv",
        "vanilla_tv_difference", "function_vector"}`` -> accuracy (%; None where not computable), plus
        ``"icl_n"`` (shots -> test queries), ``"icl_path"`` (shots -> ``"cached prefix"`` or ``"full"``),
        ``"ltv_steps"``, ``"ltv_norm"`` and ``"missing"`` (method -> reason). The LTV's accuracy is its
        measurement whether or not it trained: the chapter's :class:`ltvlib.study.ltv_report.LTVLedger` decides what is
        shown (:func:`middle_ltv` gives the vector).
    """
    mid = lm.middle_layer
    zero = icl_reference(lm, task, 0, run_sizes, seed=seed)
    out: dict[str, Any] = {"zero-shot": 100 * zero["accuracy"], "icl_path": {}, "icl_n": {"0": zero["n"]},
                           "missing": {}}
    for k in icl_shots:
        r = icl_reference(lm, task, k, run_sizes, seed=seed)
        out[f"{k}-shot ICL"] = 100 * r["accuracy"]
        out["icl_path"][str(k)] = r["path"]
        out["icl_n"][str(k)] = r["n"]
    ltv = middle_ltv(lm, task, run_sizes, seed=seed)
    out["ltv"] = 100 * ltv_accuracy(lm, ltv, run_sizes, seed=seed)["accuracy"]
    out["ltv_steps"], out["ltv_norm"] = ltv.training.steps, float(ltv.vectors.norm())
    layers = list(extracted_layers)
    for method in EXTRACTED:
        curve = _curve(lm, task, run_sizes, method, layers, seed)
        if curve is None:
            out[method] = None
            out["missing"][method] = "a prompt is longer than the sliding attention window"
        else:
            out[method] = 100 * curve["layers"][str(mid)]["accuracy"]
    return out


def middle_ltv(lm: LoadedModel, task: str, run_sizes: RunSizes, *, seed: int = 0) -> Any:
    """The LTV of ``task`` at the middle layer, last position, with ``run_sizes.recipe`` (chapter 01's)."""
    return trained_ltv(lm, task, run_sizes, layers=[lm.middle_layer], seed=seed)


def sweep_ltvs(lm: LoadedModel, task: str, run_sizes: RunSizes, layers: Sequence[int], *, seed: int = 0) -> dict[int, Any]:
    """The LTVs of the layer sweep at ``layers`` (:func:`ltvlib.study.plans.sweep_ltv_layers`), by layer."""
    return {l: trained_ltv(lm, task, run_sizes, layers=[l], seed=seed) for l in layers}


def sweep_results(
    lm: LoadedModel, task: str, run_sizes: RunSizes, *, ltv_layers: Sequence[int], curve_layers: Sequence[int], seed: int = 0
) -> dict[str, dict[int, float]]:
    """Accuracy (%) by injection layer: ``{"ltv": {layer: acc}, "vanilla_tv": ..., ...}``. LTVs (``run_sizes``'
    recipe) at ``ltv_layers`` (block input); extracted vectors (block output) at ``curve_layers`` (chapter 01's
    layers, :func:`ltvlib.study.plans.table_layers`: its cached curve) and, in a second curve, at the LTV layers
    that list lacks, so that
    every LTV has extracted vectors to be compared with at its own layer. A method that cannot be computed on
    this model gets an empty dict."""
    out: dict[str, dict[int, float]] = {"ltv": {}}
    ltv_at = list(ltv_layers)
    for layer in ltv_at:
        ltv = trained_ltv(lm, task, run_sizes, layers=[layer], seed=seed)
        out["ltv"][layer] = 100 * ltv_accuracy(lm, ltv, run_sizes, seed=seed)["accuracy"]
    layers = list(curve_layers)
    extra = [l for l in ltv_at if l not in layers]
    for method in EXTRACTED:
        out[method] = {}
        for ls in (layers, extra) if extra else (layers,):
            curve = _curve(lm, task, run_sizes, method, ls, seed)
            if curve is None:
                out[method] = {}
                break
            out[method] |= {int(l): 100 * v["accuracy"] for l, v in curve["layers"].items()}
        out[method] = dict(sorted(out[method].items()))
    return out


def key_head_results(
    lm: LoadedModel, task: str, run_sizes: RunSizes, sizes: AcrossModelsSizes, *, seed: int = 0, fraction: float = 0.1
) -> dict[str, Any]:
    """Chapter 04's ablation for the middle-layer LTV of ``task``, summarised in percent.

    Returns:
        ``{"ltv", "key_zero", "key_mean", "random_zero", "random_mean", "random_zero_sd", "random_mean_sd",
        "n_key", "n_heads", "key_heads", "n_random"}`` (heads chosen among all layers, ablated at the last
        position; random: mean and standard deviation over the draws).
    """
    splits = task_splits(task, run_sizes)
    ltv = trained_ltv(lm, task, run_sizes, layers=[lm.middle_layer], seed=seed)
    r = key_head_experiment(lm, ltv, list(splits.validation[: sizes.n_key_queries]), list(splits.test),
                            fraction=fraction, n_random=sizes.n_random, seed=seed)
    out: dict[str, Any] = {"ltv": 100 * r["accuracy"], "key_heads": r["key_heads"], "n_key": len(r["key_heads"]),
                           "n_heads": lm.n_layers * lm.geometry.n_heads, "n_random": sizes.n_random}
    for mode in ("zero", "mean"):
        draws = torch.tensor(r["random"][mode], dtype=torch.float64) * 100
        out[f"key_{mode}"] = 100 * r["key"][mode]
        out[f"random_{mode}"] = float(draws.mean())
        out[f"random_{mode}_sd"] = float(draws.std(unbiased=False))
    return out


def linearity_results(
    lm: LoadedModel, task: str, run_sizes: RunSizes, layers: Sequence[int], *, config: LinearityConfig, seed: int = 0
) -> dict[int, dict[str, Any]]:
    """Chapter 05's measurement (fit sizes ``config``) at ``layers`` (:func:`ltvlib.study.plans.linearity_layers`),
    summarised: per layer ``{"ltv", "w_theta",
    "w_theta_last_block", "zero_shot", "r2_heldout", "explained", "cos_theta_Qtheta", "stretch"}``
    (accuracies in %)."""
    out = {}
    for layer in layers:
        r = cached_linearity(lm, task, run_sizes, layer, config=config, seed=seed)
        acc = r["accuracy"]
        out[layer] = {"ltv": 100 * acc["ltv"], "w_theta": 100 * acc["reconstruction"],
                      "w_theta_last_block": 100 * acc["reconstruction_last_block_input"],
                      "zero_shot": 100 * acc["zero_shot"], "r2_heldout": r["r2_heldout"],
                      "explained": r["explained_heldout"], "cos_theta_Qtheta": r["cos_theta_Qtheta"],
                      "stretch": r["norm_ratio"]}
    return out


# -------------------------------------------------------------------------------------------------------------
# Per-query correctness, for intervals on differences between methods (the same test queries for every method)


def _windowed(fn: Any) -> Any:
    """``fn()``, or None when the model's sliding window refuses one of its prompts."""
    try:
        return fn()
    except ValueError as exc:
        if _WINDOW_ERROR not in str(exc):
            raise
        return None


def correct_at(lm: LoadedModel, task: str, run_sizes: RunSizes, layer: int, *, seed: int = 0) -> dict[str, Any]:
    """Which test queries each method gets right with its vector at ``layer`` (cached).

    The test queries of ``task`` at ``run_sizes`` (the same ones, in the same order, for every method): ``"zero-shot"``
    (no vector, the task's template), ``"ltv"`` (the LTV trained at ``layer``, :func:`ltvlib.study.ltvs.trained_ltv`,
    added at the input of block ``layer``), ``"vanilla_tv"``, ``"vanilla_tv_difference"`` and
    ``"function_vector"`` (chapter 01's vectors, :func:`ltvlib.study.extracted.extracted_curve`'s,
    at the output of block ``layer``). Their means are those functions' accuracies (tested).

    Returns:
        ``{method: [bool per query] or None (not computable here: a prompt longer than the sliding window)}``
        plus ``"n"`` (test queries).
    """
    from ..baselines.vanilla_tv import layer_accuracies
    from ..forward import tail_needed
    from .extracted import cached_function_vector, cached_vanilla_tv, extracted_test_set
    from .ltvs import ltv_test_set

    splits = task_splits(task, run_sizes)
    ltv = trained_ltv(lm, task, run_sizes, layers=[layer], seed=seed)
    key = {"what": "correct-at", "model": lm.name, "task": task_key(task), "layer": layer,
           "test": [e.input for e in splits.test], "n_train": run_sizes.n_train, "n_val": run_sizes.n_val, "seed": seed,
           "ltv": ltv.metadata(without=("curve",)), "vector_sum": float(ltv.vectors.double().sum()),
           "vanilla_tv": asdict(run_sizes.vanilla_tv), "function_vector": asdict(run_sizes.function_vector),
           "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        es_ltv = ltv_test_set(lm, task, splits, 0, seed, None, tail_needed(ltv.positions))
        out: dict[str, Any] = {"ltv": evaluate(es_ltv, ltv.edits()).correct, "n": len(splits.test)}
        es = extracted_test_set(lm, task, run_sizes, "task")
        out["zero-shot"] = evaluate(es).correct
        candidates = sweep_with_middle(lm.n_layers, run_sizes)
        config = replace(run_sizes.vanilla_tv, seed=seed, template="task", form="replace")
        tv = _windowed(lambda: cached_vanilla_tv(lm, task, run_sizes, config=config, seed=seed,
                                                  select_layers=candidates))
        forms: tuple[tuple[Form, str], ...] = (("replace", "vanilla_tv"), ("difference", "vanilla_tv_difference"))
        for form, name in forms:
            out[name] = None if tv is None else layer_accuracies(es, tv, [layer], form)[layer].correct
        fv = _windowed(lambda: cached_function_vector(lm, task, run_sizes, config=replace(run_sizes.function_vector,
                                                                                        seed=seed), seed=seed))
        out["function_vector"] = None if fv is None else evaluate(es, fv.edits(layer)).correct
        return out

    return cached_json("across-models/correct-at", key, compute)


def key_head_correct(
    lm: LoadedModel, task: str, run_sizes: RunSizes, sizes: AcrossModelsSizes, *, seed: int = 0, fraction: float = 0.1
) -> dict[str, Any]:
    """Which test queries the middle-layer LTV gets right alone, with the key heads zeroed and with each random
    head set of :func:`key_head_results` zeroed (at the last position; cached).

    Returns:
        ``{"ltv": [bool], "key_zero": [bool], "random_zero": [[bool] per draw], "n_key", "n_heads", "n"}``.
    """
    from ..analysis.key_heads import head_accuracy, last_token_runner

    splits = task_splits(task, run_sizes)
    ltv = middle_ltv(lm, task, run_sizes, seed=seed)
    r = key_head_experiment(lm, ltv, list(splits.validation[: sizes.n_key_queries]), list(splits.test),
                            fraction=fraction, n_random=sizes.n_random, seed=seed)
    keys = [tuple(h) for h in r["key_heads"]]
    draws = [[tuple(h) for h in heads] for heads in r["random_heads"]]
    key = {"what": "key-head-correct", "model": lm.name, "task": task_key(task), "test": [e.input for e in splits.test],
           "ltv": ltv.metadata(without=("curve",)), "vector_sum": float(ltv.vectors.double().sum()),
           "key_heads": keys, "random_heads": draws, "source": dependency_hash(__name__)}

    def compute() -> dict[str, Any]:
        runner = last_token_runner(lm, ltv.task, list(splits.test))
        edits = ltv.edits()
        return {"ltv": head_accuracy(lm, runner, edits)["correct"],
                "key_zero": head_accuracy(lm, runner, edits, heads=keys, mode="zero")["correct"],
                "random_zero": [head_accuracy(lm, runner, edits, heads=h, mode="zero")["correct"] for h in draws],
                "n_key": len(keys), "n_heads": lm.n_layers * lm.geometry.n_heads, "n": len(splits.test)}

    return cached_json("across-models/key-head-correct", key, compute)


@torch.no_grad()
def attention_write_check(lm: LoadedModel, layers: list[int], *, task: str = "antonym", n: int = 8) -> dict[int, dict[str, float]]:
    """Does what the heads write (:func:`ltvlib.heads.head_writes`) sum to what the attention block adds to the
    residual stream? On the last token of ``n`` zero-shot test prompts of ``task``, per layer of ``layers``.

    The block's contribution is measured as the stream entering the MLP's input norm minus the stream entering
    the block (whatever norms lie between, e.g. Gemma's attention-output norm).

    Returns:
        ``{layer: {"relative_error": max|sum of writes - contribution| / max|contribution|,
        "bare_ratio": |sum of the bare W_O terms| / |contribution| (mean over prompts: what the writes would be
        without the attention-output norm; 1 where there is none), "contribution_norm": mean |contribution|}}``.
    """
    from ..heads import head_writes, record_heads
    from ..sites import block, mlp_input_norm, o_proj

    splits = load_splits(task, n_train=600, n_val=400)
    rows = encode_prompts(lm.tokenizer, splits.task, splits.test[:n]).full_rows()
    ids, mask = pad_left(rows, lm.tokenizer.pad_token_id, lm.device)
    seen: dict[tuple[str, int], torch.Tensor] = {}
    hooks = []
    for layer in layers:
        hooks.append(Hook(block(lm, layer), "pre", lambda m, a, k, layer=layer: seen.__setitem__(
            ("x", layer), first_input(a, k)[:, -1]), f"block {layer}"))
        hooks.append(Hook(mlp_input_norm(lm, layer), "pre", lambda m, a, k, layer=layer: seen.__setitem__(
            ("y", layer), first_input(a, k)[:, -1]), f"MLP input {layer}"))
    with hooked(hooks, what="recording hooks"), record_heads(lm, layers) as cap:
        lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    out = {}
    geo = lm.geometry
    for layer in layers:
        heads = cap[layer][:, -1]
        contribution = seen[("y", layer)].double() - seen[("x", layer)].double()
        writes = head_writes(lm, layer, heads).double().sum(-2)
        w = o_proj(lm, layer).weight.detach().view(geo.d_model, geo.n_heads, geo.head_dim).double()
        bare = torch.einsum("bhk,dhk->bd", heads.double().to(w.device), w)
        out[layer] = {
            "relative_error": float((writes - contribution).abs().max() / contribution.abs().max().clamp_min(1e-30)),
            "bare_ratio": float((bare.norm(dim=-1) / contribution.norm(dim=-1).clamp_min(1e-30)).mean()),
            "contribution_norm": float(contribution.norm(dim=-1).mean()),
        }
    return out


# -------------------------------------------------------------------------------------------------------------
# Do the shortcuts hold on this model?


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max |b|``: a difference relative to the size of the reference."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def check_code_paths(lm: LoadedModel, *, task: str = "sst2", n: int = 6, seed: int = 0) -> dict[str, Any]:
    """Compare the book's fast paths with the model's own forward pass on ``n`` real prompts.

    Every check injects a random vector (norm about that of the residual stream at the injection layer) at
    the last prompt token and compares, relative to the size of the reference (``max |a - b| / max |b|``):

    - ``runner``: :class:`~ltvlib.forward.PromptRunner` on cached prefixes (3 shared demonstrations plus
      left-padded queries, the layout ICL evaluations use; then tail runs starting at the injection block)
      against full forwards: logits of the answer tokens (teacher forcing) and the gradient of the loss with
      respect to the vector;
    - ``last_token``: :class:`~ltvlib.analysis.key_heads.LastTokenRunner` (chapter 04) against full forwards;
    - ``shift_probe``: :class:`~ltvlib.analysis.linearity.ShiftProbe` (chapter 05, single-token passes from block
      ``l``) against the final-norm input of a full forward;
    - ``embedding``: the residual stream entering block 0 against the embedding rows times
      ``sqrt(d_model)`` (if the site table says the architecture scales its embeddings) or 1, and against
      ``hidden_states[0]``;
    - ``final_norm``: the final norm's output against ``x / rms(x) * gain`` with the site table's gain
      (``weight`` or Gemma's ``1 + weight``).

    Returns:
        ``{"checks": {name: relative difference}, "argmax_equal": {name: bool}, "prompt_tokens": (min, max),
        "sliding_window": int | None (None: no sliding-window layers), "final_norm_input_rms": float}`` (the
        last means the RMS of the final norm's input at the last token with the vector injected).
    """
    from ..ltv import answer_loss

    splits = load_splits(task, n_train=40, n_val=8)
    queries = list(splits.test[:n])
    g = torch.Generator().manual_seed(seed)
    layer = lm.middle_layer
    checks: dict[str, float] = {}
    argmax: dict[str, bool] = {}
    rows = encode_prompts(lm.tokenizer, splits.task, queries).full_rows()
    ids, mask = pad_left(rows, lm.tokenizer.pad_token_id, lm.device)
    with torch.no_grad(), record_residual(lm, [0, layer]) as rec:
        # logits of the last position only: on Gemma's 262k vocabulary the full logits cost more than the rest
        out = lm.model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1)
    scale = float(rec[layer][:, -1].norm(dim=-1).mean())
    theta = torch.randn(lm.d_model, generator=g) / math.sqrt(lm.d_model) * scale
    theta = theta.to(device=lm.device, dtype=lm.dtype)

    # 1. PromptRunner: shared demonstrations, cached prefixes, tail runs from the injection block
    prompts = encode_prompts(lm.tokenizer, splits.task, queries, shared_demos=list(splits.train[:3]))
    answers = answer_ids(lm.tokenizer, splits.task, [e.output for e in queries])
    results = []
    for tail in (None, 1):
        runner = PromptRunner(lm, prompts, tail=tail)
        if tail:
            runner.run(range(n))  # caches every row's prefix, as training does
        vec = theta.clone().requires_grad_(True)
        logits, valid = runner.run(range(n), [VectorEdit(layer, -1, vec)], answers=answers)
        answer_loss(logits, answers, valid).backward()
        assert vec.grad is not None  # vec is a leaf the loss depends on
        results.append((logits.detach(), vec.grad))
    (full_logits, full_grad), (fast_logits, fast_grad) = results
    checks["runner logits"] = _rel(fast_logits, full_logits)
    argmax["runner logits"] = bool(torch.equal(fast_logits.argmax(-1), full_logits.argmax(-1)))
    checks["runner gradient"] = _rel(fast_grad, full_grad)

    # 2. chapter 04's last-token runner; 3. chapter 05's shift probe
    edit = [VectorEdit(layer, -1, theta)]
    with torch.no_grad(), inject(lm, edit, attention_mask=mask), record_final_norm_input(lm) as cap:
        ref = lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1]
    last = LastTokenRunner(lm, task, queries)
    with torch.no_grad():
        fast = torch.cat([last.forward(b, edit) for b in last.batches])
    checks["last-token runner logits"] = _rel(fast, ref)
    argmax["last-token runner logits"] = bool(torch.equal(fast.argmax(-1), ref.argmax(-1)))
    probe = ShiftProbe(lm, task, queries)
    states = probe.final_states(layer, theta.float().cpu()[None].expand(n, -1), range(n))
    checks["shift probe final state"] = _rel(states, cap[-1][:, -1])

    # 4. embeddings: block 0's input is the (scaled) embedding row
    raw = cast(torch.nn.Embedding, lm.model.get_input_embeddings()).weight[ids].detach()
    factor = math.sqrt(lm.d_model) if lm.table.scales_embeddings else 1.0
    real = mask.bool()
    checks["block 0 input vs embedding x scale"] = _rel(rec[0][real], (raw * factor).to(rec[0].dtype)[real])
    checks["block 0 input vs hidden_states[0]"] = _rel(rec[0][real], out.hidden_states[0][real])

    # 5. final norm: x / rms(x) * gain, with the gain the site table gives
    norm = final_norm(lm)
    x = cap[-1][:, -1].float()
    eps = float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6)))
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_gain(norm, lm.table).float()
    with torch.no_grad():
        got = norm(cap[-1][:, -1:].to(lm.dtype))[:, 0]
    checks["final norm vs x / rms(x) * gain"] = _rel(got, expected)
    lengths = [len(r) for r in prompts.full_rows()]
    text = lm.model.config.get_text_config() if hasattr(lm.model.config, "get_text_config") else lm.model.config
    layer_types = getattr(text, "layer_types", None) or []
    return {"checks": checks, "argmax_equal": argmax, "prompt_tokens": (min(lengths), max(lengths)),
            "sliding_window": getattr(text, "sliding_window", None) if "sliding_attention" in layer_types else None,
            "final_norm_input_rms": float(x.pow(2).mean(-1).sqrt().mean())}


def function_vector_write(lm: LoadedModel, fv: Any) -> dict[str, float]:
    """Compare a Function Vector with what its heads write into the residual stream.

    :func:`ltvlib.baselines.function_vector.build_function_vector` sums the top heads' mean *writes*
    (:func:`ltvlib.heads.head_writes`): on Llama, Mistral and Qwen2 ``t_{l,h} = W_O[:, slice(h)] a_{l,h}``; on
    Gemma 3, whose block adds the normalised attention output ``N_l(x) = g_l * x / rms(x)``, the head's share
    ``g_l * t_{l,h} / rms(x)`` of it, each prompt at its own ``x``. This recomputes the same heads' write from
    their mean outputs ``m`` at the layer's mean attention output ``x = o_proj(m_l)`` (the same share, at the
    mean), and, for comparison, the first-order *marginal* effect of each head's term through the norm's
    Jacobian ``J_l v = g_l * (v - x (x . v) / (d rms(x)^2)) / rms(x)``, which drops the term's component along
    ``x`` (a norm is scale-invariant, so all heads' Jacobian terms sum to zero).

    Returns:
        ``{"fv_norm": |FV|, "written_norm": |sum of the heads' shares at the mean|, "norm_ratio": fv_norm /
        written_norm, "cos": cosine of the two, "marginal_norm": |sum J t|, "unnormalised_norm": |sum t|}``;
        for an architecture without an attention-output norm the shares, the marginal effects and the terms
        are the same vector.
    """
    from ..sites import attn_output_norm, inverse_rms, o_proj

    means = fv.mean_outputs.to(device=lm.device, dtype=torch.float32)
    terms = torch.zeros(lm.d_model, dtype=torch.float64)
    written = torch.zeros(lm.d_model, dtype=torch.float64)
    marginal = torch.zeros(lm.d_model, dtype=torch.float64)
    geo = lm.geometry
    for layer, head in fv.heads:
        w = o_proj(lm, layer).weight.detach().float()
        term = (w[:, head * geo.head_dim : (head + 1) * geo.head_dim] @ means[layer, head]).double().cpu()
        terms += term
        norm = attn_output_norm(lm, layer)
        if norm is None:
            written += term
            marginal += term
            continue
        x = (w @ means[layer].reshape(-1)).double().cpu()
        gain = norm_gain(norm, lm.table).double().cpu()
        inv = inverse_rms(x, norm).cpu()
        written += gain * term * inv
        marginal += gain * (term - x * (x @ term) * inv**2 / lm.d_model) * inv
    vector = fv.vector.detach().double().cpu()
    cos = float(vector @ written / (vector.norm() * written.norm()).clamp_min(1e-300))
    return {"fv_norm": float(vector.norm()), "written_norm": float(written.norm()),
            "norm_ratio": float(vector.norm() / written.norm().clamp_min(1e-300)), "cos": cos,
            "marginal_norm": float(marginal.norm()), "unnormalised_norm": float(terms.norm())}


def clear_memory() -> None:
    """Drop the prompt sets, runners and probes that the measuring modules keep in memory between calls (they
    hold a reference to their model), so that a model deleted by the caller is freed before the next loads:
    :func:`ltvlib.memo.clear_memory`."""
    memo.clear_memory()


def architecture_row(lm: LoadedModel) -> dict[str, Any]:
    """The sizes and conventions of a loaded model that matter to the book."""
    g = lm.geometry
    text = lm.model.config.get_text_config() if hasattr(lm.model.config, "get_text_config") else lm.model.config
    layer_types = getattr(text, "layer_types", None) or []
    window = getattr(text, "sliding_window", None)
    return {
        "family": lm.table.family, "layers": g.n_layers, "d_model": g.d_model, "query heads": g.n_heads,
        "KV heads": g.n_kv_heads, "head_dim": g.head_dim, "vocabulary": int(text.vocab_size),
        "parameters (M)": round(sum(p.numel() for p in lm.model.parameters()) / 1e6, 1),
        "unembedding (M)": round(lm.model.get_output_embeddings().weight.numel() / 1e6, 1),
        "sliding-window layers": sum(t == "sliding_attention" for t in layer_types),
        "sliding window": window if layer_types and "sliding_attention" in layer_types else None,
        "norm gain": "1 + weight" if lm.table.norm_weight_offset else "weight",
        "embedding scale": f"sqrt(d) = {math.sqrt(g.d_model):.1f}" if lm.table.scales_embeddings else "1",
        "middle layer": lm.middle_layer, "dtype": str(lm.dtype).removeprefix("torch."),
    }


__all__ = [
    "EXTRACTED",
    "AcrossModelsSizes",
    "architecture_row",
    "attention_write_check",
    "check_code_paths",
    "clear_memory",
    "correct_at",
    "function_vector_write",
    "icl_reference",
    "key_head_correct",
    "key_head_results",
    "linearity_results",
    "middle_layer_results",
    "middle_ltv",
    "stream_rms",
    "sweep_ltvs",
    "sweep_results",
]
