"""The table-operation commands of ``python -m airflow_provider_lance``: JSON results on
stdout, progress on stderr, the project's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import BY_PART, TAGGED, ids, tagged_rows

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def three_writes(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    for k in range(3):
        ns.write(tagged_rows(f"day{k}", [1, 2, 3], 2, first_id=100 * k))
    return ns


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = cli.main(list(argv))
    out = capsys.readouterr().out.strip()
    return code, (json.loads(out.splitlines()[-1]) if code == 0 else {})


def test_delete_drop_merge_optimize_and_maintain(three_writes, root, tmp_path, capsys) -> None:
    code, result = run(capsys, "delete", three_writes.uri, "id % 100 = 0", "--txn-id", "d1")
    assert code == 0
    assert result["rows_removed"] == 3  # ids 0, 100 and 200
    assert result["txn_id"] == "d1"

    code, result = run(capsys, "drop-partitions", three_writes.uri, "part = 3")
    assert code == 0
    assert result["partitions_dropped"] == 1

    path = tmp_path / "updates.parquet"
    pq.write_table(tagged_rows("m", [1, 4], 1, first_id=101), path)
    code, result = run(capsys, "merge", three_writes.uri, str(path), "--on", "id", "--on", "part")
    assert code == 0
    assert result["rows_updated"] == 1
    assert result["rows_inserted"] == 1

    code, result = run(capsys, "optimize", three_writes.uri, "part <= 2")
    assert code == 0
    assert result["partitions_rewritten"] == 2

    code, report = run(capsys, "maintain", three_writes.uri, "--sweep-orphans", "--dry-run")
    assert code == 0
    assert report["orphans"]["dry_run"] is True
    assert ids(three_writes) == [
        1,
        2,
        3,
        101,
        102,
        102,
        103,
        201,
        202,
        203,
    ]  # 102 twice: parts 2, 4


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["delete", "{uri}", "nope = 1"], 2),
        (["drop-partitions", "{uri}", "tag = 'x'"], 2),
        (["merge", "{uri}", "/nonexistent.parquet", "--on", "id"], 2),
        (["optimize", "{uri}", "--target-rows-per-fragment", "0"], 2),
        (["delete", "/nonexistent/namespace", "id = 1"], 2),
    ],
)
def test_bad_input_exits_2(three_writes, capsys, argv, code) -> None:
    assert cli.main([a.format(uri=three_writes.uri) for a in argv]) == code
    assert "error:" in capsys.readouterr().err


def test_progress_goes_to_stderr(three_writes) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_lance", "optimize", three_writes.uri],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["operation"] == "optimize"
    assert "optimize published" in done.stderr
