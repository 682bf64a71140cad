#!/usr/bin/env bash
# Type-check the library, then run the test suite, in the project venv (set up by scripts/book.sh if needed).
# mypy runs first (config: [tool.mypy] in pyproject.toml); a type error fails the script before any test runs.
# Real-model tests (marker `realmodel`) run by default; the fast tier (tiny random models) skips them:
#   bash scripts/test.sh -m "not realmodel"
# Extra args go to pytest (LTV_TEST_WORKERS=1 runs it in one process, e.g. to use --pdb).
set -euo pipefail
cd "$(dirname "$0")/.."
# Idle OpenMP threads sleep instead of spinning: spinning threads of concurrent torch processes thrash.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

bash scripts/book.sh --setup-only
# shellcheck disable=SC1091
source "${VENV:-.venv}/bin/activate"
python -m mypy

# Tests run in LTV_TEST_WORKERS processes (pytest-xdist; default: one per core, at most 2, 1 = no xdist), each
# with an equal share of the cores as its BLAS/OpenMP threads: most tests are small models whose time is Python,
# not matrix products (measured on 2 cores: the fast tier used 279 CPU seconds in 179 s of wall time).
cores="$(python -c 'import os; print(len(os.sched_getaffinity(0)))')"
workers="${LTV_TEST_WORKERS:-$(( cores < 2 ? cores : 2 ))}"
if (( workers > 1 )); then
    threads=$(( cores / workers > 0 ? cores / workers : 1 ))
    export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
    # worksteal, not xdist's default `load`: `load` left the chapters' smoke runs (12 minutes) queued on one
    # worker while the other idled (tests/conftest.py, pytest_collection_modifyitems, has the measurements)
    exec python -m pytest -ra -n "$workers" --dist worksteal "$@"
fi
exec python -m pytest -ra "$@"
