#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs the whole suite; without arguments
# it then runs the Airflow tests again on the oldest supported Airflow line
# (scripts/test-airflow-compat.sh). Extra arguments go to pytest and skip that second run
# (e.g. scripts/test.sh -k pruning -x).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh test
.venv/bin/python -m pytest "$@"
if [ "$#" -eq 0 ]; then
    bash scripts/test-airflow-compat.sh -q
fi
