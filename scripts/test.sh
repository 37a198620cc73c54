#!/usr/bin/env bash
# Installs everything the tests need into .venv, then runs every tier of the suite: the
# everyday tier (what a bare `pytest` runs), the integration tier (`-m integration`: end to
# end through Spark, Airflow's dag.test, the CLI and S3) and the slow tier (`-m slow`:
# installs, chaos, killed processes, clusters, a live Airflow), with the full hypothesis
# profile; without arguments it then runs the Airflow tests again on the oldest supported
# Airflow line (scripts/test-airflow-compat.sh). Extra arguments go to pytest and skip that
# second run (e.g. scripts/test.sh -k pruning -x, or --random-order).
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
# A pytest worker per core and one more (pytest-xdist, -n auto from addopts: workers often
# wait on subprocesses and JVMs, see tests/conftest.py), each test file whole on one
# worker: a file's module fixtures (a moto server, a Spark Connect server, a browser) start
# once. Each worker has its own SparkSession, AIRFLOW_HOME (SQLite) and temporary
# directories; `-n 0` as an argument runs everything in this one process. `-m ""` selects
# every tier (addopts deselects the slow and integration ones).
# The oldest-Airflow venv installs meanwhile (its log: .venv-airflow-3.2.log): the main run
# leaves a core idle often enough (subprocesses, JVM start-ups, polling) to take it.
compat_install=
if [ "$#" -eq 0 ]; then
    bash scripts/test-airflow-compat.sh --install >.venv-airflow-3.2.log 2>&1 &
    compat_install=$!
    trap 'kill "$compat_install" 2>/dev/null || true' EXIT
fi
.venv/bin/python -m pytest -m "" --hypothesis-profile=full "$@"
if [ -n "$compat_install" ]; then
    wait "$compat_install" || { cat .venv-airflow-3.2.log >&2; exit 1; }
    bash scripts/test-airflow-compat.sh -q
fi
