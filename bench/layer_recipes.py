"""LTV recipes across layers (and models): does one stream-relative recipe train from the first layer to the last?

For each task, layer and recipe, trains one LTV (added at the block input of that layer, last token) on the
seeded 600/400 split from seed 0 and evaluates it on the first ``--n-test`` test queries (first-token
accuracy with its 95 % Wilson interval). A fast-recipe run that did not train is retried at a third of the
learning rate, at most twice (``TrainConfig.retries_without_progress``); ``trained`` then says how many runs were
made; ``lr`` is the kept run's (absolute, at the site). ``--single-run`` turns retries off, so that each row is one
run at its recipe's step size (``bench/step_rules.py`` and ``bench/step_blend.py`` read such rows). Recipes:

- ``default``: the fast recipe (``ltvlib.ltv.FAST_RECIPE``): initial range relative to the stream's RMS at the
  layer, learning rate relative to the stream entering the last block (``lr_final_stream_weight``, printed in the
  header);
- ``paper``: the released recipe (absolute lr 5e-3, batch 1; about 5 minutes per vector on a CPU);
- ``lr/N``, ``lr*N`` (any number N, e.g. ``lr/3``, ``lr*3``): the default with its learning rate divided or
  multiplied by N;
- ``site*N``: the default with its learning rate relative to the site's stream alone (``lr_final_stream_weight``
  0) at N times ``0.1 / 6.15`` (the parametrisation of the grids before 2026-12-03: the default then was
  ``site*27``); ``last*N``: relative to the last block's stream (weight 1) at N times ``0.1 / 6.15`` (the default
  is ``last*9``).

A recipe is chosen by the validation score its early stopping saw (``val``: balanced accuracy for
classification tasks, accuracy otherwise), never by the test accuracy printed beside it.

In-process prompt caches (the prompt store and the older per-call-site runners) are cleared before each
vector, so each vector's wall time includes building its own (as ``LearnedTaskVector.seconds`` does);
``--share-store`` keeps the prompt store across vectors instead (as a layer sweep or a chapter uses it: the first
vector of a task builds the entries, later layers and recipes reuse them), so the later rows show what one more
vector costs. Prints a Markdown table (one row per task, layer and recipe)
and, per task and layer, the best recipe and the default's gap to it. ``stopped by`` says what ended the kept run
(patience or its budget); ``val score`` is the validation score early stopping and the retries compare (balanced
accuracy for classification tasks, accuracy otherwise).

    OMP_NUM_THREADS=1 python bench/layer_recipes.py                       # the full grid (hours)
    python bench/layer_recipes.py --recipes default,lr/3,lr*3 --tasks trec,antonym --layers 0,15,29
    python bench/layer_recipes.py --model gemma3-270m --layers early,middle,last --tasks antonym
    python bench/layer_recipes.py --single-run --recipes site*729,site*2187 --layers 0   # site-relative steps

Layers are indices or ``early`` (``L // 6``), ``middle`` (``L // 2``) and ``last`` (``L - 1``).
"""

from __future__ import annotations

import argparse
import re
import time

from ltvlib import ltv as L
from ltvlib import memo, prompt_store
from ltvlib.evaluate import EvalSet, evaluate
from ltvlib.models import load_model
from ltvlib.stats import Proportion
from ltvlib.tasks import load_splits

RECIPES = {"default": L.FAST_RECIPE, "paper": L.PAPER_RECIPE}
RELATIVE_UNIT = 0.1 / L.FAST_REFERENCE_RMS
"""The relative learning rate that ``site*N`` and ``last*N`` multiply (lr 0.1 at SmolLM2's middle layer)."""
SMOLLM2_LAYERS = "0,3,8,15,22,26,29"
DEFAULT_RECIPES = "default,paper,lr/3,lr*3"
_SCALED = re.compile(r"(lr|site|last)([*/])(\d+(?:\.\d+)?)$")


def recipe(name: str) -> L.TrainConfig:
    """The config a recipe name stands for (module docstring); ``SystemExit`` naming what is allowed otherwise."""
    if name in RECIPES:
        return RECIPES[name]
    m = _SCALED.match(name)
    if m is None or float(m.group(3)) <= 0 or (m.group(1) != "lr" and m.group(2) == "/"):
        raise SystemExit(f"unknown recipe {name!r}; allowed: {', '.join(RECIPES)}, lr*N, lr/N, site*N, last*N "
                         "(N a positive number)")
    base, op, n = m.group(1), m.group(2), float(m.group(3))
    if base == "lr":
        return L.with_config(L.FAST_RECIPE, lr=L.FAST_RECIPE.lr * n if op == "*" else L.FAST_RECIPE.lr / n)
    return L.with_config(L.FAST_RECIPE, lr=RELATIVE_UNIT * n, lr_final_stream_weight=0.0 if base == "site" else 1.0)


