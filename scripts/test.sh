#!/usr/bin/env bash
# Type-check the library, then run the test suite, in the project venv (set up by scripts/book.sh if needed).
# mypy runs first (config: [tool.mypy] in pyproject.toml); a type error fails the script before any test runs.
# Real-model tests (marker `realmodel`) run by default; the fast tier (tiny random models) skips them:
#   bash scripts/test.sh -m "not realmodel"
# Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Idle OpenMP threads sleep instead of spinning: spinning threads of concurrent torch processes thrash.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

bash scripts/book.sh --setup-only
# shellcheck disable=SC1091
source "${VENV:-.venv}/bin/activate"
python -m mypy
exec python -m pytest -ra "$@"
