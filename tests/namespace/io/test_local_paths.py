"""A local path is not a URL (issue 39): its characters name the directory as they are.

Before, ``pct%41dir`` was created as ``pctAdir`` (the path went into a ``file://`` URI
unencoded and Lance percent-decoded it), and a ``#`` or ``?`` in a path cut it short for
the namespace's own file listing (``urlparse`` read a fragment or a query).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.namespace.io.uri import local_path, normalize_root

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("part", pa.int64())])
ROWS = pa.table({"id": [1, 2], "part": [0, 1]})


@pytest.mark.parametrize("name", ["pct%41dir", "a#b", "what?", "sp ace", "back\\slash", "é"])
def test_a_local_path_names_its_directory_as_written(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    ns = PartitionedNamespace.create(
        str(path), schema=SCHEMA, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(ROWS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert local_path(ns.uri) == str(path)
    again = PartitionedNamespace.open(str(path))
    assert again.uri == ns.uri
    assert again.to_table().sort_by("id") == ROWS
    # the orphan sweep lists the files below the root through its local path
    [leaf] = [d for d in path.iterdir() if d.name.endswith("$dataset")][:1]
    stray = leaf / "data" / "stray.lance"
    stray.write_bytes(b"not referenced")
    report = again.maintain(
        older_than=dt.timedelta(0),
        sweep_orphans=True,
        orphan_min_age=dt.timedelta(0),
        enforce_min_age=False,
    )
    assert report.orphans is not None
    assert report.orphans["files_removed"] == 1, report.orphans
    assert not stray.exists()
    assert again.count_rows() == 2


def test_the_file_uri_of_a_path_is_percent_encoded() -> None:
    assert normalize_root("/data/pct%41dir") == "file:///data/pct%2541dir"
    assert normalize_root("/data/a b#c") == "file:///data/a%20b%23c"
    assert normalize_root("/data/é") == "file:///data/é"
    # a URI is taken as written: its escapes are a URL's
    assert normalize_root("file:///data/pct%41dir") == "file:///data/pct%41dir"
    assert local_path("file:///data/pct%41dir") == "/data/pctAdir"


def test_a_control_character_in_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"control character '\\t'"):
        PartitionedNamespace.create(
            str(tmp_path / "tab\there"),
            schema=SCHEMA,
            partition_fields=[PartitionField("part", "part")],
        )
    assert list(tmp_path.iterdir()) == []
