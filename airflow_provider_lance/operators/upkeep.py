"""Upkeep of a namespace: maintenance, recovery, repair, and aborting transactions.

Thin wrappers over :class:`~airflow_provider_lance.namespace.PartitionedNamespace`, for
DAGs that keep namespaces healthy (a nightly maintenance DAG) and for the "abort" branch
of write-audit-publish. Every one is safe to retry: maintenance and recovery act on what
they find, repair does nothing once nothing is missing, an aborted transaction stays
aborted. Their XCom is a small summary, whatever the namespace's size.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSkipException,
    BaseOperator,
)

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook, TaskProgress
from airflow_provider_lance.operators.commit import parse_transactions, transactions_namespace

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: Idle time after which ``recover`` aborts a transaction (the core's default: 6 hours).
DEFAULT_LEASE_SECONDS = 6 * 3600.0
#: The youngest ``orphan_min_age`` the sweep takes unless ``enforce_min_age=False`` (the
#: core's ``MIN_SAFE_ORPHAN_AGE``, which loads pylance: checked when a DAG file is parsed).
MIN_SAFE_ORPHAN_AGE_SECONDS = DEFAULT_LEASE_SECONDS
#: Items a list in the XCom summary names (the rest are counted).
SUMMARY_ITEMS = 20


class LanceMaintainOperator(v.ArgumentChecks, BaseOperator):
    """Compact ``__manifest``, with ``older_than`` remove old versions safely, and with
    ``sweep_orphans`` remove files nothing references.

    Every ``__manifest`` version that remains stays readable (see
    :meth:`PartitionedNamespace.maintain`), and so does every tagged one; keep
    ``older_than`` longer than the longest transaction and than readers pinned to old
    versions. The orphan sweep removes data files no leaf version references (what killed
    writers left) and the leaf tables of dropped partitions no retained version reads,
    once older than ``orphan_min_age``. ``dry_run`` changes nothing: it reports what the
    sweep would remove (compaction and version cleanup do not run then).

    :param namespace: relative name or full URI (templated).
    :param compact: merge the manifest's fragments and bring its index up to date.
    :param older_than: remove versions older than this: a timedelta or seconds
        (templated; none: remove nothing).
    :param sweep_orphans: also run the orphan sweep (local disks and S3).
    :param orphan_min_age: the sweep leaves files younger than this (a write in flight
        has just staged them): a timedelta or seconds (templated; default the core's,
        one day). Below 6 hours (``MIN_SAFE_ORPHAN_AGE``) the task fails at once, nothing
        removed, unless ``enforce_min_age=False`` or ``dry_run``.
    :param dry_run: only report what the sweep would remove.
    :param enforce_min_age: refuse an ``orphan_min_age`` below the safe minimum (the
        files of writes still in flight would be deleted). Turn it off only where no
        write can run during the sweep (not templated: a deliberate choice of the DAG's
        author, not of a run's conf).
    :param indices: first index what the declared indexes do not cover yet (new
        partitions and fragments) in every partition, in its own ``__manifest`` commit
        (:class:`~airflow_provider_lance.operators.indexes.LanceOptimizeIndicesOperator`
        does it for some). It compacts no leaf: put
        :class:`~airflow_provider_lance.operators.table.LanceOptimizeOperator` upstream,
        so that the compacted fragments are indexed (Lance's order: compact, then index).
    :return: (XCom) ``{"uri", "manifest_version", "dry_run", "manifest_fragments_before",
        "manifest_fragments_after", "manifest_versions_removed", "leaf_versions_removed",
        "retained_manifest_versions", "tags_kept", "leaves_skipped",
        "leaves_skipped_by_reason", "orphans", "indices"}`` (skipped leaves counted per
        reason; ``orphans``: the sweep's counts and a sample of paths, None without a
        sweep; ``indices``: ``{"manifest_version", "rows_indexed", "partition_count",
        "skipped_count"}`` of the index upkeep (``rows_indexed``: rows newly indexed, each
        counted once), None when no index is declared, ``indices`` is off or on a dry run).
    """

    template_fields: Sequence[str] = ("namespace", "older_than", "orphan_min_age")
    ui_color = "#e3d7f2"
    argument_checks = {
        "namespace": v.namespace,
        "compact": v.flag(),
        "older_than": v.duration(optional=True),
        "sweep_orphans": v.flag(),
        "orphan_min_age": v.duration(optional=True),
        "dry_run": v.flag(),
        "enforce_min_age": v.flag(),
        "indices": v.flag(),
        "lance_conn_id": v.conn_id,
    }
    argument_attributes = {"dry_run": "sweep_dry_run"}

    def __init__(
        self,
        *,
        namespace: str | None = None,
        compact: bool = True,
        older_than: dt.timedelta | float | str | None = None,
        sweep_orphans: bool = False,
        orphan_min_age: dt.timedelta | float | str | None = None,
        dry_run: bool = False,
        enforce_min_age: bool = True,
        indices: bool = True,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace
        self.compact = compact
        self.indices = indices
        self.older_than = older_than
        self.sweep_orphans = sweep_orphans
        self.orphan_min_age = orphan_min_age
        #: (``BaseOperator.dry_run`` is a method: the flag keeps another name)
        self.sweep_dry_run = dry_run
        self.enforce_min_age = enforce_min_age
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        if not self.sweep_orphans:
            for name, given in (
                ("dry_run", self.sweep_dry_run),
                ("orphan_min_age", not v.absent(self.orphan_min_age)),
                ("enforce_min_age=False", not self.enforce_min_age),
            ):
                if given:
                    raise v.Refused(f"{name} applies to the orphan sweep: set sweep_orphans=True")
        if "orphan_min_age" in known and self.enforce_min_age and not self.sweep_dry_run:
            age = v.seconds_of(known["orphan_min_age"], optional=True)
            if age is not None and age < MIN_SAFE_ORPHAN_AGE_SECONDS:
                raise v.Refused(
                    f"orphan_min_age {known['orphan_min_age']!r} is under "
                    f"{MIN_SAFE_ORPHAN_AGE_SECONDS / 3600:g} hours: the sweep would delete the "
                    "files of writes still in flight; raise it, or set enforce_min_age=False "
                    "where no write runs during the sweep"
                )

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        older = v.duration_seconds(self.older_than, "older_than", optional=True)
        min_age = v.duration_seconds(self.orphan_min_age, "orphan_min_age", optional=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        sweep: dict[str, Any] = {}
        if self.sweep_orphans:
            sweep["sweep_orphans"] = True
            sweep["enforce_min_age"] = self.enforce_min_age
            if min_age is not None:
                sweep["orphan_min_age"] = dt.timedelta(seconds=min_age)
        with lance_errors(f"maintenance of {uri}"):
            ns = hook.open(uri)
            report = ns.maintain(
                compact=self.compact,
                older_than=None if older is None else dt.timedelta(seconds=older),
                dry_run=self.sweep_dry_run,
                indices=self.indices,
                progress=TaskProgress(self.log),
                **sweep,
            )
            version = ns.version
        retained = report.retained_manifest_versions
        summary = {
            "uri": uri,
            "manifest_version": version,
            "dry_run": self.sweep_dry_run,
            "manifest_fragments_before": report.manifest_fragments_before,
            "manifest_fragments_after": report.manifest_fragments_after,
            "manifest_versions_removed": report.manifest_versions_removed,
            "leaf_versions_removed": report.leaf_versions_removed,
            "retained_manifest_versions": None if retained is None else list(retained),
            "tags_kept": len(report.tagged_manifest_versions),
            "leaves_skipped": len(report.leaves_skipped),
            "leaves_skipped_by_reason": {
                reason: len(ids) for reason, ids in report.leaves_skipped_by_reason.items()
            },
            "orphans": report.orphans,
            "indices": index_summary(report.indices),
        }
        self.log.info(
            "maintained %s: __manifest fragments %d -> %d, %d manifest and %d leaf versions "
            "removed",
            uri,
            report.manifest_fragments_before,
            report.manifest_fragments_after,
            report.manifest_versions_removed,
            report.leaf_versions_removed,
        )
        if report.orphans is not None:
            orphans = report.orphans
            self.log.info(
                "orphan sweep of %s%s: %s file(s), %s bytes, %s dropped leaf table(s)%s",
                uri,
                " (dry run)" if self.sweep_dry_run else "",
                orphans.get("files_removed"),
                orphans.get("bytes_freed"),
                orphans.get("leaf_tables_removed"),
                " would be removed" if self.sweep_dry_run else " removed",
            )
        return summary


def index_summary(result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The counts of the index upkeep ``maintain`` ran (an ``OperationResult`` dict), not
    its list of partitions (the XCom stays small)."""
    if result is None:
        return None
    return {
        "manifest_version": result["manifest_version"],
        "rows_indexed": result["rows_indexed"],
        "partition_count": len(result["partitions"]),
        "skipped_count": len(result["skipped"]),
    }


class LanceRecoverOperator(v.ArgumentChecks, BaseOperator):
    """Abort transactions idle for longer than a lease and release stale claims.

    For writers that died for good (a deleted DAG run, a worker lost mid-commit): their
    staged files are deleted and the partitions they claimed are free again. A live
    writer's transaction is younger than the lease and left alone.

    :param namespace: relative name or full URI (templated).
    :param lease_seconds: idle time after which a transaction counts as abandoned: a
        timedelta or seconds (templated; default 6 hours). Keep it longer than any
        write's run time plus its retries.
    :return: (XCom) ``{"uri", "aborted_count", "aborted": [...first N ids...]}``.
    """

    template_fields: Sequence[str] = ("namespace", "lease_seconds")
    ui_color = "#e3d7f2"
    argument_checks = {
        "namespace": v.namespace,
        "lease_seconds": v.duration(),
        "lance_conn_id": v.conn_id,
    }

    def __init__(
        self,
        *,
        namespace: str | None = None,
        lease_seconds: dt.timedelta | float | str = DEFAULT_LEASE_SECONDS,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace
        self.lease_seconds = lease_seconds
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        lease = v.duration_seconds(self.lease_seconds, "lease_seconds")
        assert lease is not None
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"recovery of {uri}"):
            aborted = hook.open(uri).recover(lease)
        self.log.info("recovery of %s aborted %d transaction(s): %s", uri, len(aborted), aborted)
        return {"uri": uri, "aborted_count": len(aborted), "aborted": aborted[:SUMMARY_ITEMS]}


class LanceRepairOperator(v.ArgumentChecks, BaseOperator):
    """Restore the ``__manifest`` columns a foreign writer dropped (e.g. pylance's
    ``DirectoryNamespace``); a no-op when nothing is missing. Refuses, changing nothing,
    where a repair would have to guess (see :meth:`PartitionedNamespace.repair`).

    :param namespace: relative name or full URI (templated).
    :return: (XCom) ``{"uri", "repaired", "from_version", "restored_rows",
        "rows_from_properties", "manifest_version"}``.
    """

    template_fields: Sequence[str] = ("namespace",)
    ui_color = "#e3d7f2"
    argument_checks = {"namespace": v.namespace, "lance_conn_id": v.conn_id}

    def __init__(
        self,
        *,
        namespace: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"repair of {uri}"):
            report = hook.open(uri).repair()
        self.log.info("repair of %s: %s", uri, report)
        return {"uri": uri, **dataclasses.asdict(report)}


class LanceAbortOperator(v.ArgumentChecks, BaseOperator):
    """Abort staged transactions: their files are deleted, nothing of them is published.

    The "abort" branch of write-audit-publish: run it when the checks of staged data fail
    (``trigger_rule="one_failed"`` downstream of the checks). Aborting an aborted
    transaction is a no-op, so a retry is harmless; a published transaction cannot be
    aborted and fails the task at once.

    :param transactions: transaction ids or write results (e.g. the XCom of a staging
        :class:`LanceWriteOperator` or :class:`LanceSparkWriteOperator`) (templated).
    :param namespace: relative name or full URI (templated; default: the ``uri`` the
        write results name, else the connection root).
    :param reason: recorded with the abort (templated).
    :return: (XCom) ``{"uri", "aborted": [ids], "reason"}``.
    """

    template_fields: Sequence[str] = ("transactions", "namespace", "reason")
    ui_color = "#f2c4c4"
    argument_checks = {
        "transactions": v.transactions,
        "namespace": v.namespace,
        "reason": v.text(optional=True, blank=True, what="a string"),
        "lance_conn_id": v.conn_id,
    }

    def __init__(
        self,
        *,
        transactions: Any,
        namespace: str | None = None,
        reason: str = "aborted by an Airflow task",
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.transactions = transactions
        self.namespace = namespace
        self.reason = reason
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        ids, uris, published = parse_transactions(self.transactions)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = transactions_namespace(hook, self.namespace, uris)
        if published:
            raise AirflowFailException(
                f"transactions {published} were published by their writers; a published "
                "transaction cannot be aborted"
            )
        if not ids:
            raise AirflowSkipException(f"no transaction to abort in {uri}")
        reason = self.reason or "aborted by an Airflow task"
        ti = context["ti"]
        reason = f"{reason} ({ti.dag_id}.{ti.task_id}, run {ti.run_id})"
        with lance_errors(f"abort of {ids} in {uri}"):
            ns = hook.open(uri)
            for txn_id in ids:
                ns.abort(txn_id, reason=reason)
                self.log.info("aborted transaction %s in %s: %s", txn_id, uri, reason)
        return {"uri": uri, "aborted": ids, "reason": reason}
