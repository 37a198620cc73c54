"""``fragment_text`` writes the very text ``json.dumps(meta.to_json())`` does, for every kind
of fragment a leaf can hold: stage records compare fragments by their text."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace.write.leaf_commit import fragment_text

ROWS = pa.table(
    {"id": pa.array(range(10), pa.int64()), "s": pa.array([f"r{i}" for i in range(10)])}
)


def fragments(ds: lance.LanceDataset) -> list[FragmentMetadata]:
    return [f.metadata for f in ds.get_fragments()]


def made(tmp_path: Path, kind: str) -> lance.LanceDataset:
    uri = str(tmp_path / "t.lance")
    if kind == "stable row ids":
        return lance.write_dataset(ROWS, uri, enable_stable_row_ids=True)
    ds = lance.write_dataset(ROWS, uri, max_rows_per_file=4)  # three fragments
    if kind == "deletions":
        ds.delete("id = 3")
    elif kind == "added column":  # a second data file per fragment, other field ids
        ds.add_columns({"t": "id * 2"})
    return lance.dataset(uri)


@pytest.mark.parametrize("kind", ["plain", "deletions", "added column", "stable row ids"])
def test_the_text_is_lances_own(tmp_path: Path, kind: str) -> None:
    metas = fragments(made(tmp_path, kind))
    assert metas
    for meta in metas:
        text = fragment_text(meta)
        assert text == json.dumps(meta.to_json())
        assert FragmentMetadata.from_json(text) == meta


def test_plain_fragments_take_the_short_path(tmp_path: Path, monkeypatch) -> None:
    """The short path is the one measured: a plain fragment never calls ``to_json``."""
    metas = fragments(made(tmp_path, "added column"))
    expected = [json.dumps(m.to_json()) for m in metas]

    def refused(self: FragmentMetadata) -> dict:
        raise AssertionError("to_json was called for a plain fragment")

    monkeypatch.setattr(FragmentMetadata, "to_json", refused)
    assert [fragment_text(m) for m in metas] == expected
