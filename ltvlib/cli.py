"""``python -m ltvlib``: train, evaluate and save a learned task vector for your own task, from the shell.

``train`` reads a task file (:meth:`~ltvlib.tasks.Task.from_jsonl`, or :meth:`~ltvlib.tasks.Task.from_json`
for a ``.json`` list), cuts its seeded splits (:func:`~ltvlib.tasks.load_splits`, label-balanced training and
validation pools for classification), trains one LTV with :func:`~ltvlib.ltv.train_ltv` (one vector of shape
``(1, d_model)`` *added* to the residual stream *entering* block ``--layer`` at the last prompt position, the
paper's site) and evaluates zero-shot, k-shot ICL and the LTV on the test split with
:class:`~ltvlib.evaluate.EvalSet` / :func:`~ltvlib.evaluate.evaluate` (first-token accuracy; for
classification also the accuracy within the label set). Each accuracy is printed with its ``n`` and 95 %
Wilson interval; the vector (safetensors with its metadata) and a JSON of the results are written next to
each other, atomically, and only after everything ran.

``eval`` applies a saved vector to a task file or a registered task and prints its accuracy beside
zero-shot's. Bad input (an unknown model, a layer out of range, a malformed data file, a vector that does not
fit the model, a row or a k-shot prompt longer than the model's context: its file, line and token count) stops
with one line on stderr and exit code 2, before anything is trained or written; ``--max-tokens N`` cuts the
inputs of longer rows to fit N tokens instead, and reports which.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cache import atomic_write_json, code_version
from .stats import Proportion
from .tasks import DataFileError, Example, Task, TaskSplits, check_label_tokens, get_task, load_splits

if TYPE_CHECKING:
    from .models import LoadedModel
    from .prompts import CutInput
    from .task_vector import TaskVector

PROG = "python -m ltvlib"
DEFAULT_MODEL = "smollm2-135m"
# k-shot prompts draw their demonstrations as this many fixed blocks, shared by the queries in turn (the book's
# `cpu` runs draw 8 too): each block's keys and values are computed once.
ICL_DEMO_SETS = 8

EPILOG = f"""\
examples:
  # train on a JSONL file (one {{"input": ..., "output": ...}} per line) and evaluate on its test split
  {PROG} train --data my_task.jsonl --model smollm2-135m --layer middle
  # a classification task: labels = the distinct outputs; train/validation pools balanced across labels
  {PROG} train --data reviews.jsonl --kind classification --layer 12 --shots 5 --n-test 300 --out runs
  # apply a saved vector to another file, or to a registered task (sst2, antonym, ...)
  {PROG} eval --vector runs/reviews__smollm2-135m__L12__seed0.safetensors --data more_reviews.jsonl \\
      --kind classification
  {PROG} eval --vector runs/reviews__smollm2-135m__L12__seed0.safetensors --task sst2 --n-test 300

Models: smollm2-135m, gemma3-270m (embedded), a Hugging Face id (owner/model) or a local model folder.
"""


class CliError(ValueError):
    """Bad command-line input; reported as one line on stderr with exit code 2."""


# ---------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------


def _int_at_least(low: int, what: str):
    """An argparse type: an integer of at least ``low``, or a message naming the value and what is allowed."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "positive")
_count = _int_at_least(0, "non-negative")


def _add_task_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kind", choices=("generation", "classification"), default="generation",
                   help="generation (scored on the output's first token; default) or classification "
                   "(labels = the sorted distinct outputs)")
    p.add_argument("--name", help="task name (default: the file's stem)")
    p.add_argument("--max-tokens", type=_positive_int,
                   help="cut every input whose prompt and answer take more than N tokens to fit N (at most the "
                   "model's context); the rows cut are reported. Default: a row past the model's context is an error")


