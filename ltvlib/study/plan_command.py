"""``python -m ltvlib.book plan``: the command line of the cost plan (:mod:`ltvlib.study.cost`, what a run costs
before it runs) and, with ``--as-run``, of the count of a finished build (:mod:`ltvlib.study.as_run`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..flops import model_shape
from . import cost
from .as_run import as_run, report
from .cost import GPUS, Lengths, chapter_costs, render, second_model_floor, task_lengths, tokenizer_file


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ltvlib.book plan",
                                 description=cost.__doc__.split("\n\n")[0] if cost.__doc__ else None)
    ap.add_argument("--model", default="smollm2-135m",
                    help="registry name, Hugging Face id, local folder or shape (llama-8b, 32b, 70b)")
    ap.add_argument("--profile", default="paper", choices=("smoke", "cpu", "paper"))
    ap.add_argument("--gpu", default="h100", type=str.lower, choices=sorted(GPUS))
    ap.add_argument("--utilisation", "--mfu", dest="mfu", type=float, default=0.4,
                    help="fraction of the GPU's bf16 dense peak reached (default 0.4)")
    ap.add_argument("--chapters", nargs="*", default=None, help="only these chapters (e.g. 00 03)")
    ap.add_argument("--second-models", nargs="*", default=(),
                    help="also count chapter 08 on these models (its second models, e.g. gemma3-270m), a row each")
    ap.add_argument("--cpu-gflops", type=float, default=None,
                    help="also print the whole book's seconds at this CPU rate (GFLOP/s)")
    ap.add_argument("--as-run", nargs="?", const="", default=None, metavar="CACHE_DIR",
                    help="also count every trained vector and chapter 03 race run recorded in this cache (default "
                         "the cache) with the steps it took, in place of its cap (ltvlib.study.as_run)")
    args = ap.parse_args(argv)
    if args.as_run is not None and args.chapters:
        ap.error("--as-run counts a whole build's records: give it without --chapters")
    if not 0 < args.mfu <= 1:
        ap.error(f"--utilisation must lie in (0, 1], got {args.mfu}")
    try:
        shape = model_shape(args.model)
    except ValueError as exc:
        ap.error(str(exc))
    costs = chapter_costs(shape, args.profile, tokenizer=tokenizer_file(args.model))
    if args.chapters:
        unknown = sorted(set(args.chapters) - set(costs))
        if unknown:
            ap.error(f"unknown chapters {unknown}; the chapters are {', '.join(costs)}")
        costs = {k: v for k, v in costs.items() if k in args.chapters}
    for other in args.second_models:
        try:
            costs[f"08 on {other}"] = second_model_floor(other, args.profile)
        except ValueError as exc:
            ap.error(str(exc))
    print(render(shape, args.profile, args.gpu, args.mfu, costs))
    if args.cpu_gflops:
        total = sum(c.flops for c in costs.values())
        print(f"\nat {args.cpu_gflops:g} GFLOP/s: {total / args.cpu_gflops / 1e9:,.0f} s")
    if args.as_run is not None:
        root = Path(args.as_run).expanduser() if args.as_run else None
        for name, rows in [(args.model, [k for k in costs if not k.startswith("08 on")]),
                           *[(m, [f"08 on {m}"]) for m in args.second_models]]:
            tok = tokenizer_file(name)

            def lengths(task: str, tok: Path | None = tok) -> Lengths:
                return task_lengths(task, tok)

            ran = as_run(model_shape(name), name, lengths, root)
            print(f"\n{name}: " + report(ran, sum(costs[k].flops for k in rows), args.cpu_gflops))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