def resolve_layer(spec: str, n_layers: int) -> int:
    """A layer index from an integer or ``early`` / ``middle`` / ``last``."""
    named = {"early": n_layers // 6, "middle": n_layers // 2, "last": n_layers - 1}
    if spec in named:
        return named[spec]
    try:
        layer = int(spec)
    except ValueError:
        raise SystemExit(f"unknown layer {spec!r}; allowed: an index in 0..{n_layers - 1}, early, middle, last") from None
    if not 0 <= layer < n_layers:
        raise SystemExit(f"layer {layer} is out of range for a model with {n_layers} layers")
    return layer


def stopped_by(ltv: L.LearnedTaskVector) -> str:
    """What ended the kept run: ``"patience"`` or ``"budget"``, from its curve: patience ended a run once
    ``patience`` epochs after its best (counted after a gain with ``patience_after_gain``) passed without a better
    score."""
    epochs = [c for c in ltv.curve if "val_score" in c]
    best_epoch = next((int(c["epoch"] or 0) for c in epochs if c["step"] == ltv.steps_to_best), 0)
    counting = ltv.trained or not ltv.config.patience_after_gain
    return "patience" if counting and int(epochs[-1]["epoch"] or 0) - best_epoch >= ltv.config.patience else "budget"


def runs_note(ltv: L.LearnedTaskVector) -> str:
    """`` (3 runs: x1, x0.333, x0.111)`` for a vector trained more than once (the learning rate's factor per run;
    the last run is the kept one), else ``""``."""
    if ltv.attempts <= 1:
        return ""
    factors = [ltv.config.retry_lr_factor**i for i in range(ltv.attempts)]
    return f" ({ltv.attempts} runs: {', '.join(f'x{f:.3g}' for f in factors)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", default="antonym,trec")
    ap.add_argument("--layers", default=SMOLLM2_LAYERS, help="comma-separated indices or early, middle, last")
    ap.add_argument("--recipes", default=DEFAULT_RECIPES,
                    help="comma-separated: default, paper, lr*N, lr/N, site*N, last*N")
    ap.add_argument("--n-test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=None,
                    help="override every recipe's maximum number of epochs (e.g. a longer budget for the fast recipes)")
    ap.add_argument("--single-run", action="store_true",
                    help="no retries (neither at smaller steps after a run that did not train nor at larger steps "
                         "after a run its budget ended): each row is one run at its recipe's learning rate, so that "
                         "rules that choose among runs can be compared offline")
    ap.add_argument("--share-store", action="store_true",
                    help="keep the prompt store across vectors (later rows then exclude building it)")
    args = ap.parse_args()
    recipes = args.recipes.split(",")
    configs = {name: recipe(name) for name in recipes}
    lm = load_model(args.model, device="cpu")
    layers = [resolve_layer(s, lm.n_layers) for s in args.layers.split(",")]
    print(f"model {lm.name} ({lm.n_layers} layers); test queries {args.n_test}; seed {args.seed}; prompt store "
          f"{'shared across vectors' if args.share_store else 'cleared before each vector'}"
          f"{'' if args.epochs is None else f'; at most {args.epochs} epochs'}"
          f"{'; single runs (no retries)' if args.single_run else ''}; default: relative lr "
          f"{L.FAST_RECIPE.lr:.4g}, lr_final_stream_weight {L.FAST_RECIPE.lr_final_stream_weight:g}\n")
    print("| task | layer | stream RMS | recipe | lr | init | val (start -> best) | test acc [95 % CI] | trained | "
          "best at step | steps | wall (s) | stopped by | val score |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
          flush=True)
    summary = []
    for task in args.tasks.split(","):
        splits = load_splits(task, seed=0)
        test = EvalSet(lm, task, splits.test[: args.n_test])
        for layer in layers:
            accs, vals = {}, {}
            for name in recipes:
                memo.entries(lm, "ltv.runners").clear()
                if not args.share_store:
                    prompt_store.STORE.clear()
                start = time.perf_counter()
                try:
                    config = configs[name] if args.epochs is None else L.with_config(configs[name], epochs=args.epochs)
                    if args.single_run:
                        config = L.with_config(config, retries_without_progress=0)
                    ltv = L.train_ltv(lm, task, layers=[layer], recipe=config, seed=args.seed, splits=splits,
                                      progress=False)
                except L.TrainingDivergedError as exc:  # a row of the table, not the end of the grid
                    print(f"| {task} | {layer} | | {name} | | | | diverged: {exc} | no | | | "
                          f"{time.perf_counter() - start:.0f} | diverged | |", flush=True)
                    continue
                wall = time.perf_counter() - start
                r = evaluate(test, ltv.edits())
                acc = Proportion(sum(r.correct), r.n)
                accs[name], vals[name] = acc.value, ltv.best_val_accuracy
                rms = ltv.stream_rms[0] if ltv.stream_rms else None
                print(f"| {task} | {layer} | {'' if rms is None else f'{rms:.3g}'} | {name} | "
                      f"{ltv.effective_lr[0]:.3g} | {ltv.effective_init[0]:.3g} | "
                      f"{100 * ltv.start_val_accuracy:.1f} -> {100 * ltv.best_val_accuracy:.1f} | {acc} | "
                      f"{'yes' if ltv.trained else 'no'}{runs_note(ltv)} | {ltv.steps_to_best} | {ltv.steps} | {wall:.0f} | "
                      f"{stopped_by(ltv)} | {100 * ltv.best_val_score:.2f} |", flush=True)
            summary.append((task, layer, accs, vals))
    print("\n| task | layer | best recipe by validation | its test acc | best test acc | default | "
          "default - best test (points) |\n|---|---|---|---|---|---|---|")
    for task, layer, accs, vals in summary:
        if not vals:  # every recipe diverged
            continue
        chosen = max(vals, key=lambda k: vals[k])
        best = max(accs, key=lambda k: accs[k])
        default = accs.get("default")
        gap = "" if default is None else f"{100 * (default - accs[best]):+.1f}"
        print(f"| {task} | {layer} | {chosen} | {100 * accs[chosen]:.1f} | {100 * accs[best]:.1f} ({best}) | "
              f"{'' if default is None else f'{100 * default:.1f}'} | {gap} |")


if __name__ == "__main__":
    main()