def _add_model_args(p: argparse.ArgumentParser, default: str | None) -> None:
    where = f"default {default}" if default else "default: the model the vector was trained on"
    p.add_argument("--model", default=default,
                   help=f"registered name (smollm2-135m, gemma3-270m), Hugging Face id or local folder ({where})")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, ... (default auto)")
    p.add_argument("--n-test", type=_positive_int, default=200, help="test queries evaluated (default 200)")


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m ltvlib`` argument parser (subcommands ``train`` and ``eval``)."""
    ap = argparse.ArgumentParser(
        prog=PROG, description="Train, evaluate and save a learned task vector for your own task.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{train,eval}")

    t = sub.add_parser(
        "train", help="train an LTV on a task file; evaluate zero-shot, ICL and the LTV; save the vector",
        description="Train an LTV on a task file, evaluate zero-shot, k-shot ICL and the LTV on the test split "
        "(accuracy with n and a 95 % Wilson interval) and save the vector with a JSON of the results.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("--data", required=True, type=Path,
                   help="task file: JSONL, one {\"input\": ..., \"output\": ...} object per line (a .json file: "
                   "a JSON list of such objects)")
    _add_task_args(t)
    _add_model_args(t, DEFAULT_MODEL)
    t.add_argument("--layer", default="middle",
                   help="injection layer: 'middle' (L // 2, the paper's) or an index, negative from the end")
    t.add_argument("--shots", type=_count, default=10,
                   help="demonstrations per k-shot ICL prompt (default 10; 0 skips ICL). The LTV itself is "
                   "trained and evaluated on zero-shot prompts")
    t.add_argument("--seed", type=int, default=0,
                   help="seeds the vector's initialisation, the training order and the ICL demonstrations "
                   "(the data split is always cut with seed 0)")
    t.add_argument("--recipe", choices=("fast", "paper"), default="fast", help="training recipe (default fast)")
    t.add_argument("--epochs", type=_positive_int, help="override the recipe's maximum number of epochs")
    t.add_argument("--samples-per-epoch", type=_positive_int,
                   help="override the recipe's training queries per epoch (with --epochs: a quick run)")
    t.add_argument("--no-balance", action="store_true",
                   help="classification: keep the training/validation pools' label proportions as in the data")
    t.add_argument("--no-progress", action="store_true", help="no progress bar during training")
    t.add_argument("--out", type=Path, default=Path("ltv-out"),
                   help="folder for the vector and its results JSON (default ./ltv-out)")
    t.set_defaults(func=_train)

    e = sub.add_parser(
        "eval", help="apply a saved vector to a task file or a registered task",
        description="Apply a saved LTV (as trained: added at its layers and positions) to a task's test split and "
        "print its accuracy beside zero-shot's, with n and 95 % Wilson intervals.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument("--vector", required=True, type=Path, help="a .safetensors file written by train")
    source = e.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=Path, help="task file (as for train)")
    source.add_argument("--task", help="a registered task name, e.g. antonym or sst2")
    _add_task_args(e)
    _add_model_args(e, None)
    e.set_defaults(func=_eval)
    return ap


# ---------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------


def task_from_file(path: Path, kind: str, name: str | None) -> Task:
    """A task from a ``.json`` list (:meth:`Task.from_json`) or any other file as JSONL (:meth:`Task.from_jsonl`)."""
    reader = Task.from_json if path.suffix == ".json" else Task.from_jsonl
    return reader(path, kind=kind, name=name)  # type: ignore[arg-type]


def check_context(task: Task, lm: LoadedModel, log: Any, max_tokens: int | None = None) -> list[CutInput]:
    """Every row of ``task``'s file fits the model's context (prompt and answer), checked before the splits
    are cut, anything is trained or anything is written (:func:`ltvlib.prompts.check_task_context`); with
    ``max_tokens`` (``--max-tokens``), the inputs of the rows longer than that are cut to fit instead
    (:func:`ltvlib.prompts.cut_inputs`) and returned, for :func:`_splits` and the report.

    Raises:
        ContextLengthError: (a ValueError: exit code 2) the message names the file, the line, the token count
            and the model's context.
        CliError: ``max_tokens`` above the model's context.
    """
    from .prompts import check_task_context, context_length, cut_inputs

    limit = context_length(lm)
    if max_tokens is not None:
        if limit is not None and max_tokens > limit:
            raise CliError(f"--max-tokens {max_tokens:,} is more than the model's context of {limit:,} positions")
        cuts = cut_inputs(task, lm.tokenizer, max_tokens)
        if cuts:
            log(_cut_line(cuts, max_tokens))
        return cuts
    longest = check_task_context(task, lm.tokenizer, limit)
    log(f"longest prompt and answer: {longest:,} tokens (the model's context: "
        f"{f'{limit:,}' if limit else 'not stated'})")
    return []


def _cut_line(cuts: Sequence[CutInput], max_tokens: int | None) -> str:
    lines = ", ".join(str(c.line) for c in cuts[:10]) + (", ..." if len(cuts) > 10 else "")
    return (f"cut {len(cuts)} input(s) to fit {max_tokens:,} tokens of prompt and answer (--max-tokens; "
            f"lines {lines}, the longest {max(c.tokens for c in cuts):,} tokens before)")


def check_icl_context(lm: LoadedModel, task: Task, splits: TaskSplits, *, shots: int, seed: int) -> None:
    """The k-shot ICL prompts :func:`evaluate_conditions` will build (the same ``ICL_DEMO_SETS`` blocks drawn
    from the training split with ``seed``, the test queries assigned to them in turn, as
    :class:`~ltvlib.evaluate.EvalSet` does) fit the model's context: checked before training, so that
    demonstrations too long for the model stop the run in seconds rather than after it.

    Raises:
        CliError: a prompt past the context; names the query's file and line, the token count and the limit.
    """
    import random

    from .prompts import ContextLengthError, context_length, encode_prompts, sample_demos

    limit = context_length(lm)
    if limit is None:
        return
    rng = random.Random(seed)
    blocks = [sample_demos(splits.train, shots, rng) for _ in range(ICL_DEMO_SETS)]
    test = list(splits.test)
    for b, block in enumerate(blocks):
        queries = test[b::ICL_DEMO_SETS]
        if not queries:
            continue
        try:
            encode_prompts(lm.tokenizer, task, queries, shared_demos=block, max_tokens=limit)
        except ContextLengthError as exc:
            raise CliError(f"{exc} (--shots {shots}: fewer demonstrations, or --shots 0 to skip ICL)") from None


def resolve_layer(spec: str, n_layers: int) -> int:
    """``"middle"`` -> ``n_layers // 2``; an integer (negative from the end) checked against the model."""
    from .sites import check_layer

    if spec == "middle":
        return n_layers // 2
    try:
        layer = int(spec)
    except ValueError:
        raise CliError(f"--layer must be 'middle' or an integer, got {spec!r}") from None
    return check_layer(layer, n_layers)


