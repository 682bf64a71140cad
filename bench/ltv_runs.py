"""LTVs trained as a chapter trains them: wall time against the plan's count as planned and as counted.

Each ``--run`` (``task:layers:positions:seeds:shots``, e.g. ``trec:15:-1:0,1,2:0`` or
``antonym:0,4,8:-5,-4,-3,-2,-1:0:0``) is trained through ``train_ltv`` (its seeds stepped together where the trainer
can) with the ``--profile``'s sizes and fast recipe, from an emptied prompt store, twice: once timed, once under
``torch.utils.flop_counter.FlopCounterMode`` (``bench/floor.py``'s count, the CPU attention kernel included; it
slows the run, which is not timed). *As planned* is :func:`ltvlib.study.cost.ltv_training_cost` as ``python -m
ltvlib.book plan`` counts it (the schedule's maximum steps, one attempt per seed, the task's split sizes); *as
counted* is what the run computed, its retries and early stops included. Both are divided by ``--gflops`` (this
machine's best fp32 GEMM, which ``bench/floor.py`` measures); the ratios printed are wall time over each::

    OMP_NUM_THREADS=2 python bench/ltv_runs.py --profile cpu --gflops 178 --run trec:15:-1:0,1,2:0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


def _floor() -> ModuleType:
    """``bench/floor.py`` (its FLOP counter), imported once from beside this script."""
    if "floor" not in sys.modules:
        spec = importlib.util.spec_from_file_location("floor", Path(__file__).with_name("floor.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["floor"] = module
        spec.loader.exec_module(module)
    return sys.modules["floor"]


@dataclass(frozen=True)
class Run:
    """One ``--run``: a task's LTV at ``layers`` and ``positions`` for ``seeds``, with ``shots`` demonstrations."""

    task: str
    layers: tuple[int, ...]
    positions: tuple[int, ...]
    seeds: tuple[int, ...]
    shots: int

    @classmethod
    def parse(cls, spec: str) -> Run:
        parts = spec.split(":")
        if len(parts) != 5:
            raise ValueError(f"--run {spec!r}: expected task:layers:positions:seeds:shots, "
                             "e.g. trec:15:-1:0,1,2:0")

        def ints(text: str) -> tuple[int, ...]:
            return tuple(int(x) for x in text.split(","))

        return cls(parts[0], ints(parts[1]), ints(parts[2]), ints(parts[3]), int(parts[4]))


def measure(lm: Any, run: Run, *, profile: str, gflops: float) -> dict[str, Any]:
    """``run`` timed and counted, and the plan's count of it."""
    from ltvlib import prompt_store
    from ltvlib.flops import shape_from_config
    from ltvlib.ltv import train_ltv
    from ltvlib.study import plans as P
    from ltvlib.study.cost import Lengths, ltv_training_cost, tokenizer_counter
    from ltvlib.tasks import get_task, load_splits

    rs = P.run_sizes(P.get_profile(profile))
    splits = load_splits(run.task, seed=0, n_train=rs.n_train, n_val=rs.n_val)

    def train() -> list:
        prompt_store.STORE.clear()
        out = train_ltv(lm, run.task, layers=list(run.layers), positions=list(run.positions), seeds=list(run.seeds),
                        shots=run.shots, recipe=rs.recipe, splits=splits, progress=False)
        return out if isinstance(out, list) else [out]

    start = time.perf_counter()
    ltvs = train()
    wall = time.perf_counter() - start
    counted, _, _ = _floor().counted_flops(train)
    count, special = tokenizer_counter(lm.tokenizer)
    lengths = Lengths.of(get_task(run.task), list(splits.train), count, special)
    shape = shape_from_config(lm.model.config, lm.name)

    def planned(prefill: bool) -> float:
        return ltv_training_cost(shape, lengths, min(run.layers), rs.recipe, n_train=len(splits.train),
                                 n_val=len(splits.validation), shots=run.shots, positions=run.positions,
                                 prefill=prefill).flops

    # seeds stepped together share one prompt set (zero-shot); with shots each seed builds its own
    shared = run.shots == 0 and rs.recipe.prefix_cache
    plan = planned(True) + (len(run.seeds) - 1) * planned(not shared)
    rate = gflops * 1e9
    return {"run": run.__dict__, "wall_s": wall, "attempts": [v.training.attempts for v in ltvs],
            "kept_steps": [v.training.steps for v in ltvs], "learned": [v.training.learned for v in ltvs],
            "planned_flops": plan, "counted_flops": counted, "planned_s": plan / rate, "counted_s": counted / rate,
            "wall_over_planned": wall / (plan / rate), "wall_over_counted": wall / (counted / rate)}


def report(rows: list[dict[str, Any]]) -> str:
    header = ("| LTV | attempts | steps kept | wall (s) | as planned (s) | wall / planned | as counted (s) | "
              "wall / counted |")
    lines = [header, "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        run = r["run"]
        name = (f"{run['task']}, blocks {','.join(map(str, run['layers']))}, positions "
                f"{','.join(map(str, run['positions']))}, seeds {','.join(map(str, run['seeds']))}, "
                f"{run['shots']} shots")
        lines.append(f"| {name} | {'/'.join(map(str, r['attempts']))} | {'/'.join(map(str, r['kept_steps']))} | "
                     f"{r['wall_s']:.1f} | {r['planned_s']:.1f} | {r['wall_over_planned']:.2f}x | "
                     f"{r['counted_s']:.1f} | {r['wall_over_counted']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--gflops", type=float, required=True, help="this machine's best fp32 GEMM rate (bench/floor.py)")
    ap.add_argument("--run", action="append", required=True, help="task:layers:positions:seeds:shots (repeatable)")
    ap.add_argument("--json", default=None, help="also write the measurements here")
    args = ap.parse_args()
    from ltvlib.models import load_model

    runs = [Run.parse(s) for s in args.run]
    lm = load_model(args.model, device="cpu")
    rows = [measure(lm, r, profile=args.profile, gflops=args.gflops) for r in runs]
    print(report(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
