"""The LTV trainer against its arithmetic floor, and seeds as rows of one batch against one after another.

*Floor*: one LTV (``--task``, the model's middle layer or ``--layer``, the ``--profile``'s sizes and fast recipe,
zero-shot) is trained twice from the same seed on an emptied prompt store: once timed, once under
``torch.utils.flop_counter.FlopCounterMode`` (which slows it; not timed). The count covers the matrix products and
scaled-dot-product attention, forward and backward, including the CPU attention kernel torch's table lacks
(:func:`cpu_attention_formulas` adds it with torch's own formulas); elementwise work (norms, activations, the
softmax over the vocabulary) is not counted, so the floor is a lower bound. The floor is the count divided by this
machine's best fp32 GEMM rate (SmolLM2's MLP shape, best of repeats, measured in the same process before and
after); the ratio printed is wall time / floor (1.0 would be every counted FLOP at the best GEMM rate). The same
is done once more warm (the prompt store filled by the first run, another seed): the step loop without the
prompts' first forwards.

*Seeds*: ``--seeds`` seeds of the same LTV, warm store, trained one after another (``train_ltv`` per seed) and as
rows of one batch (``train_ltv(..., seeds=[...])`` where the library has it, else
``ltvlib.ltv_seeds.train_ltv_seeds``), alternating for ``--rounds`` rounds; the ratio printed is one-after-another
over together (best round each), with the largest difference between the two paths' vectors.

*Tasks*: ``--tasks`` (comma-separated) at the same layer, one seed each, warm store, trained one after another
(``train_ltv`` per task) and together (``train_ltv([...tasks])``), the same way::

    OMP_NUM_THREADS=1 python bench/floor.py --model smollm2-135m --profile cpu --task antonym --seeds 3
    OMP_NUM_THREADS=2 python bench/floor.py --profile cpu --seeds 0 --tasks capital,capitalize,antonym,trec --layer 0
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from typing import Any


def gemm_rate(seconds: float = 2.0, shape: tuple[int, int, int] = (1024, 576, 1536)) -> float:
    """Best fp32 GFLOP/s of an ``(m x k) @ (k x n)`` product (default SmolLM2's MLP shape) over ``seconds``."""
    import torch

    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    best, end = 0.0, time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        for _ in range(10):
            torch.mm(a, b)
        best = max(best, 10 * 2 * m * k * n / (time.perf_counter() - t) / 1e9)
        if time.perf_counter() >= end:
            return best


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


def counted_flops(fn) -> tuple[int, dict[str, int], object]:
    """``fn()`` run under the FLOP counter (CPU attention included): total, per operator, and ``fn``'s result."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=cpu_attention_formulas()) as counter:
        result = fn()
    by_op: dict[str, int] = {}
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        name = str(op).split(".")[-1]
        by_op[name] = by_op.get(name, 0) + int(flops)
    return int(counter.get_total_flops()), by_op, result


def seeds_together():
    """The library's seeds-as-rows trainer, as ``f(lm, task, seeds, **train_ltv kwargs) -> list``, or None."""
    from ltvlib import ltv

    if "seeds" in inspect.signature(ltv.train_ltv).parameters:
        return lambda lm, task, seeds, **kw: list(ltv.train_ltv(lm, task, seeds=list(seeds), progress=False, **kw))
    try:
        from ltvlib.ltv_seeds import train_ltv_seeds
    except ImportError:
        return None
    return lambda lm, task, seeds, **kw: list(train_ltv_seeds(lm, task, list(seeds), **kw))


def floor_rows(lm, task: str, *, profile: str, layer: int | None = None, rate_seconds: float = 2.0) -> dict:
    """One LTV cold and one warm: wall time, counted FLOPs, floor at the best GEMM rate, and their ratio."""
    from ltvlib import prompt_store
    from ltvlib.ltv import train_ltv
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    prof = get_profile(profile)
    layer = lm.middle_layer if layer is None else layer
    splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)

    def train(seed: int):
        return train_ltv(lm, task, layers=[layer], recipe=prof.recipe, seed=seed, splits=splits, progress=False)

    rates = [gemm_rate(rate_seconds)]
    rows = []
    for name, seed, cold in (("cold (prompts' forwards included)", 0, True), ("warm (prompt store filled)", 1, False)):
        if cold:
            prompt_store.STORE.clear()
        t = time.perf_counter()
        ltv = train(seed)
        wall = time.perf_counter() - t
        if cold:
            prompt_store.STORE.clear()  # the counted run makes the same first forwards
        flops, by_op, counted = counted_flops(lambda s=seed: train(s))
        rows.append({"run": name, "seed": seed, "wall_s": wall, "steps": ltv.training.steps,
                     "counted_steps": counted.training.steps, "flops": flops, "by_op": by_op})
    rates.append(gemm_rate(rate_seconds))
    rate = max(rates)
    for r in rows:
        r["floor_s"] = r["flops"] / (rate * 1e9)
        r["over_floor"] = r["wall_s"] / r["floor_s"] if r["floor_s"] else float("inf")
    return {"model": lm.name, "task": task, "layer": layer, "profile": profile, "gemm_gflops": rates,
            "rate_gflops": rate, "rows": rows}


