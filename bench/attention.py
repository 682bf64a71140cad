"""Cached keys and values read where they are instead of copied, side by side in one run.

Two comparisons on one model, each alternating the two paths for ``--rounds`` rounds (best round each):

- *Tails*: ``--rows`` prompts of ``--prefix`` random tokens (one left-padded) computed once, then a tail of
  ``--tail`` positions entering block ``--layer`` (default: the middle) run through the last block with and without
  a backward (as an LTV's training step and validation run it), under transformers' ``sdpa`` attention (every
  key/value head repeated once per query head in its group before torch's kernel) and under the library's grouped
  attention (``ltvlib.attention``: the grouped heads passed to the kernel as they are).
- *Head scan*: a function vector's indirect effects (``--n-ie`` corrupted ``--shots``-shot prompts of ``--task``,
  every head patched in turn), with the patched copies of each prompt's last token as rows of a batch, each row
  holding a copy of the prompt's cached prefix (at most 512 MiB of keys and values per pass), against the library's
  ``indirect_effects``, which runs them as positions of one sequence after the prefix
  (``ltvlib.kv_cache.forward_alternatives``).

Prints the wall times, their ratios (copying / reading) and the largest differences between the paths' outputs::

    OMP_NUM_THREADS=2 python bench/attention.py --model smollm2-135m --task rte --n-ie 2
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from ltvlib.attention import ATTENTION
from ltvlib.baselines.function_vector import (
    clean_prompts,
    corrupted_prompts,
    indirect_effects,
    mean_head_outputs,
    top_heads,
)
from ltvlib.heads import HeadPatch, head_outputs
from ltvlib.kv_cache import compute_prefix, forward_from_layer, forward_tokens
from ltvlib.models import load_model
from ltvlib.tasks import get_task, load_splits


def _tail_pass(lm: Any, prefix: Any, hidden: torch.Tensor, layer: int, backward: bool) -> tuple[torch.Tensor, Any]:
    mask = torch.ones(hidden.shape[:2], dtype=torch.long)
    if not backward:
        with torch.no_grad():
            return forward_from_layer(lm, hidden, layer, mask, prefix=prefix, logits_to_keep=hidden.shape[1]), None
    h = hidden.clone().requires_grad_(True)
    logits = forward_from_layer(lm, h, layer, mask, prefix=prefix, logits_to_keep=hidden.shape[1])
    logits.float().logsumexp(-1).sum().backward()
    return logits.detach(), h.grad


def measure_tails(lm: Any, *, rows: int, prefix_len: int, tail: int, layer: int | None = None,
                  rounds: int = 3, seed: int = 0) -> dict[str, Any]:
    """Best-of-``rounds`` seconds of a tail pass (forward; forward and backward) under each attention."""
    layer = lm.n_layers // 2 if layer is None else layer
    g = torch.Generator().manual_seed(seed)
    vocab = lm.model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(5, vocab, (rows, prefix_len), generator=g)
    mask = torch.ones_like(ids)
    mask[0, : prefix_len // 5] = 0
    prefix = compute_prefix(lm, ids, mask)
    hidden = torch.randn(rows, tail, lm.d_model, generator=g)
    out: dict[str, Any] = {"rows": rows, "prefix": prefix_len, "tail": tail, "layer": layer}
    before = lm.model.config._attn_implementation
    try:
        for backward in (False, True):
            best = {"repeated": float("inf"), "grouped": float("inf")}
            results = {}
            for _ in range(rounds):
                for name, impl in (("repeated", "sdpa"), ("grouped", ATTENTION)):
                    lm.model.set_attn_implementation(impl)
                    start = time.perf_counter()
                    results[name] = _tail_pass(lm, prefix, hidden, layer, backward)
                    best[name] = min(best[name], time.perf_counter() - start)
            kind = "backward" if backward else "forward"
            diff = float((results["repeated"][0] - results["grouped"][0]).abs().max())
            if backward:
                diff = max(diff, float((results["repeated"][1] - results["grouped"][1]).abs().max()))
            out[kind] = {"seconds": best, "ratio": best["repeated"] / best["grouped"], "max_abs_diff": diff}
    finally:
        lm.model.set_attn_implementation(before)
    return out


@torch.no_grad()
def _rows_scan(lm: Any, prompts: Any, gold: list[int], means: torch.Tensor,
               max_cache_bytes: int = 512 * 2**20) -> torch.Tensor:
    """Indirect effects with the patched copies as batch rows over an expanded prefix (each row a copy)."""
    geo = lm.geometry
    pairs = [(l, h) for l in range(geo.n_layers) for h in range(geo.n_heads)]
    rows = prompts.full_rows()
    out = torch.zeros(len(rows), len(pairs))
    per_token = 2 * geo.n_layers * geo.n_kv_heads * geo.head_dim * lm.dtype.itemsize
    for i, row in enumerate(rows):
        ids = torch.tensor([row[:-1]])
        prefix = compute_prefix(lm, ids, torch.ones_like(ids))
        jobs: list[int | None] = [None, *range(len(pairs))]
        per_pass = max(2, min(512, max_cache_bytes // max(1, per_token * (prefix.length + 1))))
        probs = torch.zeros(len(jobs))
        for start in range(0, len(jobs), per_pass):
            block = jobs[start : start + per_pass]
            n = len(block)
            tokens = torch.full((n, 1), row[-1])
            tail_mask = torch.ones_like(tokens)
            full_mask = torch.cat([prefix.attention_mask.expand(n, -1), tail_mask], dim=1)
            patches = [HeadPatch(pairs[j][0], pairs[j][1], -1, means[pairs[j]], rows=[r])
                       for r, j in enumerate(block) if j is not None]
            with head_outputs(lm, patches=patches, attention_mask=full_mask, offset=prefix.length):
                logits, _ = forward_tokens(lm, tokens, tail_mask, prefix=prefix.expand(n))
            probs[start : start + n] = logits[:, -1].float().softmax(-1)[:, gold[i]]
        out[i] = probs[1:] - probs[0]
    return out


def measure_scan(lm: Any, task_name: str, *, n_ie: int = 2, n_mean: int = 4, shots: int = 10, k: int = 10,
                 rounds: int = 1) -> dict[str, Any]:
    """Best-of-``rounds`` seconds of the head scan as batch rows and as positions of one sequence."""
    task = get_task(task_name)
    pool = load_splits(task).train
    with torch.no_grad():
        means = mean_head_outputs(lm, clean_prompts(lm, task, pool, shots=shots, n=n_mean, seed=0))
    prompts, gold = corrupted_prompts(lm, task, pool, shots=shots, n=n_ie, seed=0)
    best = {"rows": float("inf"), "positions": float("inf")}
    tables: dict[str, torch.Tensor] = {}
    for _ in range(rounds):
        for name in ("rows", "positions"):
            start = time.perf_counter()
            tables[name] = (_rows_scan(lm, prompts, gold, means) if name == "rows"
                            else indirect_effects(lm, prompts, gold, means))
            best[name] = min(best[name], time.perf_counter() - start)
    tops = {name: top_heads(t.mean(0).view(lm.geometry.n_layers, lm.geometry.n_heads), k) for name, t in tables.items()}
    return {"task": task.name, "n_ie": n_ie, "shots": shots, "k": k, "seconds": best,
            "tokens": sum(len(r) for r in prompts.full_rows()) / len(prompts),
            "ratio": best["rows"] / best["positions"],
            "max_abs_diff": float((tables["rows"] - tables["positions"]).abs().max()),
            "largest_ie": float(tables["rows"].abs().max()), "same_top": tops["rows"] == tops["positions"]}


def report(model: str, tails: list[dict[str, Any]], scan: dict[str, Any] | None) -> str:
    lines = [f"model {model}, torch threads {torch.get_num_threads()}", "",
             "| rows x prefix + tail (block) | pass | repeated heads (s) | grouped heads (s) | ratio | max diff |",
             "| --- | --- | --- | --- | --- | --- |"]
    for t in tails:
        for kind in ("forward", "backward"):
            m = t[kind]
            lines.append(f"| {t['rows']} x {t['prefix']} + {t['tail']} ({t['layer']}) | {kind} | "
                         f"{m['seconds']['repeated']:.3f} | {m['seconds']['grouped']:.3f} | {m['ratio']:.2f}x | "
                         f"{m['max_abs_diff']:.1e} |")
    if scan is not None:
        s = scan["seconds"]
        lines += ["", (f"head scan, {scan['task']}, {scan['n_ie']} corrupted {scan['shots']}-shot prompts of "
                       f"{scan['tokens']:.0f} tokens: batch rows {s['rows']:.1f} s, positions of one sequence "
                       f"{s['positions']:.1f} s, {scan['ratio']:.2f}x; max |difference| {scan['max_abs_diff']:.1e} "
                       f"(largest |IE| {scan['largest_ie']:.3f}); same top-{scan['k']}: {scan['same_top']}")]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--shapes", default="16x1000+3,32x200+4,64x60+3",
                    help="tail passes as ROWSxPREFIX+TAIL, comma-separated")
    ap.add_argument("--layer", type=int, default=None, help="block the tails enter (default: the middle)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--task", default="rte", help="head scan task ('' skips the scan)")
    ap.add_argument("--n-ie", type=int, default=2)
    ap.add_argument("--shots", type=int, default=10)
    args = ap.parse_args()
    lm = load_model(args.model, device="cpu")
    tails = []
    for shape in [s for s in args.shapes.split(",") if s]:
        rows, rest = shape.split("x")
        prefix, tail = rest.split("+")
        tails.append(measure_tails(lm, rows=int(rows), prefix_len=int(prefix), tail=int(tail), layer=args.layer,
                                   rounds=args.rounds))
    scan = measure_scan(lm, args.task, n_ie=args.n_ie, shots=args.shots) if args.task else None
    print(report(args.model, tails, scan))


if __name__ == "__main__":
    main()