def _splits(task: Task, *, balance: bool | None, n_test: int, cuts: Sequence[CutInput] = ()) -> TaskSplits:
    # seed 0, as train_ltv's default: the split never moves with the training seed, so eval finds the same test
    splits = load_splits(task, seed=0, balance=balance)
    if cuts:  # --max-tokens: the rows cut to fit, in every split
        short = {c.original: c.input for c in cuts}

        def cut(examples: Sequence[Example]) -> tuple[Example, ...]:
            return tuple(replace(e, input=short.get(e.input, e.input)) for e in examples)

        splits = replace(splits, train=cut(splits.train), validation=cut(splits.validation), test=cut(splits.test))
    sizes = (len(splits.train), len(splits.validation), len(splits.test))
    if min(sizes) == 0:
        raise CliError(
            f"task {task.name!r} gives {sizes[0]} training / {sizes[1]} validation / {sizes[2]} test examples; "
            "each split needs at least one (a task file needs a few hundred rows to give meaningful numbers)"
        )
    return TaskSplits(splits.task, splits.train, splits.validation, splits.test[:n_test], splits.seed)


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _slug(text: str) -> str:
    """A file-name-safe form of a task name or a model name, id or path (its last component for a path)."""
    base = Path(text).name if Path(text).expanduser().is_dir() else text.replace("/", "--")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("._") or "model"


