"""Row checks shared by the test files, none of which a duplicated row can pass.

A dict or set keyed by ``id`` keeps one of two rows with the same id: comparing one hides
a publish that kept a row twice. These keep every row and fail on a repeated key.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace import PartitionedNamespace


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
