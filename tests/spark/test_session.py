"""Getting a session: the PySpark install check (Python files and JVM of one Spark release
line), and a JVM start that does not look like a Lance misuse."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.namespace.errors import InstallationError
from airflow_provider_lance.spark.session import _check_releases, check_pyspark, is_connect
from tests.support import logged

pytestmark = pytest.mark.integration


def test_the_test_session_passes_the_check(spark: SparkSession) -> None:
    assert not is_connect(spark)
    check_pyspark(spark)  # the suite's own install is consistent


def test_python_files_of_another_minor_release_are_refused_with_the_fix() -> None:
    with pytest.raises(InstallationError) as caught:
        _check_releases("4.2.0", "4.3.0")  # pyspark-client 4.2 installed over pyspark 4.3
    message = str(caught.value)
    assert "4.2.0" in message
    assert "4.3.0" in message
    assert "pip install --force-reinstall 'pyspark==4.3.0' 'pyspark-client==4.3.0'" in message


def test_a_patch_difference_only_warns() -> None:
    """Warned once per pair of releases (cached): a session started earlier in this process
    on such an install (pyspark-client 4.2.0 over pyspark 4.2.1) has warned of this very
    pair already, so the cache is cleared first; the records are caught on the module's
    logger itself, whatever an earlier test's logging setup (Airflow's) left behind."""
    _check_releases.cache_clear()
    with logged("airflow_provider_lance.spark.session") as records:
        _check_releases("4.2.0", "4.2.1")
    text = "\n".join(r.getMessage() for r in records)
    assert "4.2.0" in text
    assert "4.2.1" in text


def test_starting_the_jvm_after_importing_lance_does_not_warn_of_forks() -> None:
    """PySpark forks to exec spark-submit; Lance's fork warning is for children that go on
    using Lance, so it is silenced there, and only there: a real fork after it still warns."""
    code = textwrap.dedent(
        """
        import os, sys
        import lance
        from airflow_provider_lance.spark.session import get_session
        spark = get_session("fork-warning", {"spark.master": "local[1]",
                                             "spark.ui.enabled": "false"})
        print("SESSION-STARTED", file=sys.stderr, flush=True)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        sys.stderr.flush()
        spark.stop()
        """
    )
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    before, marker, after = out.stderr.partition("SESSION-STARTED")
    assert marker, out.stderr[-2000:]
    assert "fork-safe" not in before
    assert "fork-safe" in after
