"""Lance's logs are quiet by default, and the documented switch turns them on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

WRITE_NEW_PARTITIONS = textwrap.dedent(
    """
    import datetime as dt, sys
    import pyarrow as pa
    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("day", pa.date32())])
    ns = PartitionedNamespace.create(sys.argv[1], schema=schema,
                                     partition_fields=[PartitionField("day", "day")])
    days = [dt.date(2025, 1, 1) + dt.timedelta(days=i) for i in range(3)]
    ns.write(pa.table({"id": [1, 2, 3], "day": days}, schema=schema))
    txn = ns.begin("append", txn_id="quiet")
    txn.stage(pa.table({"id": [4], "day": [dt.date(2024, 1, 1)]}, schema=schema), stage_id="s")
    ns.commit("quiet")
    ns.create_partition({"day": dt.date(2023, 1, 1)})
    """
)


def run(code: str, *args: str, lance_log: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LANCE_LOG"}
    if lance_log is not None:
        env["LANCE_LOG"] = lance_log
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True
    )


def test_new_partitions_log_nothing_by_default(tmp_path: Path) -> None:
    out = run(WRITE_NEW_PARTITIONS, str(tmp_path / "ns"))
    assert "it will be created" not in out.stderr
    assert out.stderr.strip() == ""


@pytest.mark.integration
@pytest.mark.parametrize("level", ["warn", "info"])
def test_lance_log_set_by_the_user_is_respected(tmp_path: Path, level: str) -> None:
    out = run(WRITE_NEW_PARTITIONS, str(tmp_path / "ns"), lance_log=level)
    # at least the __manifest's and the staged partition's tables (the direct write and
    # create_partition create theirs through a commit that does not log)
    assert out.stderr.count("it will be created") >= 2


@pytest.mark.integration
def test_airflow_side_forks_do_not_warn() -> None:
    code = textwrap.dedent(
        """
        import os
        import airflow_provider_lance.common  # what every operator, sensor and trigger imports
        import lance
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        """
    )
    out = run(code)  # Airflow routes warnings to its log on stdout
    assert "fork-safe" not in out.stdout + out.stderr


@pytest.mark.integration
def test_the_core_keeps_lances_fork_warning() -> None:
    """Outside Airflow, a user forking with Lance handles open should still be told."""
    code = textwrap.dedent(
        """
        import os
        import airflow_provider_lance.namespace, lance
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        """
    )
    out = run(code)
    assert "fork-safe" in out.stdout + out.stderr
