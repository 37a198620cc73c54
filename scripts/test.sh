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
# The oldest-Airflow run goes beside the main one (its venv installs, then its tests run;
# its output, in .venv-airflow-3.2.log, is printed after the main run's): the main run
# leaves cores idle often enough (subprocesses, JVM start-ups, polling) to take it.
# Job control (set -m) gives it a process group of its own, which an interrupted or failed
# run stops whole.
compat=
if [ "$#" -eq 0 ]; then
    set -m
    {
        bash scripts/test-airflow-compat.sh --install
        # in one process (-n 0): beside the main run it has time, and one process spends
        # less CPU than workers that each import Airflow and make its database (79 CPU-s
        # against 110 with 2 workers, measured)
        bash scripts/test-airflow-compat.sh -q -n 0
    } >.venv-airflow-3.2.log 2>&1 &
    compat=$!
    set +m
    trap 'kill -- -"$compat" 2>/dev/null || true' EXIT
fi
main=0
.venv/bin/python -m pytest -m "" --hypothesis-profile=full --durations=30 "$@" || main=$?
# pytest's 2-4: interrupted, an internal error, a usage error: stop here (the trap stops the
# other run); 1 (tests failed) still waits for the other run's verdict.
if [ -n "$compat" ] && [ "$main" -le 1 ]; then
    echo "--- the Airflow tests on the oldest supported Airflow line (scripts/test-airflow-compat.sh)"
    if wait "$compat"; then
        grep -m1 '^Airflow tests against' .venv-airflow-3.2.log || true
        tail -n 1 .venv-airflow-3.2.log
    else
        cat .venv-airflow-3.2.log
        main=1
    fi
fi
exit "$main"
