"""Seconds per LTV training step on a randomly initialised Llama-3.1-8B-shaped model (for a GPU).

No real model can be downloaded where this runs, and step time does not depend on the weights' values,
so the model is built from a Llama-3.1-8B config (32 layers, d=4096, 32 heads, 8 KV heads) with random
bf16 weights. Prompts are random token ids of zero-shot length. Compares the paper's recipe (batch 1,
full forward and backward per step; the paper reports 0.049 s per step on its GPU) with the book's fast
recipe (batch 16, cached prefix, blocks before the injection layer skipped), per step and per sample.

    python bench/gpu_step.py [--tiny] [--steps 20] [--prompt-lens 12,96]

12 tokens is a zero-shot prompt's length; 96 is about an 8-shot ICL prompt (Table 1's "on top of ICL" setting).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ltvlib.forward import PromptRunner
from ltvlib.inject import VectorEdit
from ltvlib.ltv import answer_loss
from ltvlib.models import wrap_model
from ltvlib.prompts import EncodedPrompts


class _Pad:
    pad_token_id = 0
    eos_token = "</s>"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model, to check the script on a CPU")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompt-lens", default="12,96", help="comma-separated prompt lengths in tokens")
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shape = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rope_theta": 500000.0}
    if args.tiny:
        shape.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, vocab_size=1000)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**shape, max_position_embeddings=4096)).to(dtype)
    lm = wrap_model(model, _Pad(), "llama-3.1-8b-shaped-random")
    layer = lm.middle_layer
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"{name}, {lm.name}{' (tiny)' if args.tiny else ''}, {dtype}, injection layer {layer}")
    for prompt_len in (int(x) for x in args.prompt_lens.split(",")):
        _time_recipes(lm, layer, prompt_len, args.steps, shape["vocab_size"], device)


def _peak_gib(device: str) -> str:
    return f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device == "cuda" else ""


def _time_recipes(lm, layer: int, prompt_len: int, steps: int, vocab: int, device: str) -> None:
    """Median seconds per step of the paper's recipe and of the fast one, on random prompts of one length."""
    g = torch.Generator().manual_seed(prompt_len)
    n = 16 * (steps + 2)
    rows = tuple(tuple(torch.randint(1, vocab, (prompt_len,), generator=g).tolist()) for _ in range(n))
    prompts = EncodedPrompts((), rows, ("",) * n)
    answers = [[int(torch.randint(1, vocab, (1,), generator=g))] for _ in range(n)]
    theta = torch.zeros(lm.d_model, device=device, requires_grad=True)

    def timed(runner: PromptRunner, batch: int) -> list[float]:
        out = []
        for step in range(steps + 2):  # two warm-up steps
            index = list(range(step * batch, (step + 1) * batch))
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            logits, valid = runner.run(index, [VectorEdit(layer, -1, theta)], answers=[answers[i] for i in index])
            answer_loss(logits, [answers[i] for i in index], valid).backward()
            if device == "cuda":
                torch.cuda.synchronize()
            out.append(time.perf_counter() - t)
        return out[2:]

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    paper = statistics.median(timed(PromptRunner(lm, prompts, tail=None), 1))
    print(f"prompt {prompt_len} tokens: paper recipe (batch 1, full forward): {paper:.4f} s/step{_peak_gib(device)}")
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    fast_runner = PromptRunner(lm, prompts, tail=1)
    timed(fast_runner, 16)  # first pass remembers each row's early-layer states
    fast = statistics.median(timed(fast_runner, 16))
    print(f"prompt {prompt_len} tokens: fast recipe (batch 16, cached prefix): {fast:.4f} s/step = "
          f"{fast / 16:.4f} s/sample ({paper / (fast / 16):.1f}x more samples per second){_peak_gib(device)}")


if __name__ == "__main__":
    main()
