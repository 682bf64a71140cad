"""Train one LTV at the `cpu` profile's sizes and save its vectors: compare two revisions of ltvlib on one machine.

Run it once per revision (each with that revision first on ``PYTHONPATH`` and its own empty ``LTV_CACHE_DIR``),
then compare the saved tensors; equal vectors show that a difference between two builds comes from the machine,
not from the code::

    LTV_CACHE_DIR=/tmp/c-old PYTHONPATH=<old checkout> python bench/ltv_once.py antonym 0 old.pt
    LTV_CACHE_DIR=/tmp/c-new PYTHONPATH=$PWD python bench/ltv_once.py antonym 0 new.pt
    python -c "import torch; print(torch.equal(torch.load('old.pt'), torch.load('new.pt')))"

Uses only names both the current code and 0120746 have (``study.plans``, ``study.ltvs.trained_ltv``).
"""

from __future__ import annotations

import argparse
import time

import torch

from ltvlib.models import load_model
from ltvlib.study.ltvs import trained_ltv
from ltvlib.study.plans import get_profile, run_sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task")
    parser.add_argument("layer", type=int)
    parser.add_argument("out", help="where the vectors go (torch.save of a (rows, d_model) tensor)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lm = load_model(args.model, device="cpu")
    start = time.time()
    ltv = trained_ltv(lm, args.task, run_sizes(get_profile("cpu")), layers=[args.layer], seed=args.seed)
    print(f"{args.task} layer {args.layer} seed {args.seed}: validation {ltv.best_val_accuracy}, best at step "
          f"{ltv.steps_to_best}, {time.time() - start:.0f} s")
    torch.save(ltv.vectors, args.out)


if __name__ == "__main__":
    main()
