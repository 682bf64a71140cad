"""The arithmetic floor of the whole ``bench/sweep.py`` run: FLOPs of every LTV the prompt store path trains.

``bench/sweep.py --floor`` counts the first two LTVs only; issue 15's 3x target is a statement about all of them.
This script trains the same jobs in the same order (``sweep._jobs``: chapter 01's layer sweep, then seeds of the
middle layer) on this checkout's path, each under ``torch.utils.flop_counter.FlopCounterMode`` (the store emptied
first, so the first LTV of a task pays its prompts' forwards exactly as in the timed run), and records per job the
FLOPs by operator. It does not time the jobs (the counter slows them); the floor is the count divided by the best
fp32 GEMM rate measured in the same process before and after (``sweep.gemm_rate``, SmolLM2's MLP shape).

What the counter counts: matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``) and scaled-dot-product
attention, forward and backward (the CPU kernel ``_scaled_dot_product_flash_attention_for_cpu`` and its backward
are not in torch's table; :func:`cpu_attention_formulas` adds them with torch's own formulas for the other kernels). Elementwise work (norms, activations, the softmax over the vocabulary) is not
counted, so the floor is a lower bound on any implementation of the same computation at that GEMM rate.

``--timing`` takes a report of ``bench/sweep.py`` (for example ``bench/runs20/sweep.json``) and sets each job's
floor beside its measured wall time, and the whole floor beside the 3x target (the old path's wall time / 3)::

    OMP_NUM_THREADS=1 python bench/sweep_floor.py --tasks capital,capitalize,antonym,trec --layers profile \\
        --seed-tasks antonym,capital,capitalize,trec,sst2,snli,rte --seeds 3 \\
        --timing bench/runs20/sweep.json --out bench/runs24/sweep_floor.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other bench scripts, also when loaded by path
from sweep import _jobs, gemm_rate


def _cpu_attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out, query, key, value)


def cpu_attention_formulas() -> dict:
    """FlopCounterMode ``custom_mapping`` for the CPU attention kernels the models run under ``sdpa``."""
    import torch

    aten = torch.ops.aten
    return {
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
    }


def count_jobs(args: argparse.Namespace) -> dict:
    """FLOPs per job (total and by operator) of the prompt-store path, with the GEMM rate before and after."""
    from torch.utils.flop_counter import FlopCounterMode

    from ltvlib import prompt_store
    from ltvlib.ltv import train_ltv
    from ltvlib.models import load_model
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    prof = get_profile("cpu")
    lm = load_model("smollm2-135m", device="cpu")
    rate_before = gemm_rate(args.rate_seconds)
    prompt_store.STORE.clear()
    jobs = []
    for task, layer, seed in _jobs(args, lm):
        splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)
        builds = prompt_store.STORE.builds
        t = time.perf_counter()
        with FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas()) as counter:
            ltv = train_ltv(lm, task, layers=[layer], recipe=prof.recipe, seed=seed, splits=splits, progress=False)
        by_op: Counter[str] = Counter()
        # module name -> {op: flops}; "Global" holds every op once
        for op, flops in counter.get_flop_counts().get("Global", {}).items():
            by_op[str(op).split(".")[-1]] += int(flops)
        jobs.append(
            {
                "task": task,
                "layer": layer,
                "seed": seed,
                "flops": int(counter.get_total_flops()),
                "by_op": dict(by_op),
                "steps": ltv.steps,
                "store_builds": prompt_store.STORE.builds - builds,
                "counted_seconds": time.perf_counter() - t,
            }
        )
        print(json.dumps(jobs[-1]), flush=True)
    return {"jobs": jobs, "gemm_gflops_before": rate_before, "gemm_gflops_after": gemm_rate(args.rate_seconds)}


def compare(counted: dict, timing: dict) -> dict:
    """Each job's floor (at the best rate) beside the wall time a ``bench/sweep.py`` report measured for it."""
    rate = max(counted["gemm_gflops_before"], counted["gemm_gflops_after"]) * 1e9
    new = {(j["task"], j["layer"], j["seed"]): j for j in timing["summaries"]["new"]["jobs"]}
    old = {(j["task"], j["layer"], j["seed"]): j for j in timing["summaries"]["old"]["jobs"]}
    rows = []
    for job in counted["jobs"]:
        key = (job["task"], job["layer"], job["seed"])
        if key not in new:
            raise SystemExit(f"job {key} is not in the timing report (its jobs: {sorted(new)})")
        # a different step count means a different computation: kept, and shown, not silently compared
        rows.append(
            {
                "job": "/".join(map(str, key)),
                "floor_s": job["flops"] / rate,
                "new_s": new[key]["seconds"],
                "old_s": old[key]["seconds"],
                "steps": job["steps"],
                "timed_steps": new[key]["steps"],
            }
        )
    total_flops = sum(j["flops"] for j in counted["jobs"])
    mismatched = [r["job"] for r in rows if r["steps"] != r["timed_steps"]]
    floor = total_flops / rate
    old_wall, new_wall = timing["summaries"]["old"]["wall_seconds"], timing["summaries"]["new"]["wall_seconds"]
    return {
        "rate_gflops": rate / 1e9,
        "total_flops": total_flops,
        "floor_s": floor,
        "old_wall_s": old_wall,
        "new_wall_s": new_wall,
        "target_s": old_wall / 3,
        "floor_over_target": floor / (old_wall / 3),
        "old_over_floor": old_wall / floor,
        "new_over_floor": new_wall / floor,
        "steps_differ": mismatched,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tasks", type=lambda s: [t for t in s.split(",") if t], default=["capital", "capitalize", "antonym", "trec"]
    )
    parser.add_argument("--layers", default="profile", help="comma-separated layers, or 'profile' (chapter 01's)")
    parser.add_argument(
        "--seed-tasks",
        type=lambda s: [t for t in s.split(",") if t],
        default=["antonym", "capital", "capitalize", "trec", "sst2", "snli", "rte"],
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rate-seconds", type=float, default=10.0, help="how long to measure the GEMM rate, each time")
    parser.add_argument("--timing", default=None, help="a bench/sweep.py report to set the floor against")
    parser.add_argument("--counted", default=None, help="a report of this script: compare its count, count nothing")
    parser.add_argument("--out", default=None, help="JSON report (default: print only)")
    args = parser.parse_args()
    if args.counted:  # compare a saved count again, without counting
        report = json.loads(Path(args.counted).read_text())
    else:
        report = {"command": " ".join(["python", "bench/sweep_floor.py", *sys.argv[1:]]), **count_jobs(args)}
    if args.out:  # the count first: it is the expensive part
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    if args.timing:
        report["compared"] = c = compare(report, json.loads(Path(args.timing).read_text()))
        for row in c["rows"]:
            flag = (
                ""
                if row["steps"] == row["timed_steps"]
                else f"  (steps {row['steps']} here, {row['timed_steps']} timed)"
            )
            print(
                f"  {row['job']:16s} floor {row['floor_s']:6.1f} s  new {row['new_s']:6.1f} s "
                f"({row['new_s'] / row['floor_s']:.2f}x)  old {row['old_s']:6.1f} s ({row['old_s'] / row['floor_s']:.2f}x){flag}"
            )
        print(
            f"total {c['total_flops'] / 1e12:.1f} TFLOP / {c['rate_gflops']:.0f} GFLOP/s = floor {c['floor_s']:.0f} s; "
            f"old path {c['old_wall_s']:.0f} s ({c['old_over_floor']:.2f}x the floor), new {c['new_wall_s']:.0f} s "
            f"({c['new_over_floor']:.2f}x); 3x target {c['target_s']:.0f} s = {1 / c['floor_over_target']:.2f}x the floor; "
            f"step counts differ from the timed run for {len(c['steps_differ'])} jobs {c['steps_differ']}"
        )
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
