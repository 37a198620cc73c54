#!/usr/bin/env bash
# Runs the Airflow tests against the oldest Airflow line the package supports (3.2), in a
# venv of its own (.venv-airflow-3.2), the way users of that line install: with the
# dependency versions of its release. Airflow's own constraints file for 3.2.2 is on GitHub,
# out of this machine's reach, so it is recreated: the newest versions on the day after the
# release (uv --exclude-newer), providers left free as in Airflow's "no providers" file.
# The slow spark-submit tests run once, on the main line, but for one (marked
# airflow_compat) that drives spark-submit through a DAG here too. Extra arguments go to
# pytest; `--install` only makes the venv (scripts/test.sh does that while the main run runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
AIRFLOW_VERSION=3.2.2
RELEASED=2026-06-01
VENV=.venv-airflow-3.2
UV=(uv)
command -v uv >/dev/null 2>&1 || UV=("$PY" -m uv)
[ -x "$VENV/bin/python" ] || "${UV[@]}" venv --quiet --python "$PY" "$VENV"
constraints="$VENV/constraints-$AIRFLOW_VERSION.txt"
if [ ! -s "$constraints" ]; then
    echo "apache-airflow==$AIRFLOW_VERSION" \
        | "${UV[@]}" pip compile --quiet - --python "$VENV/bin/python" \
            --exclude-newer "$RELEASED" -o "$constraints.all"
    grep -v '^apache-airflow-providers-' "$constraints.all" > "$constraints"
fi
"${UV[@]}" pip install --quiet --compile-bytecode --python "$VENV/bin/python" -e ".[test]" \
    "apache-airflow==$AIRFLOW_VERSION" -c "$constraints"
[ "${1:-}" = --install ] && exit 0
"$VENV/bin/python" -c "import airflow; print('Airflow tests against Airflow', airflow.__version__)"
exec "$VENV/bin/python" -m pytest -n auto --dist loadfile tests/airflow \
    -m "not slow or airflow_compat" "$@"
