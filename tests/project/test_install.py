"""The wheel, installed by plain pip into venvs of its own: as an Airflow provider whose
example DAGs all import, with PySpark for a Spark write and read, and as a Spark executor
image with no Airflow in it.

pip installs ``pyspark`` and the Spark provider's ``pyspark-client`` in an order of its own;
both ship the ``pyspark/`` package, so whichever comes last provides PySpark's Python files.
The package holds both to one minor line; this proves that what pip makes of it runs a real
Spark write and read (and that the wheel carries everything the package needs).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ROUND_TRIP = Path(__file__).resolve().parents[1] / "scripts" / "spark_round_trip.py"
#: What an executor image must not need (README "Installing").
AIRFLOW_REQUIREMENTS = ("apache-airflow", "pyspark-client")


@pytest.fixture(scope="module")
def pip_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a venv of the stdlib's venv with its pip (the project's venv may have
    none): the one pip that builds the wheel and installs into the test venvs."""
    where = tmp_path_factory.mktemp("pip")
    venv.create(where, with_pip=True)
    return where / "bin" / "python"


def pip(pip_python: Path, env_dir: Path, *args: str) -> None:
    """Plain pip on the venv ``env_dir`` (``pip --python``: the same pip, resolver and
    installer as a copy inside that venv, without making one per venv)."""
    # Without PYTHONPATH: a checkout on it (with the egg-info the wheel build leaves there)
    # would count as the package installed already, and pip would skip installing the wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if args[0] == "install":
        # No .pyc of every installed file (Airflow's, PySpark's): pip never fails on them,
        # and what runs here compiles what it imports. About 20 s of CPU less.
        args = ("install", "--no-compile", *args[1:])
    done = subprocess.run(
        [str(pip_python), "-m", "pip", "--python", str(env_dir / "bin" / "python"), "--quiet",
         *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def wheel(pip_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built by plain pip."""
    dist = tmp_path_factory.mktemp("dist")
    pip(pip_python, pip_python.parent.parent, "wheel", "--no-deps", "--wheel-dir", str(dist),
        str(REPO))  # fmt: skip
    (built,) = dist.glob("airflow_provider_lance-*.whl")
    return built


def new_venv(where: Path) -> tuple[Path, dict[str, str]]:
    """A venv of the stdlib's venv (no uv anywhere; pip comes from :func:`pip_python`), and
    an environment that runs only what is installed in it (nothing from this checkout)."""
    venv.create(where, with_pip=False)
    env = {
        **os.environ,
        "PATH": f"{where / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYSPARK_PYTHON": str(where / "bin" / "python"),
    }
    env.pop("PYTHONPATH", None)
    return where / "bin" / "python", env


def round_trip(python: Path, env: dict[str, str], tmp_path: Path) -> None:
    """A Spark write and read through the installed package, checked here with this
    checkout's core too."""
    uri = tmp_path / "events"
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
    where = subprocess.run(
        [str(python), "-c", "import airflow_provider_lance as p; print(p.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    ).stdout
    assert str(python.parent.parent) in where  # the wheel's package, not this checkout
    assert PartitionedNamespace.open(uri).count_rows() == 600


def test_a_plain_install_is_a_provider_whose_examples_import_and_spark_runs(
    pip_python: Path, wheel: Path, tmp_path: Path
) -> None:
    python, env = new_venv(tmp_path / "venv")
    # no extra: what `pip install airflow-provider-lance` gives
    pip(pip_python, python.parent.parent, "install", str(wheel))
    parse = (
        "import json\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(REPO / 'dags' / 'examples')!r})\n"
        "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},\n"
        "                  'dags': len(bag.dags)}))\n"
    )
    home = tmp_path / "airflow"
    parsed = subprocess.run(
        [str(python), "-c", parse],
        capture_output=True,
        text=True,
        env={**env, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"},
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert parsed.returncode == 0, parsed.stderr[-4000:]
    result = json.loads(parsed.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert result["dags"] >= 8

    pip(pip_python, python.parent.parent, "install", f"{wheel}[spark]")
    round_trip(python, env, tmp_path)


def executor_requirements() -> list[str]:
    """The requirements README's executor-image command installs."""
    readme = (REPO / "README.md").read_text()
    match = re.search(
        r"^pip install --no-deps airflow-provider-lance\npip install (.+)$", readme, re.M
    )
    assert match, "README names no executor-image install"
    return shlex.split(match.group(1))


def test_the_readme_executor_install_names_the_core_and_spark_requirements() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [
        r
        for r in [*project["dependencies"], *project["optional-dependencies"]["spark"]]
        if not r.startswith(AIRFLOW_REQUIREMENTS)
    ]
    assert sorted(executor_requirements()) == sorted(wanted)


def test_an_executor_image_writes_and_reads_with_spark_without_airflow(
    pip_python: Path, wheel: Path, tmp_path: Path
) -> None:
    python, env = new_venv(tmp_path / "venv")
    pip(pip_python, python.parent.parent, "install", "--no-deps", str(wheel))
    pip(pip_python, python.parent.parent, "install", *executor_requirements())
    missing = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('airflow'))"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()
    assert missing == "None"
    round_trip(python, env, tmp_path)
