"""A storage error in the post-commit hook of a publish (``txn/publish.py: after_publish``:
the ``__manifest`` compaction, then the collection of finished transactions) is never the
publish's failure. The publish committed; reported as failed, it would be retried, and a
retry of an anonymous write writes its rows twice. Every publish path runs the same hook:
each must report success, with its rows published once.

The set-up: ``__manifest`` holds 15 fragments and the row of a finished anonymous
transaction (``create_partitions`` leaves one). The publish under test makes the 16th
fragment, so its hook compacts and then collects that row, in a swap of its own, which the
store refuses (``manifest.before_swap=error``, set while the publisher is parked right
after its publish).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.testing import ENV, hold
from airflow_provider_lance.namespace.txn.lifecycle import all_records
from tests.workers import TAGGED, tagged_rows

NEW_ROWS = tagged_rows("w", [1, 3], 2, first_id=200)  # an append to 1, a new partition 3


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))  # ids 0-3
    return ns


def manifest_fragments(ns: PartitionedNamespace) -> int:
    return len(lance.dataset(ns.uri + "/__manifest").get_fragments())


def anonymous_rows(ns: PartitionedNamespace) -> int:
    return sum(r.anonymous for r in all_records(ns.state()))


def fill_to_15_fragments(ns: PartitionedNamespace) -> None:
    """A finished anonymous transaction's row, then new partitions (a ``__manifest``
    fragment each) until the manifest holds 15 fragments: the next publish compacts."""
    ns.create_partitions([{"part": 8}])
    for i in range(40):
        if manifest_fragments(ns) >= 15:
            break
        ns.write(tagged_rows(f"f{i}", [100 + i], 1, first_id=1000 + i))
    assert manifest_fragments(ns) == 15
    assert anonymous_rows(ns) == 1


def tags(ns: PartitionedNamespace) -> Counter[str]:
    return Counter(ns.to_table(columns=["tag"]).column("tag").to_pylist())


def publisher(ns: PartitionedNamespace, path: str) -> tuple[str, Callable[[], Any]]:
    """The failpoint prefix of ``path``'s publish and the call that publishes (what it
    stages is staged first, before the manifest is filled)."""
    if path == "direct":
        return "direct", lambda: ns.write(NEW_ROWS)
    if path == "commit":
        ns.begin("append", "X").stage(NEW_ROWS)
        return "commit", lambda: ns.commit("X")
    assert path == "delete"
    return "delete", lambda: ns.delete("id = 0")


def publish_then_fail_after(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch, point: str, call: Callable[[], Any]
) -> Any:
    """Run ``call`` until it published, make every ``__manifest`` swap fail from then on,
    and return what ``call`` returns (or raise what it raises)."""
    with ThreadPoolExecutor(1) as pool, hold(f"{point}.after_publish") as parked:
        running = pool.submit(call)
        parked.wait_reached()  # published; the post-commit hook comes next
        monkeypatch.setenv(ENV, "manifest.before_swap=error")
        parked.release()
        try:
            return running.result(timeout=120)
        finally:
            monkeypatch.delenv(ENV)


@pytest.mark.parametrize("path", ["direct", "commit", "delete"])
def test_a_storage_error_in_the_post_commit_hook_is_not_the_publishs_failure(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    point, call = publisher(ns, path)
    fill_to_15_fragments(ns)
    before = tags(ns)
    result = publish_then_fail_after(ns, monkeypatch, point, call)  # raises if reported failed
    assert result.manifest_version is not None
    assert anonymous_rows(ns) == 1  # the hook's collection did fail: its row is still there
    if path == "delete":
        assert result.rows_removed == 1
        assert tags(ns) == before - Counter({"seed": 1})
    else:
        assert result.rows == 4
        assert {int(p.values["part"]): p.created for p in result.partitions} == {1: False, 3: True}
        assert tags(ns) == before + Counter({"w": 4})  # published, once
        published = ns.to_table(columns=["tag"], version=result.manifest_version)
        assert published.column("tag").to_pylist().count("w") == 4
    ids = ns.to_table(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids))