@dataclass(frozen=True)
class Score:
    """One condition's result on the test split.

    Attributes:
        accuracy: first-token accuracy over the whole vocabulary (the paper's metric).
        within_labels: classification only: argmax over the labels' first tokens.
        predicted_labels: classification only: how often each label was predicted (within the label set).
    """

    accuracy: Proportion
    within_labels: Proportion | None
    predicted_labels: dict[str, int] | None

    def line(self, what: str) -> str:
        text = f"{what:<14}{self.accuracy}"
        if self.within_labels is not None:
            text += f"   within labels {self.within_labels}"
        return text

    def to_dict(self) -> dict[str, Any]:
        def prop(p: Proportion | None) -> dict[str, Any] | None:
            if p is None:
                return None
            lo, hi = p.interval
            return {"accuracy": p.value, "correct": p.successes, "n": p.n, "ci95": [lo, hi]}

        return {"first_token": prop(self.accuracy), "within_labels": prop(self.within_labels),
                "predicted_labels": self.predicted_labels}


def _score(result: Any, examples: Sequence[Example], task: Task) -> Score:
    n = len(examples)
    within = predicted = None
    if result.label_predicted is not None:
        hits = sum(p == e.output for p, e in zip(result.label_predicted, examples))
        within = Proportion(hits, n)
        counts = Counter(result.label_predicted)
        predicted = {label: counts.get(label, 0) for label in task.labels or ()}
    return Score(Proportion(sum(result.correct), n), within, predicted)


def evaluate_conditions(
    lm: LoadedModel, task: Task, splits: TaskSplits, vector: TaskVector, *, shots: int, seed: int, log: Any
) -> dict[str, Score]:
    """Zero-shot, the vector (at its own layers and positions, scale 1; reported as ``"LTV"``) and, with
    ``shots > 0``, k-shot ICL on ``splits.test``.

    Zero-shot and the vector share one :class:`~ltvlib.evaluate.EvalSet` (the positions of the vector's edits
    decide how many last tokens are recomputed) and run in that order, so ``train`` and ``eval`` do the same
    computation.
    """
    from .evaluate import EvalSet, evaluate
    from .forward import tail_needed

    test = list(splits.test)
    edits = vector.edits()
    log(f"evaluating zero-shot and the LTV on {len(test)} test queries")
    positions = list(dict.fromkeys(e.position for e in edits))  # the vector's positions, in order, once each
    plain = EvalSet(lm, task, test, tail=tail_needed(positions))
    scores = {"zero-shot": _score(evaluate(plain), test, task), "LTV": _score(evaluate(plain, edits), test, task)}
    if shots:
        log(f"evaluating {shots}-shot ICL ({ICL_DEMO_SETS} demonstration blocks from the training split)")
        icl = EvalSet(lm, task, test, shots=shots, demo_pool=splits.train, seed=seed, demo_sets=ICL_DEMO_SETS,
                      cache_rows=False)
        scores[f"{shots}-shot ICL"] = _score(evaluate(icl), test, task)
    return scores


def _load_lm(name: str, device: str, log: Any) -> Any:
    from .models import load_model

    log(f"loading model {name}")
    try:
        return load_model(name, device=device)
    except OSError as exc:  # transformers' message for a missing or offline id does not always name it
        raise CliError(f"could not load model {name!r}: {exc}") from exc


def _print_predicted(score: Score) -> None:
    if score.predicted_labels is not None:
        counts = ", ".join(f"{label} {n}" for label, n in score.predicted_labels.items())
        print(f"  (labels the LTV predicts, within the label set: {counts})")


def _describe(task: Task) -> str:
    labels = f", labels {', '.join(task.labels)}" if task.labels else ""
    return f"{task.name} ({task.kind}{labels})"


# ---------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------


