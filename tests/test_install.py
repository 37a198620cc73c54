"""The wheel, installed by plain pip into a venv of its own, writes and reads with Spark.

pip installs ``pyspark`` and the Spark provider's ``pyspark-client`` in an order of its own;
both ship the ``pyspark/`` package, so whichever comes last provides PySpark's Python files.
The ``[spark]`` extra holds both to one minor line; this proves that what pip makes of it
runs a real Spark write and read (and that the wheel carries everything the package needs).
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
ROUND_TRIP = Path(__file__).resolve().parent / "scripts" / "spark_round_trip.py"


def pip(env_dir: Path, *args: str) -> None:
    # Without PYTHONPATH: a checkout on it (with the egg-info the wheel build leaves there)
    # would count as the package installed already, and pip would skip installing the wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "--quiet", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_plain_pip_install_of_the_wheel_writes_and_reads_with_spark(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)  # the stdlib's venv and pip: no uv anywhere
    pip(env_dir, "wheel", "--no-deps", "--wheel-dir", str(tmp_path / "dist"), str(REPO))
    (wheel,) = (tmp_path / "dist").glob("airflow_provider_lance-*.whl")
    pip(env_dir, "install", f"{wheel}[apache-spark]")

    python = env_dir / "bin" / "python"
    uri = tmp_path / "events"
    env = {
        **os.environ,
        "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYSPARK_PYTHON": str(python),
        "LANCE_LOG": "error",
    }
    env.pop("PYTHONPATH", None)  # nothing from this checkout: only what pip installed
    done = subprocess.run(
        [str(python), str(ROUND_TRIP), str(uri), "--master", "local[2]"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["published_rows"] == 600
    assert report["published_partitions"] == 3
    assert report["read_ids"] == list(range(0, 600, 3))
    # the installed package is the wheel's, not this checkout
    where = subprocess.run(
        [str(python), "-c", "import airflow_provider_lance as p; print(p.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert str(env_dir) in where
    ns = PartitionedNamespace.open(uri)  # and this checkout's core reads what it published
    assert ns.count_rows() == 600