def seeds_rows(lm, task: str, *, profile: str, layer: int | None = None, n_seeds: int = 3, rounds: int = 1) -> dict:
    """``n_seeds`` seeds one after another against together (warm store); best round of each, and the vectors'
    largest difference relative to the vector's largest entry."""
    from ltvlib.ltv import train_ltv
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    together = seeds_together()
    if together is None:
        return {"available": False}
    prof = get_profile(profile)
    layer = lm.middle_layer if layer is None else layer
    splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)
    kw: dict[str, Any] = {"layers": [layer], "recipe": prof.recipe, "splits": splits}
    train_ltv(lm, task, seed=99, progress=False, **kw)  # fills the prompt store: both paths start warm
    seeds = list(range(n_seeds))
    times: dict[str, list[float]] = {"one after another": [], "together": []}
    vectors: dict[str, list] = {}
    for _ in range(rounds):
        t = time.perf_counter()
        vectors["one after another"] = [train_ltv(lm, task, seed=s, progress=False, **kw) for s in seeds]
        times["one after another"].append(time.perf_counter() - t)
        t = time.perf_counter()
        vectors["together"] = together(lm, task, seeds, **kw)
        times["together"].append(time.perf_counter() - t)
    diff = max(float((a.vectors - b.vectors).abs().max() / a.vectors.abs().max())
               for a, b in zip(vectors["one after another"], vectors["together"]))
    best = {k: min(v) for k, v in times.items()}
    return {"available": True, "seeds": n_seeds, "seconds": times, "best_s": best,
            "ratio": best["one after another"] / best["together"], "max_rel_diff": diff,
            "steps": {k: [v.training.steps for v in vs] for k, vs in vectors.items()}}


def tasks_rows(lm, tasks: list[str], *, profile: str, layer: int | None = None, seed: int = 0,
               rounds: int = 1) -> dict:
    """``tasks`` one after another against together at one layer and seed (warm store); best round of each, the
    vectors' largest difference relative to their largest entry, and the steps each run took."""
    from ltvlib.ltv import train_ltv
    from ltvlib.study.plans import get_profile

    prof = get_profile(profile)
    layer = lm.middle_layer if layer is None else layer
    kw: dict[str, Any] = {"layers": [layer], "recipe": prof.recipe, "n_train": prof.n_train, "n_val": prof.n_val,
                          "progress": False}
    try:
        train_ltv(lm, list(tasks), seed=seed + 99, **kw)  # fills the prompt store: both paths start warm
    except (TypeError, AttributeError):
        return {"available": False}
    times: dict[str, list[float]] = {"one after another": [], "together": []}
    vectors: dict[str, list] = {}
    for _ in range(rounds):
        t = time.perf_counter()
        vectors["one after another"] = [train_ltv(lm, task, seed=seed, **kw) for task in tasks]
        times["one after another"].append(time.perf_counter() - t)
        t = time.perf_counter()
        vectors["together"] = list(train_ltv(lm, list(tasks), seed=seed, **kw))
        times["together"].append(time.perf_counter() - t)
    diff = max(float((a.vectors - b.vectors).abs().max() / a.vectors.abs().max())
               for a, b in zip(vectors["one after another"], vectors["together"]))
    best = {k: min(v) for k, v in times.items()}
    return {"available": True, "tasks": list(tasks), "layer": layer, "seconds": times, "best_s": best,
            "ratio": best["one after another"] / best["together"], "max_rel_diff": diff,
            "steps": {k: [v.training.steps for v in vs] for k, vs in vectors.items()}}


