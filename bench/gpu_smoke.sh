#!/usr/bin/env bash
# The GPU path, end to end: chapters 00-05 of the book in the `smoke` profile on a randomly initialised model of a
# real shape (default random:llama-3.1-8b, bf16 on CUDA), each through the book's own runner
# (`python -m ltvlib.book build --no-html`, papermill underneath), with each chapter's wall time, exit status, peak
# GPU memory in use (nvidia-smi, sampled every 0.5 s: the whole card, CUDA context included) and its kernel's peak
# resident memory (the runner's own record). Numbers on random weights are not results: the point is that the GPU
# path runs and what it costs. With two GPUs it also spreads a 70B-shaped random model over both (device_map).
#
# On the device machine (no registry there: prepare here first with `.venv/bin/python bench/gpu_wheels.py`, which
# fills .whl/ and .gpu-cache/, then carry both):
#   run(command="bash bench/gpu_smoke.sh", carry=[".whl", ".gpu-cache"], timeout_s=590)
# Here, as a check of the script itself (CPU, the project's venv, no wheels to install):
#   PYTHON=.venv/bin/python MODEL=random:smollm2-135m DEVICE=cpu CHAPTERS="05" bash bench/gpu_smoke.sh
#
# Env: PYTHON (python3), MODEL, DEVICE (cuda), CHAPTERS ("00 01 02 03 04 05"), WHEELS (.whl: installed into
# /tmp/site and put first on PYTHONPATH when it holds wheels), BUDGET_S (540: no chapter starts
# after it; the report is rewritten after every chapter, so a run cut short still returns what finished),
# OUT (where the report and logs go; the device tool sets it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PYTHON="${PYTHON:-python3}"
MODEL="${MODEL:-random:llama-3.1-8b}"
DEVICE="${DEVICE:-cuda}"
CHAPTERS="${CHAPTERS:-00 01 02 03 04 05}"
BUDGET_S="${BUDGET_S:-540}"
OUT="${OUT:-_build/gpu_smoke}"
WHEELS="${WHEELS:-.whl}"
mkdir -p "$OUT"
start=$(date +%s)

if compgen -G "$WHEELS/*.whl" > /dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
        || { echo "wheel install failed" | tee "$OUT/gpu_smoke.md"; exit 1; }
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# the kernels papermill starts inherit both: the carried packages, and this checkout's ltvlib (not installed there)
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
[[ -d .gpu-cache ]] && export LTV_CACHE_DIR="${LTV_CACHE_DIR:-$PWD/.gpu-cache}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1

