"""Helpers shared by the test files: the events and tagged tables they write, the storage
options of an unreachable store, file listings, and row checks none of which a duplicated row
can pass (a dict or set keyed by ``id`` keeps one of two rows with the same id: comparing one
hides a publish that kept a row twice; these keep every row and fail on a repeated key).
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

EVENTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("amount", pa.float64()),
    ]
)


def events(
    n: int, start: dt.date = dt.date(2025, 12, 10), days: int = 3, first_id: int = 0
) -> pa.Table:
    """``n`` deterministic event rows spread over ``days`` days and four countries."""
    countries = ["US", "DE", "FR", None]
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "event_date": pa.array([start + dt.timedelta(days=i % days) for i in range(n)]),
            "country": pa.array([countries[i % 4] for i in range(n)], pa.utf8()),
            "amount": pa.array([float(i) * 1.5 for i in range(n)]),
        },
        schema=EVENTS_SCHEMA,
    )


#: Storage options of an S3 store on a closed loopback port: every request is refused at once
#: and nothing leaves the machine (region and keys given: no lookups, no credential chain).
UNREACHABLE_OPTIONS = {
    "aws_endpoint": "http://127.0.0.1:9",
    "allow_http": "true",
    "aws_region": "us-east-1",
    "aws_access_key_id": "unreachable",
    "aws_secret_access_key": "unreachable",
    "client_max_retries": "0",
    "client_retry_timeout": "1",
    "connect_timeout": "2s",
    "timeout": "5s",
}


def sort_rows(table: pa.Table, key: str = "id") -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r[key] is None, r[key]))


def tree(path: Path) -> list[str]:
    """Every file below ``path`` (relative), to prove an operation changed nothing on disk."""
    return sorted(
        os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files
    )


def leaf_files(path: Path) -> list[str]:
    """Files of the leaf tables only: not ``__manifest`` (whose history grows with every
    transaction step) and not the transaction records."""
    return [f for f in tree(path) if not f.startswith(("_transactions/", "__manifest/"))]


TAGGED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("tag", pa.utf8()),
    ]
)


def seeded_namespace(path: object) -> PartitionedNamespace:
    """A namespace of :data:`TAGGED` partitioned by ``part``, seeded with two rows tagged
    ``seed`` in each of partitions 1 and 2."""
    ns = PartitionedNamespace.create(
        str(path), schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))
    return ns


def tagged_rows(tag: str, parts: list[int], per_part: int, first_id: int) -> pa.Table:
    """Rows of one transaction: ``per_part`` rows in each of ``parts``, all tagged ``tag``."""
    ids, part_col = [], []
    for k, part in enumerate(parts):
        for j in range(per_part):
            ids.append(first_id + k * per_part + j)
            part_col.append(part)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(part_col, pa.int32()),
            "tag": [tag] * len(ids),
        },
        schema=TAGGED,
    )


def repeated(keys: list[Any]) -> dict[Any, int]:
    """The keys that occur more than once, with their counts."""
    return {k: n for k, n in Counter(keys).items() if n > 1}


def no_duplicates(
    ns: PartitionedNamespace, version: int | None = None, key: str = "id"
) -> list[int]:
    """The sorted ids the namespace reads (at the manifest ``version``, default latest),
    asserting that no id is read twice."""
    found = sorted(ns.to_table(columns=[key], version=version).column(key).to_pylist())
    assert not repeated(found), f"duplicated rows: {repeated(found)}"
    return found


def by_id(rows: pa.Table | list[dict], column: str | None = None, key: str = "id") -> dict:
    """``{row[key]: row}`` (or ``row[column]``), asserting that no key occurs twice (a
    plain dict comprehension keeps the last of two rows with one key, silently)."""
    listed = rows.to_pylist() if isinstance(rows, pa.Table) else rows
    keys = [r[key] for r in listed]
    assert not repeated(keys), f"duplicated rows: {repeated(keys)}"
    return {r[key]: (r if column is None else r[column]) for r in listed}
