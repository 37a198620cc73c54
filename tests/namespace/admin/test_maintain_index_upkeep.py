"""The order of ``maintain``'s steps around index upkeep (issue 41): ``optimize_indices``
runs before the ``__manifest`` compaction and version cleanup, so its publish is compacted
and cleaned by the same call, and the orphan sweep runs last, after the builds ended."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.namespace.ops.index_data import VECTORS, vector_rows


def test_maintain_indexes_first_and_compacts_what_its_index_upkeep_published(
    root: Path,
) -> None:
    ns = PartitionedNamespace.create(root, VECTORS, [PartitionField("part", "part")])
    ns.write(vector_rows([1, 2], 100, first_id=0))
    ns.create_scalar_index("id", "BTREE")
    for day in range(3):
        ns.write(vector_rows([2, 3 + day], 10, first_id=1000 + 100 * day))
    report = ns.maintain(
        older_than=dt.timedelta(0),
        sweep_orphans=True,
        orphan_min_age=dt.timedelta(0),
        enforce_min_age=False,
    )
    assert report.indices is not None
    assert report.indices["rows_indexed"] == 60
    manifest = lance.dataset(f"{ns.uri}/__manifest")
    # the index upkeep's publish came before the compaction: nothing was added after it
    assert len(manifest.get_fragments()) == report.manifest_fragments_after
    assert report.retained_manifest_versions == (manifest.version, manifest.version)
    assert {i.name: i.rows_unindexed for i in ns.list_indices()} == {"id_idx": 0}
    assert report.orphans is not None
    assert report.orphans["kept_staged"] == 0
