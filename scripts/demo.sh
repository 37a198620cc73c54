#!/usr/bin/env bash
# The main job on the embedded default: installs, runs the partitioned-namespace core demo on
# a local directory, then runs the Airflow daily backfill DAG (dags/examples) end to end with
# local Spark through spark-submit on a local Airflow (SQLite under .demo/airflow), and prints
# what was published.
#
#   bash scripts/demo.sh [--force] [DIR]
#
# DIR (default .demo/events) is where the format demo writes. The demo replaces only what it
# made: DIR and .demo/{airflow,lance,landing} must be absent, empty or hold the marker file
# an earlier demo left (.lance-demo); anything else is refused (exit 2) before anything is
# installed or deleted, unless --force is given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FORCE=()
EVENTS=.demo/events
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=(--force) ;;
        -*) echo "usage: bash scripts/demo.sh [--force] [DIR]" >&2; exit 2 ;;
        *) EVENTS="$arg" ;;
    esac
done
REPO="$(pwd)"
DEMO="$REPO/.demo"
MARKER=.lance-demo

# Whether the demo may use (and replace) directory $1: absent, empty, made by the demo, or --force.
demo_may_replace() {
    [ ! -e "$1" ] && [ ! -L "$1" ] && return 0
    [ -d "$1" ] && [ ! -L "$1" ] || return 1
    [ -z "$(ls -A "$1")" ] || [ -f "$1/$MARKER" ] || [ "${#FORCE[@]}" -gt 0 ]
}
for dir in "$EVENTS" "$DEMO/airflow" "$DEMO/lance" "$DEMO/landing"; do
    if ! demo_may_replace "$dir"; then
        echo "error: $dir holds files the demo did not make (no $MARKER in it); the demo" \
            "replaces only what it made: move them away, or run again with --force to delete" \
            "them" >&2
        exit 2
    fi
done

# Spark needs Java 17 or newer: say so now, not after the install, from a task log.
if [ -n "${JAVA_HOME:-}" ]; then JAVA="$JAVA_HOME/bin/java"; else JAVA="$(command -v java || true)"; fi
if [ -z "$JAVA" ] || ! [ -x "$JAVA" ]; then
    echo "error: the demo runs Spark, which needs Java 17 or newer, and" \
        "${JAVA_HOME:+JAVA_HOME=$JAVA_HOME has no bin/java}${JAVA_HOME:-no java is on PATH}:" \
        "install a JDK or JRE (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME" >&2
    exit 2
fi
JAVA_MAJOR="$("$JAVA" -version 2>&1 | sed -n 's/.* version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -n 1)"
if [ -n "$JAVA_MAJOR" ] && [ "$JAVA_MAJOR" -lt 17 ]; then
    echo "error: the demo runs Spark 4, which needs Java 17 or newer; $JAVA is Java $JAVA_MAJOR" >&2
    exit 2
fi

# What the demo runs: the core, PySpark and Airflow with the Spark provider (no test tools).
bash scripts/bootstrap.sh spark

echo "=== 1/2  the format: python -m airflow_provider_lance demo $EVENTS"
.venv/bin/python -m airflow_provider_lance demo "$EVENTS" ${FORCE[@]+"${FORCE[@]}"}

echo
echo "=== 2/2  Airflow: the daily backfill DAG, three catchup days, local Spark"
for dir in "$DEMO/airflow" "$DEMO/lance" "$DEMO/landing"; do
    rm -rf "$dir"  # checked above: absent, empty, made by the demo, or --force
    mkdir -p "$dir"
    echo "Made by scripts/demo.sh, which replaces this directory when it runs again." \
        >"$dir/$MARKER"
done
export PATH="$REPO/.venv/bin:$PATH"  # spark-submit
export AIRFLOW_HOME="$DEMO/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags/examples"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$DEMO/airflow/airflow.db"
export AIRFLOW_CONN_LANCE_DEFAULT="{\"conn_type\": \"lance\", \"extra\": {\"root\": \"$DEMO/lance\"}}"
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'
export LANCE_EXAMPLES_LANDING="$DEMO/landing"
export PYSPARK_PYTHON="$REPO/.venv/bin/python"

# the same settings for a later `airflow standalone` on this state (see the README)
export -p | grep -E ' (AIRFLOW_HOME|AIRFLOW__[A-Z_]+|AIRFLOW_CONN_[A-Z_]+|LANCE_EXAMPLES_LANDING|PYSPARK_PYTHON)=' \
    >"$DEMO/airflow/env.sh"
echo "export PATH=\"$REPO/.venv/bin:\$PATH\"" >>"$DEMO/airflow/env.sh"

airflow db migrate >"$DEMO/airflow/db-migrate.log" 2>&1
echo "   Airflow $(airflow version 2>/dev/null) on SQLite in $AIRFLOW_HOME"
for day in 2025-12-01 2025-12-02 2025-12-03; do
    log="$DEMO/airflow/lance_daily_backfill-$day.log"
    started=$SECONDS
    airflow dags test lance_daily_backfill "$day" >"$log" 2>&1 || true
    if ! grep -q "DagRun Finished: dag_id=lance_daily_backfill.*state=success" "$log"; then
        echo "   $day: FAILED (log: $log)"
        grep -E "error|Error|Exception" "$log" | tail -n 20
        exit 1
    fi
    summary="$(grep -o "published [0-9]* partition(s), [0-9]* rows -> manifest v[0-9]*" "$log" | tail -n 1)"
    echo "   $day: ensure_partition -> land_events -> spark_overwrite_day -> publish_day:" \
        "$summary, then spark_rollup_day ($((SECONDS - started))s)"
done

echo
echo "=== published by the backfill ($DEMO/lance/examples/daily_events)"
.venv/bin/python -m airflow_provider_lance describe "$DEMO/lance/examples/daily_events"
echo
echo "=== its transactions (one per Spark write, retries reuse the id)"
.venv/bin/python -m airflow_provider_lance transactions "$DEMO/lance/examples/daily_events"
echo
echo "=== the day totals your own PySpark job wrote with format(\"lance_partitioned\")"
echo "    ($DEMO/lance/examples/daily_totals)"
.venv/bin/python -m airflow_provider_lance describe "$DEMO/lance/examples/daily_totals"
echo
echo "Open the UI on this state:  source .demo/airflow/env.sh && airflow standalone"
