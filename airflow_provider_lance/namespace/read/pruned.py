"""What a filter prunes to, and the plans made of it, remembered per ``__manifest`` version.

A ``__manifest`` version never changes, so neither does what a filter prunes it to, nor the
plan of a read of it: a handle that reads the same filter again (a search service asking for
one date) skips the prune (:class:`PruneCache`) and the planning (:class:`PlanCache`). The
key is the version (and whether the reader named it, which its errors say), so a new
publish is a new key and is never hidden. Results of many partitions are not kept: they
cost more memory than their prune.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_provider_lance.namespace.format.state import NamespaceState, Partition

from .coverage import pruned_rows
from .plan import ScanPlan
from .remembered import Remembered

#: Prune results (and plans) a handle keeps.
ENTRIES = 256
#: Partitions the kept results (and plans) hold in all (a larger result is not kept).
PARTITIONS = 1 << 16


def prune(state: NamespaceState, filter: str | None) -> list[Partition]:
    """The partitions of ``state`` that may hold rows matching the SQL ``filter``."""
    if filter is None:
        return state.partitions()
    return state.partitions_from_rows(pruned_rows(state, filter))


class PruneCache:
    """The last ``entries`` prune results of one namespace, holding at most ``partitions``
    partitions in all; safe to share between threads."""

    def __init__(self, entries: int = ENTRIES, partitions: int = PARTITIONS) -> None:
        self._kept: Remembered[tuple[int, bool, str], tuple[Partition, ...]] = Remembered(
            entries, partitions, len
        )

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, state: NamespaceState, filter: str | None) -> list[Partition] | None:
        """The kept result of ``filter`` on ``state``'s version (None: not kept, or no
        ``filter``: a state's own partitions are read from its version, which a handle's
        state that is no longer the latest may not have any more)."""
        if not isinstance(filter, str):  # (a filter of another type is refused by prune)
            return None
        kept = self._kept.get((state.version, state.pinned, filter))
        return None if kept is None else list(kept)

    def prune(self, state: NamespaceState, filter: str | None) -> list[Partition]:
        """:func:`prune`, from the kept result when there is one (then kept)."""
        if filter is None:
            return state.partitions()  # the state keeps them
        kept = self.get(state, filter)
        if kept is not None:
            return kept
        found = prune(state, filter)  # (a filter that is no string was refused there)
        self._kept.keep((state.version, state.pinned, filter), tuple(found))
        return found


PlanKey = tuple[int, str | None, tuple[str, ...] | None]


class PlanCache:
    """The last ``entries`` plans of reads of one namespace's latest versions (no data files
    listed, not split), holding at most ``partitions`` tasks in all; safe to share between
    threads."""

    def __init__(self, entries: int = ENTRIES, partitions: int = PARTITIONS) -> None:
        self._kept: Remembered[PlanKey, ScanPlan] = Remembered(
            entries, partitions, lambda plan: len(plan.tasks)
        )

    def __len__(self) -> int:
        return len(self._kept)

    def get(
        self, version: int, filter: object, columns: Sequence[object] | None
    ) -> ScanPlan | None:
        """The kept plan of ``filter`` and ``columns`` on ``version`` (None: none)."""
        key = _key(version, filter, columns)
        return None if key is None else self._kept.get(key)

    def keep(self, plan: ScanPlan) -> None:
        """Keep ``plan`` (made for the latest version, with no data files listed)."""
        scan = plan.scan
        key = _key(scan.manifest_version, scan.filter, scan.columns)
        if key is not None:
            self._kept.keep(key, plan)


def _key(version: int, filter: object, columns: Sequence[object] | None) -> PlanKey | None:
    """The key of a plan (None: arguments a plan is never made of, which are not kept)."""
    if filter is not None and not isinstance(filter, str):
        return None
    if columns is None:
        return version, filter, None
    if not isinstance(columns, list | tuple) or not all(isinstance(c, str) for c in columns):
        return None
    return version, filter, tuple(columns)