def _train(args: argparse.Namespace, log: Any) -> int:
    from .ltv import resolve_recipe, train_ltv, with_config

    task = task_from_file(args.data, args.kind, args.name)
    lm = _load_lm(args.model, args.device, log)
    # before the splits are cut (and cached): long rows stop here, in seconds (or are cut, with --max-tokens)
    cuts = check_context(task, lm, log, args.max_tokens)
    splits = _splits(task, balance=False if args.no_balance else None, n_test=args.n_test, cuts=cuts)
    if args.shots > len(splits.train):
        raise CliError(f"--shots {args.shots} needs at least {args.shots} training examples; "
                       f"task {task.name!r} has {len(splits.train)}")
    if args.shots:
        check_icl_context(lm, task, splits, shots=args.shots, seed=args.seed)
    if args.out.exists() and not args.out.is_dir():
        raise CliError(f"--out {args.out} exists and is not a folder")
    config = resolve_recipe(args.recipe)
    overrides = {k: v for k, v in (("epochs", args.epochs), ("samples_per_epoch", args.samples_per_epoch)) if v}
    if overrides:
        config = with_config(config, **overrides)
    data_hash = _file_sha256(args.data)

    layer = resolve_layer(args.layer, lm.n_layers)
    if task.labels is not None:
        check_label_tokens(task, lm.tokenizer)

    balanced = task.labels is not None and not args.no_balance
    log(f"training an LTV for {_describe(task)} at layer {layer} of {lm.n_layers} on {len(splits.train)} "
        f"training / {len(splits.validation)} validation queries"
        f"{' (balanced across labels)' if balanced else ''}, recipe {config.recipe}, seed {args.seed}")
    start = time.perf_counter()
    ltv = train_ltv(lm, task, layers=[layer], positions=[-1], recipe=config, seed=args.seed, splits=splits,
                    progress=not args.no_progress)
    scores = evaluate_conditions(lm, task, splits, ltv, shots=args.shots, seed=args.seed, log=log)
    seconds = time.perf_counter() - start
    t = ltv.training

    stem = f"{_slug(task.name)}__{_slug(args.model)}__L{layer}__seed{args.seed}"
    vector_path = args.out / f"{stem}.safetensors"
    results_path = args.out / f"{stem}.json"
    record = {
        "task": {"name": task.name, "kind": task.kind, "labels": list(task.labels) if task.labels else None,
                 "data": str(args.data.expanduser().absolute()), "data_sha256": data_hash,
                 "max_tokens": args.max_tokens, "cut_inputs": [{"line": c.line, "tokens": c.tokens} for c in cuts]},
        "model": args.model, "layer": layer, "positions": [-1], "site": "block_input", "mode": "add",
        "seed": args.seed, "recipe": config.recipe, "config": ltv.metadata()["config"], "shots": args.shots,
        "icl_demo_sets": ICL_DEMO_SETS if args.shots else None,
        "splits": {"seed": 0, "train": len(splits.train), "validation": len(splits.validation),
                   "test": len(splits.test), "balanced": balanced},
        "results": {what: s.to_dict() for what, s in scores.items()},
        "training": {"steps": t.steps, "seconds": t.seconds, "best_val_accuracy": t.best_val_accuracy,
                     "attempts": t.attempts, "learned": t.learned,
                     "learned_rule": {"val_accuracy_wilson_low": t.val_accuracy_low, "val_queries": t.val_n,
                                      "no_vector_val_accuracy": t.no_vector_val_accuracy,
                                      "majority_val_rate": t.majority_val_rate}},
        "warnings": [] if t.learned else [_not_learned(ltv, task)],
        "seconds": seconds, "vector": vector_path.name, "code_version": code_version(),
    }
    ltv.save(vector_path)
    atomic_write_json(results_path, record)

    print(f"task     {_describe(task)} from {args.data}")
    print(f"model    {args.model}: LTV added at the input of block {layer} of {lm.n_layers}, last prompt position")
    print(f"splits   {len(splits.train)} train / {len(splits.validation)} validation"
          f"{' (label-balanced)' if balanced else ''} / {len(splits.test)} test (seed 0)")
    if cuts:
        print(f"inputs   {_cut_line(cuts, args.max_tokens)}")
    print(f"training {t.steps} steps in {t.seconds:.0f} s, validation accuracy {t.best_val_accuracy:.3f}")
    print("test accuracy, first token (95 % Wilson interval):")
    for what in ("zero-shot", f"{args.shots}-shot ICL", "LTV"):
        if what in scores:
            print("  " + scores[what].line(what))
    _print_predicted(scores["LTV"])
    if not t.learned:
        print(f"WARNING  {_not_learned(ltv, task)}")
        log(f"warning: {_not_learned(ltv, task)}")
    print(f"saved    {vector_path}")
    print(f"         {results_path}")
    return 0


