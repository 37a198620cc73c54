#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -k pruning -x).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh test
exec .venv/bin/python -m pytest "$@"
