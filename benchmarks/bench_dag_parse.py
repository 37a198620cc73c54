"""How much parsing a DAG file that uses this provider costs, against core operators only.

The DAG processor parses every file again and again; a provider whose operator modules pull
in pylance, DataFusion, PyArrow or Spark makes every parse of every DAG using it pay for
that. Two baselines: core operators only, and the Spark provider's ``SparkSubmitOperator``
(which every example's ``LanceSparkWriteOperator`` builds on). Each sample is a fresh
interpreter (as a DAG-processor child is) that imports Airflow first, then times ``DagBag``
on one file, and lists which heavy modules the parse loaded.

    .venv/bin/python benchmarks/bench_dag_parse.py [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import print_environment, print_table, summarize, write_results

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "dags" / "examples").glob("*.py"))
HEAVY = ("lance", "datafusion", "pyarrow", "pyspark", "pandas", "xxhash")

BASELINE_DAG = '''
"""Core operators only: the same shape as a small example DAG."""
import datetime as dt

from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

with DAG("core_only", schedule="@daily", start_date=dt.datetime(2025, 12, 1), catchup=False):
    start = EmptyOperator(task_id="start")
    work = BashOperator(task_id="work", bash_command="echo {{ ds }}")
    done = EmptyOperator(task_id="done")
    start >> work >> done
'''

SPARK_PROVIDER_DAG = '''
"""The Spark provider's own operator: what any DAG submitting Spark jobs pays."""
import datetime as dt

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

with DAG("spark_only", schedule="@daily", start_date=dt.datetime(2025, 12, 1), catchup=False):
    SparkSubmitOperator(task_id="submit", application="/jobs/job.py")
'''

PROBE = """
import json, sys, time
import airflow.sdk  # the DAG processor has Airflow loaded already
from airflow.dag_processing.dagbag import DagBag
t0 = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
elapsed = time.perf_counter() - t0
print(json.dumps({
    "seconds": elapsed,
    "dags": len(bag.dags),
    "errors": {k: str(v)[:300] for k, v in bag.import_errors.items()},
    "heavy": sorted(m for m in HEAVY if m in sys.modules),
}))
""".replace("HEAVY", repr(HEAVY))


def parse_once(path: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=path.parent,  # not the checkout: a PYTHONPATH snapshot must win (see README)
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    print_environment()
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": home,
        }
        baseline = Path(home) / "core_only.py"
        baseline.write_text(BASELINE_DAG)
        spark_only = Path(home) / "spark_provider_only.py"
        spark_only.write_text(SPARK_PROVIDER_DAG)
        files = [baseline, spark_only, *EXAMPLES]
        samples: dict[str, list[float]] = {f.name: [] for f in files}
        facts: dict[str, dict[str, Any]] = {}
        for _ in range(args.reps):  # interleaved, so drift hits every file alike
            for f in files:
                probe = parse_once(f, env)
                if probe["errors"] or not probe["dags"]:
                    raise SystemExit(f"{f.name} did not parse: {probe['errors']}")
                samples[f.name].append(probe["seconds"])
                facts[f.name] = probe
    base = summarize(samples[baseline.name])["median_ms"]
    rows, results = [], {}
    for name, secs in samples.items():
        stats = summarize(secs)
        results[name] = {**stats, "heavy_modules": facts[name]["heavy"]}
        rows.append(
            [
                name,
                f"{stats['median_ms']:.0f}",
                f"{stats['median_ms'] - base:+.0f}",
                f"{stats['median_ms'] / base:.2f}x",
                ", ".join(facts[name]["heavy"]) or "-",
            ]
        )
    print_table(
        ["DAG file", "parse ms (median)", "vs core-only", "ratio", "heavy modules loaded"],
        rows,
        title=f"DagBag parse of one file, fresh interpreter, Airflow loaded ({args.reps} reps)",
    )
    write_results("dag_parse", {"reps": args.reps, "files": results})


if __name__ == "__main__":
    main()
