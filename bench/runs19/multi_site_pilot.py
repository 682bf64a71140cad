"""Session 19 pilot: chapter 02's multi-site LTVs (every4: 8 vectors, last5: 5, lxp: 40) with each vector's
learning rate divided by n ** p (``TrainConfig.lr_vector_count_exponent = p``); prints one JSON line per run with
its validation scores (start and best: what early stopping sees). Seed 0, the cpu profile's splits.

Usage: python bench/runs19/multi_site_pilot.py P TASK:SETTING [...]   (SETTING in lxp, every4, last5)

The recorded runs (pilot_p*.jsonl) were made before the field existed, by dividing the recipe's lr by n ** p,
which is the same learning rate."""
import json
import sys
import time
from dataclasses import replace

from ltvlib.ltv import train_ltv
from ltvlib.models import load_model
from ltvlib.study.plans import PROFILES, run_sizes

p = float(sys.argv[1]); jobs = sys.argv[2:]
rs = run_sizes(PROFILES["cpu"])
lm = load_model()
EVERY4 = [0, 4, 8, 12, 16, 20, 24, 28]
for job in jobs:
    task, setting = job.split(":")
    positions = (-5, -4, -3, -2, -1) if setting in ("lxp", "last5") else (-1,)
    layers = [15] if setting == "last5" else EVERY4
    n = len(layers) * len(positions)
    cfg = replace(rs.recipe, lr_vector_count_exponent=p)
    t0 = time.perf_counter()
    v = train_ltv(lm, task, layers=layers, positions=positions, recipe=cfg, seed=0, n_train=rs.n_train,
                  n_val=rs.n_val, cache=False, progress=False)
    print(json.dumps({"task": task, "setting": setting, "n": n, "p": p, "lr": cfg.lr / n ** p, "start": v.start_val_score,
                      "best": v.best_val_score, "trained": v.trained, "attempts": v.attempts,
                      "steps_to_best": v.steps_to_best, "s": round(time.perf_counter() - t0, 1)}), flush=True)
