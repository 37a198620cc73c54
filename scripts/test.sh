#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs the whole suite; without arguments
# it then runs the Airflow tests again on the oldest supported Airflow line
# (scripts/test-airflow-compat.sh). Extra arguments go to pytest and skip that second run
# (e.g. scripts/test.sh -k pruning -x).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh test
# The connection form test drives a real browser: Debian's Chromium, when this machine can
# install it (root with apt); without it that test fails under CI and is skipped elsewhere.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq chromium >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
        || echo "could not install chromium; the connection form test will say so" >&2
fi
# One pytest worker per core (pytest-xdist), each test file whole on one worker: a file's
# module fixtures (a moto server, a Spark Connect server, a browser) start once. Each worker
# has its own SparkSession, AIRFLOW_HOME (SQLite) and temporary directories; `-n 0` as an
# argument runs everything in this one process.
.venv/bin/python -m pytest -n auto --dist loadfile "$@"
if [ "$#" -eq 0 ]; then
    bash scripts/test-airflow-compat.sh -q
fi
