"""The namespace core imports neither Airflow nor Spark (executors and scripts rely on it)."""

from __future__ import annotations

import subprocess
import sys


def test_core_imports_no_airflow_or_spark() -> None:
    code = (
        "import sys, airflow_provider_lance.namespace as ns\n"
        "ns.PartitionedNamespace\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