{
    echo "## environment"
    "$PYTHON" - <<'PY'
import importlib, platform
import torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
missing = []
for name in ("transformers", "tokenizers", "huggingface_hub", "peft", "accelerate", "datasets", "papermill",
             "ipykernel", "jupytext", "nbclient", "numpy", "pandas", "pyarrow", "fsspec"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as exc:  # report every missing package at once, then stop below
        print(f"{name} MISSING: {type(exc).__name__}: {exc}")
        missing.append(name)
import ltvlib.book.runner, ltvlib.models  # noqa: E401,F401  (fails here, not in a chapter, when something is missing)
if missing:
    raise SystemExit(f"missing: {', '.join(missing)}")
PY
} > "$OUT/environment.txt" 2>&1 || { cat "$OUT/environment.txt"; echo "environment check failed" >> "$OUT/gpu_smoke.md"; exit 1; }
cat "$OUT/environment.txt"

sample_gpu() {  # peak MiB in use on the card while the chapter runs, sampled every 0.5 s
    local file=$1
    echo 0 > "$file"
    command -v nvidia-smi > /dev/null || { echo "n/a" > "$file"; return; }
    while true; do
        used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
        [[ -n "$used" && "$used" -gt "$(cat "$file")" ]] && echo "$used" > "$file"
        sleep 0.5
    done
}

report="$OUT/gpu_smoke.md"
{
    echo "model $MODEL, profile smoke, device $DEVICE, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "| chapter | exit | seconds | peak GPU memory in use (MiB, nvidia-smi) | kernel peak RSS (runner's log) |"
    echo "|---|---:|---:|---:|---|"
} > "$report"
for ch in $CHAPTERS; do
    if (( $(date +%s) - start > BUDGET_S )); then
        echo "| $ch | not started: over the ${BUDGET_S} s budget | | | |" >> "$report"
        continue
    fi
    peak="$OUT/.peak_$ch"
    sample_gpu "$peak" &
    sampler=$!
    t0=$(date +%s.%N)
    "$PYTHON" -m ltvlib.book build --profile smoke --model "$MODEL" --device "$DEVICE" --chapters "$ch" \
        --no-html --force > "$OUT/chapter_$ch.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null
    # the runner's line for this chapter ("[ltv-book] 05_linearity: 174.6 s, peak kernel memory 3.58 GiB"), not the
    # scorecard's that follows it
    rss=$(grep -E "^\[ltv-book\] ${ch}[a-z0-9_]*: [0-9.]+ s, peak kernel memory" "$OUT/chapter_$ch.log" \
        | grep -o "peak kernel memory [0-9.]* GiB" | tail -1)
    printf '| %s | %s | %.0f | %s | %s |\n' "$ch" "$rc" "$(awk "BEGIN {print $t1 - $t0}")" "$(cat "$peak")" \
        "${rss:-?}" >> "$report"
    rm -f "$peak"
    (( rc == 0 )) || tail -30 "$OUT/chapter_$ch.log"
done

# Two GPUs: a 70B-shaped random model (Llama-3-70B's width, TWO_GPU_LAYERS blocks) spread over cuda:0 and cuda:1 by
# device_map="auto" under max_memory, as a model larger than one card is: its blocks land on both devices, a vector
# edited into a block on the second device moves the logits, and one LTV step's gradient reaches a vector placed on
# that block's device. Skipped (one line in the report) with fewer than two CUDA devices.
if (( $(date +%s) - start > BUDGET_S )); then
    printf '\ntwo-device map: not started: over the %s s budget\n' "$BUDGET_S" >> "$report"
else
TWO_GPU_LAYERS="${TWO_GPU_LAYERS:-6}" "$PYTHON" - <<'PY' >> "$report" 2>&1
import os
import time

import torch

print()
if torch.cuda.device_count() < 2:
    print(f"two-device map: skipped ({torch.cuda.device_count()} CUDA device(s); it needs 2)")
    raise SystemExit(0)
from ltvlib.inject import VectorEdit, inject
from ltvlib.models import dispatch, random_model

n_layers = int(os.environ["TWO_GPU_LAYERS"])
t0 = time.perf_counter()
lm = random_model("llama-3-70b", n_layers=n_layers, dtype=torch.bfloat16, device="cpu")
block_gib = sum(p.numel() for p in lm.model.model.layers[0].parameters()) * 2 / 2**30
# room for about half the blocks on each card, so that the map must use both
budget = f"{block_gib * (n_layers / 2 + 1.5):.1f}GiB"
dispatch(lm, "auto", max_memory={0: budget, 1: budget, "cpu": "200GiB"})
devices = [lm.layer_device(i) for i in range(n_layers)]
assert {d.type for d in devices} == {"cuda"} and len(set(devices)) == 2, f"blocks not on both GPUs: {devices}"
enc = lm.tokenizer(["Q: hot\nA:"], return_tensors="pt")
ids, mask = enc.input_ids.to(lm.device), enc.attention_mask.to(lm.device)
last = n_layers - 1
with torch.no_grad():
    plain = lm.model(input_ids=ids, attention_mask=mask).logits[0, -1].float()
    vec = torch.randn(lm.d_model) * 4.0  # on the CPU in fp32: the edit moves it to the block's device and dtype
    with inject(lm, [VectorEdit(last, -1, vec)], attention_mask=mask):
        edited = lm.model(input_ids=ids, attention_mask=mask).logits[0, -1].float()
assert torch.isfinite(plain).all() and not torch.allclose(plain, edited)
theta = torch.zeros(lm.d_model, device=lm.layer_device(last), dtype=torch.float32, requires_grad=True)
with inject(lm, [VectorEdit(last, -1, theta)], attention_mask=mask):
    logits = lm.model(input_ids=ids, attention_mask=mask).logits[:, -1].float()
    loss = torch.nn.functional.cross_entropy(logits, ids[:, 0])
loss.backward()
assert theta.grad is not None and torch.isfinite(theta.grad).all() and theta.grad.abs().sum() > 0
peaks = [torch.cuda.max_memory_allocated(d) / 2**30 for d in (0, 1)]
print(f"two-device map: random:llama-3-70b with {n_layers} blocks ({block_gib:.2f} GiB each in bf16), "
      f"max_memory {budget} per GPU; blocks per device "
      f"{ {str(d): devices.count(d) for d in sorted(set(devices), key=str)} }; edit on {devices[last]} moved the "
      f"logits; one gradient step reached the vector; peak allocated {peaks[0]:.1f} / {peaks[1]:.1f} GiB; "
      f"{time.perf_counter() - t0:.0f} s")
PY
fi
cat "$report"