def report(floor: dict | None, seeds: dict | None, tasks: dict | None = None) -> str:
    lines: list[str] = []
    if floor is not None:
        lines += [(f"model {floor['model']}, task {floor['task']}, layer {floor['layer']}, profile {floor['profile']}; "
                   f"best fp32 GEMM {floor['rate_gflops']:.1f} GFLOP/s (measured "
                   f"{', '.join(f'{r:.1f}' for r in floor['gemm_gflops'])})"),
                  "", "| run | steps | wall (s) | counted GFLOP | floor (s) | wall / floor |", "|---|---|---|---|---|---|"]
        for r in floor["rows"]:
            lines.append(f"| {r['run']} | {r['steps']} | {r['wall_s']:.1f} | {r['flops'] / 1e9:.1f} "
                         f"| {r['floor_s']:.2f} | {r['over_floor']:.2f}x |")
    if seeds is not None:
        if not seeds["available"]:
            lines.append("\nseeds as rows: not in this library")
        else:
            b = seeds["best_s"]
            lines.append(f"\n{seeds['seeds']} seeds: one after another {b['one after another']:.1f} s, together "
                         f"{b['together']:.1f} s: {seeds['ratio']:.2f}x; steps {seeds['steps']}; largest vector "
                         f"difference {seeds['max_rel_diff']:.1e} of the largest entry")
    if tasks is not None:
        if not tasks["available"]:
            lines.append("\ntasks as rows: not in this library")
        else:
            b = tasks["best_s"]
            lines.append(f"\n{len(tasks['tasks'])} tasks at layer {tasks['layer']} ({', '.join(tasks['tasks'])}): one "
                         f"after another {b['one after another']:.1f} s, together {b['together']:.1f} s: "
                         f"{tasks['ratio']:.2f}x; steps {tasks['steps']}; largest vector difference "
                         f"{tasks['max_rel_diff']:.1e} of the largest entry")
    return "\n".join(lines).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--task", default="antonym")
    ap.add_argument("--layer", type=int, default=None, help="default: the model's middle layer")
    ap.add_argument("--seeds", type=int, default=3, help="seeds for the together/one-after-another comparison (0: skip)")
    ap.add_argument("--tasks", default="", help="comma-separated tasks for the together/one-after-another comparison")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor runs")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rate-seconds", type=float, default=2.0)
    ap.add_argument("--json", default=None, help="also write the measurements here")
    args = ap.parse_args()
    from ltvlib.models import load_model

    lm = load_model(args.model, device="cpu")
    floor = (None if args.no_floor else
             floor_rows(lm, args.task, profile=args.profile, layer=args.layer, rate_seconds=args.rate_seconds))
    seeds = (seeds_rows(lm, args.task, profile=args.profile, layer=args.layer, n_seeds=args.seeds, rounds=args.rounds)
             if args.seeds else None)
    task_list = [t for t in args.tasks.split(",") if t]
    tasks = (tasks_rows(lm, task_list, profile=args.profile, layer=args.layer, rounds=args.rounds)
             if task_list else None)
    print(report(floor, seeds, tasks))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"floor": floor, "seeds": seeds, "tasks": tasks}, f, indent=1)


if __name__ == "__main__":
    main()
