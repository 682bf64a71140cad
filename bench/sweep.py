"""Today's LTV path against another revision of the library, side by side: chapter 01's layer sweep and seeds.

Each path trains the same list of LTVs (the ``--profile``'s sizes and fast recipe, zero-shot, position -1, model
``--model``) in its own child process, one after the other, with ``OMP_NUM_THREADS`` as given:

- ``old``: the code of ``--baseline`` (a git ref, default ``HEAD``), exported with ``git archive`` into a temporary
  folder and put first on ``PYTHONPATH`` (``--baseline env`` instead runs this checkout with
  ``LTV_PROMPT_STORE=0``: the prompt store off);
- ``new``: this checkout, as it is in the working tree.

Jobs, in the order chapter 01 runs them: for each of ``--tasks``, the layers of ``--layers`` from the lowest up
(``profile``: :func:`ltvlib.study.plans.ltv_layers` of the profile); then for each of ``--seed-tasks``, seeds
``1..--seeds - 1`` at the middle layer (seed 0 is the sweep's or is added). The parent then evaluates every vector
of both paths on the same ``--n-test`` test queries (this checkout's evaluator) and reports the ratio of the two
wall times, the largest difference between the two paths' vectors, both paths' test accuracies and the peak
resident memory of each child.

``--seeds-together``: the new path trains the seeds of each (task, middle layer) in one call
(``train_ltv(..., seeds=[...])`` where the library has it, else ``ltvlib.ltv_seeds.train_ltv_seeds``; each seed's
time is the call's divided by the seeds); the old path is unchanged. The trainer's arithmetic floor is
``bench/floor.py``'s.

The whole ``cpu`` run (4 tasks x 11 layers, 3 seeds of 7 tasks; hours on two cores)::

    OMP_NUM_THREADS=1 python bench/sweep.py --profile cpu --baseline HEAD~1 --tasks capital,capitalize,antonym,trec \\
        --layers profile --seed-tasks antonym,capital,capitalize,trec,sst2,snli,rte --seeds 3

one LTV at several layers (``a+b+...`` in ``--layers``, as chapter 02's every fourth layer) beside one at the middle
layer, against an earlier revision::

    OMP_NUM_THREADS=2 python bench/sweep.py --profile cpu --baseline HEAD~1 --tasks rte \
        --layers 0+4+8+12+16+20+24+28,15 --seed-tasks sst2 --seeds 2

and a short one (one task, two layers, two seeds)::

    OMP_NUM_THREADS=1 python bench/sweep.py --profile cpu --baseline env --tasks antonym --layers 8,15 \\
        --seed-tasks antonym --seeds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


Job = tuple[str, tuple[int, ...], int]
"""(task, the layers of one LTV, seed)."""


def layer_sets(spec: str) -> list[tuple[int, ...]]:
    """``--layers``: comma-separated items, each one layer or several joined by ``+`` (one LTV with a vector at each,
    trained jointly, as chapter 02's multi-layer settings), lowest first."""
    return sorted(tuple(sorted(int(l) for l in item.split("+"))) for item in spec.split(",") if item)


def _jobs(args: argparse.Namespace, lm) -> list[Job]:
    from ltvlib.study.plans import get_profile, ltv_layers

    prof = get_profile(args.profile)
    jobs: list[Job] = []
    for task in args.tasks:
        sets = ([(l,) for l in ltv_layers(lm.n_layers, task, prof)] if args.layers == "profile"
                else layer_sets(args.layers))
        jobs += [(task, layers, 0) for layers in sets]
    for task in args.seed_tasks:
        for seed in range(args.seeds):
            if (task, (lm.middle_layer,), seed) not in jobs:
                jobs.append((task, (lm.middle_layer,), seed))
    return jobs


def _name(layers: tuple[int, ...]) -> str:
    return "+".join(map(str, layers))


def _groups(jobs: list[Job], together: bool) -> list[list[Job]]:
    """Jobs one by one, or with ``together`` consecutive seeds of the same (task, layer) as one group."""
    groups: list[list[Job]] = []
    for job in jobs:
        if together and groups and groups[-1][-1][:2] == job[:2]:
            groups[-1].append(job)
        else:
            groups.append([job])
    return groups


def _train_together(lm, task: str, seeds: list[int], **kw) -> list:
    """Seeds of one LTV as rows of one batch, through the library's public API."""
    import inspect

    from ltvlib import ltv

    if "seeds" in inspect.signature(ltv.train_ltv).parameters:
        return list(ltv.train_ltv(lm, task, seeds=seeds, progress=False, **kw))
    from ltvlib.ltv_seeds import train_ltv_seeds

    return train_ltv_seeds(lm, task, seeds, **kw)


def child(args: argparse.Namespace) -> None:
    import torch

    from ltvlib.ltv import train_ltv
    from ltvlib.models import load_model
    from ltvlib.study.plans import get_profile
    from ltvlib.tasks import load_splits

    prof = get_profile(args.profile)
    lm = load_model(args.model, device="cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records, vectors = [], {}
    start = time.perf_counter()
    together = args.seeds_together and args.child == "new"
    for group in _groups(_jobs(args, lm), together):
        task, layer = group[0][0], group[0][1]
        splits = load_splits(task, seed=0, n_train=prof.n_train, n_val=prof.n_val)
        t, cpu = time.perf_counter(), time.process_time()
        if len(group) > 1:
            ltvs = _train_together(lm, task, [seed for _, _, seed in group], layers=list(layer), recipe=prof.recipe,
                                   splits=splits)
        else:
            ltvs = [train_ltv(lm, task, layers=list(layer), recipe=prof.recipe, seed=group[0][2], splits=splits,
                              progress=False)]
        # seeds trained together share their wall and CPU time equally
        seconds, cpu_seconds = (time.perf_counter() - t) / len(group), (time.process_time() - cpu) / len(group)
        for (_, _, seed), ltv in zip(group, ltvs):
            records.append({"task": task, "layer": _name(layer), "seed": seed, "seconds": seconds, "cpu_seconds": cpu_seconds,
                            "together": len(group), "steps": ltv.training.steps,
                            "best_val_accuracy": ltv.training.best_val_accuracy, "trained": ltv.training.trained})
            vectors[f"{task}/{_name(layer)}/{seed}"] = ltv.vectors
            print(json.dumps(records[-1]), flush=True)
    wall = time.perf_counter() - start
    cpu_total = sum(r["cpu_seconds"] for r in records)
    store = None
    try:
        from ltvlib import prompt_store

        s = prompt_store.STORE
        store = {"peak_bytes": s.peak_bytes, "builds": s.builds, "hits": s.hits, "prefilled_rows": s.prefilled_rows,
                 "enabled": prompt_store.enabled()}
    except ImportError:
        pass
    torch.save(vectors, out / "vectors.pt")
    summary = {"wall_seconds": wall, "cpu_seconds": cpu_total, "jobs": records, "store": store,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "load_average": os.getloadavg()}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


def _export_baseline(ref: str, into: Path) -> Path:
    archive = into / "baseline.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref, "ltvlib", "data"], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "code", filter="data")
    return into / "code"


def _evaluate(paths: dict[str, Path], n_test: int, model: str) -> dict[str, dict[str, float]]:
    import torch

    from ltvlib.evaluate import EvalSet, evaluate
    from ltvlib.inject import VectorEdit
    from ltvlib.models import load_model
    from ltvlib.tasks import load_splits

    lm = load_model(model, device="cpu")
    vectors = {name: torch.load(p / "vectors.pt") for name, p in paths.items()}
    sets: dict[str, EvalSet] = {}
    acc: dict[str, dict[str, float]] = {name: {} for name in paths}
    for key in next(iter(vectors.values())):
        task, layers, _ = key.split("/")
        if task not in sets:
            sets = {task: EvalSet(lm, task, load_splits(task, seed=0).test[:n_test], tail=1)}
        for name in paths:
            edits = [VectorEdit(int(l), -1, vectors[name][key][i]) for i, l in enumerate(layers.split("+"))]
            acc[name][key] = evaluate(sets[task], edits).accuracy
    diff = {key: float((vectors["new"][key] - vectors["old"][key]).abs().max()) for key in vectors["new"]}
    rel = {key: diff[key] / float(vectors["old"][key].abs().max()) for key in diff}
    return {"accuracy": acc, "max_abs_diff": diff, "max_rel_diff": rel}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--profile", default="cpu", help="sizes and fast recipe (ltvlib.study.plans)")
    parser.add_argument("--tasks", type=lambda s: [t for t in s.split(",") if t], default=["capital", "capitalize", "antonym", "trec"])
    parser.add_argument("--layers", default="profile",
                        help="comma-separated layers, a+b+... for one LTV at several layers, or 'profile' (chapter 01's)")
    parser.add_argument("--seed-tasks", type=lambda s: [t for t in s.split(",") if t],
                        default=["antonym", "capital", "capitalize", "trec", "sst2", "snli", "rte"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--baseline", default="HEAD", help="git ref of the other path, or 'env' (LTV_PROMPT_STORE=0)")
    parser.add_argument("--n-test", type=int, default=200)
    parser.add_argument("--seeds-together", action="store_true",
                        help="the new path trains consecutive seeds of one (task, layer) as rows of one batch")
    parser.add_argument("--parallel", action="store_true",
                        help="run the two paths at the same time (on a shared machine both then see the same load)")
    parser.add_argument("--out", default=None, help="JSON report (default: print only)")
    parser.add_argument("--child", choices=["old", "new"], help=argparse.SUPPRESS)
    parser.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.out = args.dir
        child(args)
        return
    work = Path(tempfile.mkdtemp(prefix="ltv-sweep-"))
    base = ROOT if args.baseline == "env" else _export_baseline(args.baseline, work)
    passthrough = [a for a in sys.argv[1:] if a != "--parallel"]
    if "--out" in passthrough:
        i = passthrough.index("--out")
        del passthrough[i : i + 2]
    dirs, running = {}, []
    # new first: whatever the two share on disk (the stream RMS cache) favours the old path, not the new one
    for path in ("new", "old"):
        env = dict(os.environ, PYTHONPATH=str(ROOT if path == "new" else base))
        if path == "old" and args.baseline == "env":
            env["LTV_PROMPT_STORE"] = "0"
        dirs[path] = work / path
        cmd = [sys.executable, str(ROOT / "bench" / "sweep.py"), *passthrough, "--child", path, "--dir", str(dirs[path])]
        print(f"== {path}: PYTHONPATH={env['PYTHONPATH']}", flush=True)
        running.append(subprocess.Popen(cmd, env=env, cwd=work))
        if not args.parallel:
            running[-1].wait()
    for proc in running:
        if proc.wait() != 0:
            raise SystemExit(f"a child failed: {proc.args}")
    summaries = {p: json.loads((d / "summary.json").read_text()) for p, d in dirs.items()}
    compared = _evaluate(dirs, args.n_test, args.model)
    report = {"command": " ".join(["OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "?"), "python", "bench/sweep.py",
                                   *sys.argv[1:]]),
              "baseline": args.baseline, "summaries": summaries, **compared}
    new, old = summaries["new"], summaries["old"]
    print(f"wall: old {old['wall_seconds']:.0f} s, new {new['wall_seconds']:.0f} s, "
          f"speed-up {old['wall_seconds'] / new['wall_seconds']:.2f}x; CPU: old {old['cpu_seconds']:.0f} s, "
          f"new {new['cpu_seconds']:.0f} s, {old['cpu_seconds'] / new['cpu_seconds']:.2f}x")
    store = new["store"] or {}
    print(f"peak RSS: old {old['peak_rss_bytes'] / 2**30:.2f} GiB, new {new['peak_rss_bytes'] / 2**30:.2f} GiB; "
          f"store peak {store.get('peak_bytes', 0) / 2**20:.0f} MiB")
    same = sum(compared["accuracy"]["new"][k] == compared["accuracy"]["old"][k] for k in compared["accuracy"]["new"])
    print(f"test accuracies equal for {same} of {len(compared['accuracy']['new'])} vectors; "
          f"max |new - old| = {max(compared['max_abs_diff'].values()):.2e} "
          f"(relative to the vector's largest entry {max(compared['max_rel_diff'].values()):.2e})")
    print("per job (old wall s, new wall s, old CPU s, new CPU s, old acc, new acc):")
    for a, b in zip(old["jobs"], new["jobs"]):
        key = f"{a['task']}/{a['layer']}/{a['seed']}"
        print(f"  {key:16s} {a['seconds']:6.1f} {b['seconds']:6.1f} {a['cpu_seconds']:6.1f} {b['cpu_seconds']:6.1f} {compared['accuracy']['old'][key]:.3f} "
              f"{compared['accuracy']['new'][key]:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
