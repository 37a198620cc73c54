#!/usr/bin/env bash
# Creates (or reuses) the project virtualenv in .venv and installs the package with the
# given extras. Sourced by scripts/test.sh and scripts/demo.sh; needs only python3 >= 3.10.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
extras="${1:-test}"
if ! command -v uv >/dev/null 2>&1 && ! "$PY" -m uv --version >/dev/null 2>&1; then
    echo "installing uv (the installer) with pip" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check uv
fi
UV=(uv)
command -v uv >/dev/null 2>&1 || UV=("$PY" -m uv)
[ -x .venv/bin/python ] || "${UV[@]}" venv --quiet --python "$PY" .venv
echo "installing airflow-provider-lance[${extras}] into .venv (the first time downloads" \
    "Airflow and PySpark, 1.3 GB: 42 s measured on a fast network; later runs take seconds)" >&2
# uv draws its progress on a terminal; elsewhere (CI, a log file) it stays quiet.
QUIET=(--quiet)
[ -t 2 ] && QUIET=()
# --compile-bytecode: every process (a test's subprocess, a Spark Python worker, an Airflow
# task) imports pyarrow, pylance and Airflow from bytecode, as after a plain pip install;
# without it, where PYTHONDONTWRITEBYTECODE is set, each one compiles them from source
# again (importing lance, datafusion and pyarrow.dataset: 2.5 s instead of 4.4-10 s,
# measured on 2 loaded cores).
"${UV[@]}" pip install ${QUIET[@]+"${QUIET[@]}"} --compile-bytecode --python .venv/bin/python \
    -e ".[${extras}]"