def _not_learned(ltv: Any, task: Any) -> str:
    """The warning for a vector of ``task`` that did not learn (:func:`ltvlib.ltv.learned_rule`), with the numbers it
    failed."""
    t = ltv.training
    within = " within the labels" if task.labels else ""  # ltvlib.ltv.no_vector_accuracy
    return (f"the vector did not learn after {t.attempts} attempt(s): the lower end of its validation accuracy's "
            f"95 % interval ({t.val_accuracy_low:.3f} over {t.val_n} queries) is not above both the accuracy "
            f"without a vector{within} ({t.no_vector_val_accuracy:.3f}) and the majority answer's rate "
            f"({t.majority_val_rate:.3f}); do not report it as a learned task vector")


def _eval(args: argparse.Namespace, log: Any) -> int:
    from .ltv import LearnedTaskVector

    if args.data is not None:
        task = task_from_file(args.data, args.kind, args.name)
    else:
        task = get_task(args.task)
    if not args.vector.is_file():
        raise CliError(f"--vector {args.vector}: file not found")
    try:
        ltv = LearnedTaskVector.load(args.vector)
    except Exception as exc:  # safetensors' own error types; any failure means "not a saved vector"
        raise CliError(f"--vector {args.vector} is not a vector saved by '{PROG} train': {exc}") from exc
    model = args.model or ltv.model
    lm = _load_lm(model, args.device, log)
    cuts: list[CutInput] = []
    if args.data is not None or args.max_tokens:  # registered tasks fit the embedded models; a file is checked
        cuts = check_context(task, lm, log, args.max_tokens)
    splits = _splits(task, balance=None, n_test=args.n_test, cuts=cuts)
    if ltv.vectors.shape[-1] != lm.d_model or max(ltv.layers) >= lm.n_layers:
        raise CliError(
            f"--vector {args.vector} (trained on {ltv.model!r}: width {ltv.vectors.shape[-1]}, layers "
            f"{list(ltv.layers)}) does not fit model {model!r} (width {lm.d_model}, {lm.n_layers} layers)"
        )
    if task.labels is not None:
        check_label_tokens(task, lm.tokenizer)
    scores = evaluate_conditions(lm, task, splits, ltv, shots=0, seed=0, log=log)
    source = args.data if args.data is not None else "the registry"
    print(f"task     {_describe(task)} from {source}; {len(splits.test)} test queries (seed 0)")
    print(f"vector   {args.vector} (task {ltv.task!r}, layers {list(ltv.layers)}, positions {list(ltv.positions)}, "
          f"trained on {ltv.model!r})")
    print(f"model    {model}")
    if cuts:
        print(f"inputs   {_cut_line(cuts, args.max_tokens)}")
    print("test accuracy, first token (95 % Wilson interval):")
    for what, score in scores.items():
        print("  " + score.line(what))
    _print_predicted(scores["LTV"])
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code (2 for bad input, 1 when training diverged)."""
    from .ltv import TrainingDivergedError

    args = build_parser().parse_args(argv)

    def log(message: str) -> None:
        print(f"[ltvlib] {message}", file=sys.stderr, flush=True)

    try:
        return args.func(args, log)
    except TrainingDivergedError as exc:
        print(f"{PROG} {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    # ValueError covers DataFileError, UnknownTaskError, CliError and the library's checks (layers, labels,
    # recipes, model names); OSError a missing file or model; ImportError an embedded model's missing package.
    except (DataFileError, ValueError, OSError, ImportError) as exc:
        print(f"{PROG} {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
