"""The unembedding of a batch's kept positions as one product against the strided slice, side by side in one run.

transformers' heads slice the last ``logits_to_keep`` positions (``hidden[:, -n:, :]``, strided when the batch
has more than one row) and hand the slice to the output embedding. Torch's ``matmul`` then runs one product per
row, each reading the whole ``vocab x d`` weight; the loaded models copy the slice into one block first
(``ltvlib.unembedding``). Each shape runs a whole forward both ways, alternating for ``--rounds`` rounds (best
round each): *strided*, the decoder followed by the head's product on the slice (what the head does without the
copy), and *one block*, the model's own forward with ``logits_to_keep`` (the copy, then one product). ``forward``
is a pass without gradients (an evaluation's or a first pass's); ``backward`` adds the gradient with respect to the
input embeddings (an adapter's training step with teacher-forced answers).

Prints the wall times, their ratios (strided / one block) and the largest difference between the two ways' logits
(and gradients), relative to their largest value::

    OMP_NUM_THREADS=2 python bench/unembedding.py --models smollm2-135m gemma3-270m
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import torch.nn.functional as F

from ltvlib.models import load_model


def _strided_logits(model: Any, embeds: torch.Tensor, kept: int) -> torch.Tensor:
    """The decoder, then the head's product on the strided slice of the last ``kept`` positions (with the model's
    final soft-capping, if it has one)."""
    hidden = model.get_decoder()(inputs_embeds=embeds).last_hidden_state
    head = model.get_output_embeddings()
    logits = F.linear(hidden[:, -kept:, :], head.weight, head.bias)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def _block_logits(model: Any, embeds: torch.Tensor, kept: int) -> torch.Tensor:
    return model(inputs_embeds=embeds, logits_to_keep=kept).logits


def _pass(fn: Any, model: Any, embeds: torch.Tensor, kept: int, backward: bool) -> tuple[torch.Tensor, Any]:
    if not backward:
        with torch.no_grad():
            return fn(model, embeds, kept), None
    e = embeds.clone().requires_grad_(True)
    logits = fn(model, e, kept)
    logits.float().logsumexp(-1).sum().backward()
    return logits.detach(), e.grad


def _relative_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference over the largest absolute value."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def measure(lm: Any, *, rows: int, tokens: int, kept: int, rounds: int = 3, seed: int = 0) -> dict[str, Any]:
    """Best-of-``rounds`` seconds of a ``rows x tokens`` forward keeping ``kept`` positions' logits, each way, with
    and without a backward."""
    g = torch.Generator().manual_seed(seed)
    vocab = lm.model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(5, vocab, (rows, tokens), generator=g)
    embeds = lm.model.get_input_embeddings()(ids).detach()
    out: dict[str, Any] = {"rows": rows, "tokens": tokens, "kept": kept}
    for backward in (False, True):
        best = {"strided": float("inf"), "block": float("inf")}
        results = {}
        for _ in range(rounds):
            for name, fn in (("strided", _strided_logits), ("block", _block_logits)):
                start = time.perf_counter()
                results[name] = _pass(fn, lm.model, embeds, kept, backward)
                best[name] = min(best[name], time.perf_counter() - start)
        diff = _relative_diff(results["strided"][0], results["block"][0])
        if backward:
            diff = max(diff, _relative_diff(results["strided"][1], results["block"][1]))
        out["backward" if backward else "forward"] = {"seconds": best, "ratio": best["strided"] / best["block"],
                                                      "max_rel_diff": diff}
    return out


def report(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = [f"torch threads {torch.get_num_threads()}", "",
             "| model | rows x tokens, kept | pass | strided (s) | one block (s) | ratio | max rel. diff |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, m in rows:
        for kind in ("forward", "backward"):
            r = m[kind]
            lines.append(f"| {model} | {m['rows']} x {m['tokens']}, {m['kept']} | {kind} | "
                         f"{r['seconds']['strided']:.3f} | {r['seconds']['block']:.3f} | {r['ratio']:.2f}x | "
                         f"{r['max_rel_diff']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m"])
    ap.add_argument("--shapes", default="64x32:1,16x32:3",
                    help="passes as ROWSxTOKENS:KEPT, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for name in args.models:
        lm = load_model(name, device="cpu")
        for shape in [s for s in args.shapes.split(",") if s]:
            size, kept = shape.split(":")
            r, t = size.split("x")
            rows.append((name, measure(lm, rows=int(r), tokens=int(t), kept=int(kept), rounds=args.rounds)))
        del lm
    print(report(rows))


if __name__ == "__main__":
    main()
