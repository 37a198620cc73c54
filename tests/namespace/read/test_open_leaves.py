"""Searches keep leaf versions open between calls (``read/leaf.py``): at most
``OPEN_LEAVES`` per storage, all in one Lance session per storage whose index and metadata
caches are bounded in bytes, so the memory searches hold does not grow with the leaves
searched or their size.
"""

from __future__ import annotations

from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.read import leaf
from tests.namespace.read.test_vector_search import BY_DAY_AND_COUNTRY, SCHEMA, query, rows


@pytest.fixture
def indexed(tmp_path: Path) -> PartitionedNamespace:
    """24 partitions, each with an IVF_FLAT index of 2 lists."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_DAY_AND_COUNTRY)
    ns.write(rows(720))
    ns.create_index("vec", "IVF_FLAT", num_partitions=2)
    return ns


def searches(ns: PartitionedNamespace) -> list[list[int]]:
    """The top 5 of a few queries, over every partition and over each day."""
    out = []
    for seed in range(3):
        nearest = {"column": "vec", "q": query(seed), "k": 5}
        out.append(ns.to_table(nearest=nearest).column("id").to_pylist())
        for day in range(1, 6):
            where = f"day = DATE '2025-03-0{day}'"
            out.append(ns.to_table(nearest=nearest, filter=where).column("id").to_pylist())
    return out


def test_the_leaves_kept_open_stay_within_their_count(
    indexed: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = searches(PartitionedNamespace.open(indexed.uri))
    monkeypatch.setattr(leaf._open, "size", 5)
    handle = PartitionedNamespace.open(indexed.uri)
    assert searches(handle) == expected
    assert len(leaf._open.kept(handle.storage)) == 5  # 24 searched, the last 5 kept


def test_the_indexes_searches_load_stay_within_the_sessions_bytes(
    indexed: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every kept leaf is in the storage's one session, which holds about its two caches'
    bytes (the same searches uncapped hold over 8 times more), and searches give the same
    rows once the indexes no longer all fit."""
    uncapped = PartitionedNamespace.open(indexed.uri)
    expected = searches(uncapped)
    assert leaf.search_session(uncapped.storage).size_bytes() > 256 << 10
    monkeypatch.setattr(leaf, "INDEX_CACHE_BYTES", 16 << 10)
    monkeypatch.setattr(leaf, "METADATA_CACHE_BYTES", 16 << 10)
    handle = PartitionedNamespace.open(indexed.uri)
    assert searches(handle) == expected
    session = leaf.search_session(handle.storage)
    opened = leaf._open.kept(handle.storage)
    assert len(opened) == 24
    assert all(o.table.session().is_same_as(session) for o in opened)
    assert session.size_bytes() <= 2 * (32 << 10)  # Lance evicts lazily: an entry over


def test_a_session_given_to_open_holds_what_searches_load(indexed: PartitionedNamespace) -> None:
    """pylance's way to cap the caches (``lance.Session(index_cache_size_bytes=...)``),
    given to ``open``: every kept leaf is in it, it stays about its caps, one session can
    serve two handles, and the rows are those of the default session."""
    expected = searches(PartitionedNamespace.open(indexed.uri))
    session = lance.Session(index_cache_size_bytes=16 << 10, metadata_cache_size_bytes=16 << 10)
    handles = [PartitionedNamespace.open(indexed.uri, session=session) for _ in range(2)]
    assert [searches(h) for h in handles] == [expected, expected]
    for handle in handles:
        assert leaf.search_session(handle.storage) is session
        opened = leaf._open.kept(handle.storage)
        assert len(opened) == 24
        assert all(o.table.session().is_same_as(session) for o in opened)
    assert session.size_bytes() <= 2 * (32 << 10)  # Lance evicts lazily: an entry over


@pytest.mark.parametrize("session", [{"index_cache_size_bytes": 1 << 20}, 1 << 20, "big"])
def test_a_session_that_is_not_a_lance_session_is_refused(tmp_path: Path, session: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"session must be a lance\.Session"):
        PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_DAY_AND_COUNTRY, session=session)  # type: ignore[arg-type]
    assert not (tmp_path / "ns").exists()  # refused before anything was written
