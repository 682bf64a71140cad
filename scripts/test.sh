#!/usr/bin/env bash
# Run the test suite in the project venv (set up by scripts/book.sh if needed).
# Real-model tests (marker `realmodel`) run by default; skip them with
#   bash scripts/test.sh -m "not realmodel"
# Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Idle OpenMP threads sleep instead of spinning: spinning threads of concurrent torch processes thrash.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

bash scripts/book.sh --setup-only
# shellcheck disable=SC1091
source "${VENV:-.venv}/bin/activate"
exec python -m pytest -ra "$@"
