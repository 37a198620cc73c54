"""What the command line prints reads as exactly what is stored (issue 39).

NULL and the string ``'NULL'``, ``''`` and ``' '`` print apart; a tab or a newline in a value
is escaped instead of breaking the table; integer partitions sort as numbers; ``--json``
keeps JSON types (numbers, ISO dates, null); transaction ids print whole; ``prune`` without
a filter lists every partition; ``history`` says when ``maintain`` removed its beginning.
Real namespaces on disk, the CLI run through ``main(argv)``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("bucket", pa.int32()),
        pa.field("label", pa.utf8()),
        pa.field("day", pa.date32()),
    ]
)
#: (id, bucket, label): the labels that printed alike before, and buckets that sorted as text.
ROWS = [
    (0, 0, "NULL"),
    (1, 1, None),
    (2, 10, ""),
    (3, 100, " "),
    (4, 2, "a\tb"),
    (5, None, "x\ny"),
    (6, 3, "it's"),
    (7, 3, "DE"),
]
DAY = dt.date(2025, 12, 10)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def labelled(tmp_path: Path) -> PartitionedNamespace:
    """Partitioned by an int and a string: one partition per row of :data:`ROWS`."""
    ns = PartitionedNamespace.create(
        tmp_path / "ns",
        SCHEMA,
        [PartitionField("bucket", "bucket"), PartitionField("label", "label")],
    )
    ids, buckets, labels = zip(*ROWS, strict=True)
    ns.write(
        pa.table(
            {"id": ids, "bucket": buckets, "label": labels, "day": [DAY] * len(ROWS)},
            schema=SCHEMA,
        )
    )
    return ns


def table_rows(text: str) -> list[list[str]]:
    """The rows of a printed table, split at runs of two spaces (header first)."""
    return [[c for c in line.strip().split("  ") if c] for line in text.splitlines() if line]


def test_null_and_strings_that_read_alike_print_apart(
    labelled: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "head", labelled.uri, "-n", "10", "--columns", "id,label")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(ROWS) + 1  # the tab and the newline did not break the table
    shown = {int(line.split()[0]): line.split(maxsplit=1)[1] for line in lines[1:]}
    assert shown == {
        0: "'NULL'",
        1: "NULL",
        2: "''",
        3: "' '",
        4: "'a\\tb'",
        5: "'x\\ny'",
        6: "it's",
        7: "DE",
    }


def test_partition_values_print_apart_and_sort_by_their_typed_values(
    labelled: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "prune", labelled.uri)  # no filter: every partition
    assert code == 0
    values = [row[2] for row in table_rows(out)[1:]]
    assert values == [
        "bucket=0, label='NULL'",
        "bucket=1, label=NULL",
        "bucket=2, label='a\\tb'",
        "bucket=3, label=DE",
        "bucket=3, label=it's",
        "bucket=10, label=''",
        "bucket=100, label=' '",
        "bucket=NULL, label='x\\ny'",
    ]
    code, out, _ = run(capsys, "describe", labelled.uri)
    assert code == 0
    listed = out.split("partitions:\n", 1)[1].splitlines()[1:]
    assert [line.split("  ")[-1].strip() for line in listed] == values


def test_json_keeps_the_types_of_partition_values(
    labelled: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "prune", labelled.uri, "--json")
    assert code == 0
    got = [json.loads(line)["values"] for line in out.splitlines()]
    assert got[0] == {"bucket": 0, "label": "NULL"}
    assert got[1] == {"bucket": 1, "label": None}
    assert got[-1] == {"bucket": None, "label": "x\ny"}
    assert [v["bucket"] for v in got] == [0, 1, 2, 3, 3, 10, 100, None]
    code, out, _ = run(capsys, "describe", labelled.uri, "--json")
    assert [p["values"]["bucket"] for p in json.loads(out)["partitions"]] == [
        0,
        1,
        2,
        3,
        3,
        10,
        100,
        None,
    ]
    code, out, _ = run(capsys, "history", labelled.uri, "--json")
    write = next(e for e in map(json.loads, out.splitlines()) if e["operation"] == "write")
    assert sorted(
        (p["values"]["bucket"] is None, p["values"]["bucket"] or 0) for p in write["partitions"]
    ) == [(False, b) for b in (0, 1, 2, 3, 3, 10, 100)] + [(True, 0)]
    code, out, _ = run(capsys, "delete", labelled.uri, "bucket = 10")
    assert code == 0
    result = json.loads(out)
    assert [p["values"] for p in result["partitions"]] == [{"bucket": 10, "label": ""}]
    code, out, _ = run(capsys, "head", labelled.uri, "-n", "1", "--filter", "id = 7", "--json")
    assert json.loads(out) == {"id": 7, "bucket": 3, "label": "DE", "day": "2025-12-10"}


def test_transaction_ids_print_whole(
    labelled: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id Airflow derives is up to 200 characters: people copy it into ``commit``."""
    txn_id = "events_daily=scheduled__2025-12-10T00:00:00+00:00=load_partition_of_the_day=" + (
        "x" * 90
    )
    labelled.begin("append", txn_id=txn_id)
    code, out, _ = run(capsys, "transactions", labelled.uri)
    assert code == 0
    assert txn_id in out.splitlines()[1]
    assert "…" not in out


def test_history_says_when_maintain_removed_its_beginning(
    labelled: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "history", labelled.uri)
    assert code == 0
    assert "removed by maintain" not in out
    labelled.tag("kept", as_of=2)
    labelled.maintain(older_than=dt.timedelta(0))
    code, out, err = run(capsys, "history", labelled.uri)
    assert code == 0
    retained = labelled.state().view.retained_versions()
    latest = max(retained)
    assert out.splitlines()[-1] == (
        f"(__manifest versions 1, 3-{latest - 1} and their history were removed by maintain: "
        "it keeps the versions younger than its --older-than-hours and tagged ones; kept: "
        "tagged v2)"
    )
    code, out, err = run(capsys, "history", labelled.uri, "--json")
    assert "removed by maintain" in err
    assert all(json.loads(line) for line in out.splitlines())  # stdout stays JSON lines


def test_prune_without_a_filter_lists_every_partition(
    labelled: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's ``prune URI [FILTER]``."""
    code, out, _ = run(capsys, "prune", labelled.uri, "--json")
    assert code == 0
    assert len(out.splitlines()) == len(labelled.partitions()) == len(ROWS)
