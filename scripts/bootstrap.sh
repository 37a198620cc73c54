#!/usr/bin/env bash
# Creates (or reuses) the project virtualenv in .venv and installs the package with the
# given extras. Sourced by scripts/test.sh and scripts/demo.sh; needs only python3 >= 3.10.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
extras="${1:-test}"
if ! command -v uv >/dev/null 2>&1 && ! "$PY" -m uv --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet --disable-pip-version-check uv
fi
UV=(uv)
command -v uv >/dev/null 2>&1 || UV=("$PY" -m uv)
[ -x .venv/bin/python ] || "${UV[@]}" venv --quiet --python "$PY" .venv
"${UV[@]}" pip install --quiet --python .venv/bin/python -e ".[${extras}]"
