"""``LanceSparkWriteOperator``: a spark-submit of the project's write job into a namespace."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowOptionalProviderFeatureException,
    Asset,
    BaseHook,
)

try:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
except ImportError as exc:  # a dependency of the package: only a --no-deps install lacks it
    raise AirflowOptionalProviderFeatureException(
        "LanceSparkWriteOperator needs the Apache Spark provider, a dependency of "
        "airflow-provider-lance: pip install airflow-provider-lance (without --no-deps)"
    ) from exc

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors, txn_id_from_context
from airflow_provider_lance.hooks.connection import is_secret_key
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.namespace import MODES, has_scheme
from airflow_provider_lance.namespace.errors import StorageError
from airflow_provider_lance.operators.commit import (
    DEFAULT_MAX_PARTITION_KEYS,
    PUBLISH_ARGUMENTS,
    add_partition_keys,
    partition_keys_of,
    truncated_keys_extra,
    wants_partition_keys,
)
from airflow_provider_lance.operators.lineage import (
    NamespaceWrite,
    file_dataset_name,
    operator_lineage,
)
from airflow_provider_lance.spark.jobs import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_FAILED,
    FORMATS,
    STORAGE_OPTIONS_ENV,
    WRITE_JOB,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage


def java_problem(env: Mapping[str, str]) -> str | None:
    """Why spark-submit could not start a JVM with ``env``, or None.

    ``spark-submit`` runs ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set and ``java``
    from ``PATH`` otherwise (``spark-class``); without one it exits 1 and says why only in
    the log, so the task would fail "retryably" with no reason. Checked before it starts.
    """
    java_home = env.get("JAVA_HOME")
    if java_home:
        if os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
            return None
        return f"JAVA_HOME={java_home} has no executable bin/java"
    if shutil.which("java", path=env.get("PATH")):
        return None
    return "JAVA_HOME is not set and no java is on PATH"


_EXIT_CODE = re.compile(r"Error code is: (-?\d+)")
_ERROR_LINE = re.compile(r"^error: (.+)$", re.M)
LOCAL_SPARK_CONNECTION = '{"conn_type": "spark", "host": "local[*]"}'
#: SparkSubmitOperator arguments this operator sets itself, and what to use instead.
_RESERVED_ARGUMENTS = {
    "application": "it runs the project's write job (give source, sql and namespace instead)",
    "conn_id": "name the Spark connection with spark_conn_id",
}


def storage_options_source(value: Any, deferred: v.Deferred) -> None:
    """``storage_options_from``: None, ``env:NAME`` or ``file:PATH`` (what the job reads)."""
    if v.absent(value):
        return
    kind, sep, name = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not name.strip() or kind not in ("env", "file"):
        v.refuse(
            "'env:NAME' (a variable of the driver) or 'file:PATH' (a mounted secret), or None",
            value,
            wrong_type=not isinstance(value, str),
        )


def default_result_path(txn_id: str) -> str:
    """Where the job writes its result: deterministic per transaction (so per task instance)."""
    return os.path.join(
        tempfile.gettempdir(), "airflow-provider-lance", "results", f"{txn_id}.json"
    )


@contextmanager
def _environ(extra: Mapping[str, str]) -> Iterator[None]:
    """Set variables for the spark-submit child only while it runs (the task's own process)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class LanceSparkWriteOperator(v.ArgumentChecks, SparkSubmitOperator):
    """Write a source (Parquet/CSV/JSON files or a table) into a namespace with Spark.

    Runs ``airflow_provider_lance/spark/jobs/write.py`` through spark-submit (every
    :class:`SparkSubmitOperator` argument works: ``conf``, ``packages``, memory...). The
    write is one namespace transaction whose id derives from dag/run/task/map index, so a
    retried task replaces its own staged data instead of duplicating it, and a retry after a
    publish returns the published result. With ``commit=False`` (the default) the data is
    staged only: publish it, together with other writes, with :class:`LanceCommitOperator`.

    The storage options of the ``lance`` connection reach the job through the
    ``LANCE_STORAGE_OPTIONS`` environment variable of the spark-submit process, never its
    command line. In ``deploy_mode="cluster"`` (e.g. Kubernetes) the driver runs elsewhere
    and does not inherit that environment: options without secrets then go on the command
    line, and the connection must hold no secret (ambient credentials: instance roles,
    IRSA) unless ``storage_options_from`` names where the driver finds them; the result
    path must be an object-store URI the driver can write.

    :param source: path or URI of the input (or a table name with ``source_format="table"``)
        (templated).
    :param namespace: relative name or full URI (templated).
    :param source_format: ``parquet``, ``csv``, ``json``, ``table`` or ``lance_partitioned``
        (another namespace, read with ``spark.read.format("lance_partitioned")``: the
        ``WHERE`` of ``sql`` prunes its partitions) (templated).
    :param sql: optional ``SELECT ... FROM source`` applied before writing (templated).
    :param read_options: Spark reader options (templated).
    :param mode: ``append`` or ``overwrite`` (replaces exactly the partitions the data
        touches) (templated).
    :param commit: publish in the job itself instead of staging. The events of ``Asset``
        outlets then carry the published partitions' keys as
        :class:`LanceCommitOperator`'s do (``emit_partition_keys``).
    :param txn_id: transaction id (templated; default derived from the task instance).
    :param result_path: where the job writes its JSON result (templated; default a local
        file per transaction; an object-store URI is read with the connection's options).
    :param spark_conn_id: the Spark connection (``spark_default``).
    :param storage_options_from: ``env:NAME`` (a variable of the driver, e.g. from
        ``spark.kubernetes.driver.secretKeyRef.NAME``) or ``file:PATH`` (a mounted secret)
        holding storage options as a JSON object, resolved by the driver and merged over the
        connection's; in cluster deploy mode the connection's own secrets are then not sent
        (templated).
    :param summary_partitions: how many partitions the XCom summary lists.
    :param emit_partition_keys: with ``commit=True``, add the published partitions' keys to
        the events of ``Asset`` outlets: ``None`` (default) in partitioned runs only,
        ``True`` always, ``False`` never.
    :param max_partition_keys: at most this many keys per outlet.
    :param application_args: more arguments of the write job (``--distribution none``,
        ``--read-option k=v``), after the ones this operator sets.
    :return: (XCom) ``{"txn_id", "uri", "mode", "state", "partition_count", "rows",
        "files", "manifest_version", "partitions": [...first N...]}``.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "source",
        "namespace",
        "source_format",
        "sql",
        "read_options",
        "mode",
        "txn_id",
        "result_path",
        "storage_options_from",
        "extra_application_args",
    )
    template_fields_renderers = {"sql": "sql", "read_options": "json"}
    ui_color = "#f7c873"
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "source": v.text(what="a path or URI (or a table name with source_format='table')"),
        "source_format": v.choice(FORMATS),
        "sql": v.text(optional=True, what="a SELECT ... FROM source query"),
        "read_options": v.options_mapping,
        "mode": v.choice(MODES),
        "commit": v.flag(),
        "result_path": v.text(optional=True, what="a path or URI"),
        "spark_conn_id": v.conn_id,
        "storage_options_from": storage_options_source,
        "name": v.text(what="a Spark application name"),
        "application_args": v.arguments_list,
    }
    argument_attributes = {"application_args": "extra_application_args"}

    def __init__(
        self,
        *,
        source: str,
        namespace: str | None = None,
        source_format: str = "parquet",
        sql: str | None = None,
        read_options: Mapping[str, Any] | None = None,
        mode: str = "append",
        commit: bool = False,
        txn_id: str | None = None,
        result_path: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        spark_conn_id: str = "spark_default",
        summary_partitions: int = 10,
        storage_options_from: str | None = None,
        emit_partition_keys: bool | None = None,
        max_partition_keys: int = DEFAULT_MAX_PARTITION_KEYS,
        name: str = "lance-write",
        **kwargs: Any,
    ) -> None:
        for reserved, instead in _RESERVED_ARGUMENTS.items():
            if reserved in kwargs:
                raise v.OperatorArgumentError(
                    f"LanceSparkWriteOperator does not take {reserved!r}: {instead}"
                )
        self.extra_application_args = kwargs.pop("application_args", None) or []
        super().__init__(application=WRITE_JOB, conn_id=spark_conn_id, name=name, **kwargs)
        self.source = source
        self.namespace = namespace
        self.source_format = source_format
        self.sql = sql
        self.read_options = read_options
        self.mode = mode
        self.commit = commit
        self.txn_id = txn_id
        self.result_path = result_path
        self.lance_conn_id = lance_conn_id
        self.spark_conn_id = spark_conn_id
        self.summary_partitions = summary_partitions
        self.storage_options_from = storage_options_from
        self.emit_partition_keys = emit_partition_keys
        self.max_partition_keys = max_partition_keys
        self.deploy_mode = kwargs.get("deploy_mode")
        self._lineage: NamespaceWrite | None = None
        self.check_arguments()

    # -- checks --------------------------------------------------------------------------
    def check_combination(self, known: Mapping[str, Any]) -> None:
        if self.emit_partition_keys is not None and not self.commit:
            raise v.Refused(
                "emit_partition_keys keys the events of a write that publishes (commit=True); "
                "a staged write publishes nothing: set it on the LanceCommitOperator"
            )

    def _spark_connection(self) -> tuple[str, bool]:
        """The Spark master and whether the driver runs on the cluster (deploy mode)."""
        try:
            conn = BaseHook.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            raise AirflowFailException(
                f"the Spark connection {self.spark_conn_id!r} is not defined; for local Spark "
                f"set AIRFLOW_CONN_{self.spark_conn_id.upper()}='{LOCAL_SPARK_CONNECTION}'"
            ) from None
        deploy_mode = (
            self.deploy_mode
            or (self.conf or {}).get("spark.submit.deployMode")
            or conn.extra_dejson.get("deploy-mode")
        )
        return f"{conn.host or ''}".lower(), deploy_mode == "cluster"

    def _cluster_mode_args(self, lance: LancePartitionedHook, result_path: str) -> list[str]:
        """How storage options reach a driver that runs on the cluster, or why they cannot.

        Options without secrets go on the command line; secrets never do: they come from
        ``storage_options_from`` on the driver, or there must be none (ambient credentials).
        """
        if not has_scheme(result_path) or result_path.startswith("file:"):
            raise AirflowFailException(
                f"in cluster deploy mode the driver runs on the cluster and cannot write the "
                f"local result path {result_path!r}; set result_path to an object-store URI "
                "(e.g. s3://bucket/_results/{{ ti.run_id }}.json)"
            )
        secrets = sorted(key for key, _ in lance.config.secrets())
        if secrets and v.absent(self.storage_options_from):
            raise AirflowFailException(
                f"the connection {self.lance_conn_id!r} holds secrets ({', '.join(secrets)}) "
                "that cluster deploy mode would put on the spark-submit command line; use "
                "ambient credentials (an instance role, IRSA) or storage_options_from="
                "'env:NAME' / 'file:PATH' resolved on the driver from a Spark or "
                "Kubernetes secret, or deploy mode 'client'"
            )
        public = {k: v for k, v in lance.storage_options.items() if not is_secret_key(k)}
        args = ["--storage-options", json.dumps(public)] if public else []
        if source := v.given(self.storage_options_from):
            args += ["--storage-options-from", source]
        return args

    def _application_args(self, *, uri: str, txn_id: str, result_path: str) -> list[str]:
        """The write job's command line: never a secret on it."""
        args = [
            "--uri", uri,
            "--source", self.source,
            "--format", self.source_format,
            "--mode", self.mode,
            "--txn-id", txn_id,
            "--result-path", result_path,
        ]  # fmt: skip
        if sql := v.given(self.sql):
            args += ["--sql", sql]
        for key, value in (self.read_options or {}).items():
            args += ["--read-option", f"{key}={value}"]
        if self.commit:
            args.append("--commit")
        return args + list(self.extra_application_args)  # e.g. --distribution none

    @staticmethod
    def _job_environment(storage_options: Mapping[str, str]) -> dict[str, str]:
        """What the job reads from its environment: the storage options, as JSON."""
        return {STORAGE_OPTIONS_ENV: json.dumps(dict(storage_options))}

    # -- run ---------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        self.check_arguments(rendered=True)
        txn_id = v.txn_id_value(self.txn_id) or txn_id_from_context(context)
        lance = LancePartitionedHook(self.lance_conn_id)
        uri = lance.namespace_uri(self.namespace)
        master, cluster_mode = self._spark_connection()
        if lance.local_fallback and not master.startswith("local"):
            raise AirflowFailException(
                f"the connection {self.lance_conn_id!r} is not defined, and its local "
                f"stand-in {uri} is on this worker's disk, which executors of {master} "
                f"cannot see; define {self.lance_conn_id!r} with a root they share "
                "(e.g. s3://bucket/warehouse)"
            )
        with lance_errors(f"Spark write into {uri}"):
            schema = lance.open(uri).schema  # a missing namespace fails here, not later
        result_path = v.given(self.result_path) or default_result_path(txn_id)
        args = self._application_args(uri=uri, txn_id=txn_id, result_path=result_path)
        if cluster_mode:
            args += self._cluster_mode_args(lance, result_path)
            env = {}
        else:
            env = self._job_environment(lance.storage_options)
            if source := v.given(self.storage_options_from):  # the driver is this machine
                args += ["--storage-options-from", source]
            if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
                env["PYSPARK_PYTHON"] = sys.executable  # executors use this task's interpreter
        self._discard_result(result_path, lance)
        self.application_args = args
        self._hook = None  # built by SparkSubmitOperator.execute with these arguments
        self.log.info(
            "Spark %s of %s (%s) into %s as transaction %s%s",
            self.mode,
            self.source,
            self.source_format,
            uri,
            txn_id,
            " (commit)" if self.commit else " (staged)",
        )
        problem = java_problem({**os.environ, **env, **(self.env_vars or {})})
        if problem is not None:
            raise AirflowFailException(
                f"spark-submit needs Java 17 or newer on this worker, and {problem}: install "
                "a JDK or JRE (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME "
                "(the operator's env_vars may set it for spark-submit alone)"
            )
        with _environ(env):
            try:
                super().execute(context)
            except AirflowException as exc:
                raise self._job_failure(exc, txn_id, uri) from None
        result = self._read_result(result_path, lance)
        self._discard_result(result_path, lance)
        summary = self._summary(result, txn_id, uri)
        if summary["state"] == "published":
            self._key_asset_events(context, lance, uri, result)
        self._lineage = NamespaceWrite(
            uri=uri,
            columns=[(f.name, str(f.type)) for f in schema],
            rows=summary["rows"],
            manifest_version=summary["manifest_version"]
            if summary["state"] == "published"
            else None,
            mode=summary["mode"],
        )
        return summary

    def _key_asset_events(
        self,
        context: Context,
        lance: LancePartitionedHook,
        uri: str,
        result: Mapping[str, Any],
    ) -> None:
        """Key the events of ``Asset`` outlets by the partitions the job published."""
        assets = [o for o in self.outlets if isinstance(o, Asset)]
        if not assets or not wants_partition_keys(self.emit_partition_keys, context):
            return
        partitions = list(result.get("partitions") or [])
        with lance_errors(f"partition keys of the Spark write into {uri}"):
            state = lance.open(uri).state()
        keys = partition_keys_of(state, partitions[: self.max_partition_keys], self.log)
        extra = truncated_keys_extra(len(partitions), keys, self.log)
        kept = [k for k in keys if k is not None]
        for outlet in assets:
            context["outlet_events"][outlet].extra.update(extra)
            add_partition_keys(context["outlet_events"][outlet], kept, self.log)

    def get_openlineage_facets_on_complete(
        self, task_instance: Any
    ) -> OperatorLineage[Any, Any] | None:
        """The source files as the input (a catalog table has no path to name), the
        namespace as the output: schema, rows and, once published, its manifest version
        (and ``OVERWRITE`` for an overwrite)."""
        if self._lineage is None:
            return None
        inputs = [] if self.source_format == "table" else [file_dataset_name(self.source)]
        return operator_lineage(inputs=inputs, output=self._lineage)

    @staticmethod
    def _job_failure(exc: AirflowException, txn_id: str, uri: str) -> AirflowException:
        """The job's own one-line error, classified by its exit code.

        The job chose the code from the error's class (see ``spark/jobs/write.py``): 2, bad
        input no retry can fix, fails the task at once (:class:`AirflowFailException`); 1
        (storage, unexpected errors), 3 (commit conflict) and anything else (the driver was
        killed, spark-submit itself failed) are retryable (:class:`AirflowException`).
        """
        text = str(exc)
        code_match = _EXIT_CODE.search(text)
        code = int(code_match.group(1)) if code_match else None
        errors = _ERROR_LINE.findall(text)
        reason = errors[-1].strip() if errors else (text.splitlines() or [""])[0][:500]
        message = f"Spark write {txn_id} into {uri} failed (exit code {code}): {reason}"
        if code == EXIT_BAD_INPUT:
            return AirflowFailException(message)
        if code == EXIT_CONFLICT:
            return AirflowException(f"{message} (commit conflict; a retry may succeed)")
        if code == EXIT_FAILED:
            return AirflowException(f"{message} (a retry may succeed)")
        return AirflowException(message)

    # -- the result file -----------------------------------------------------------------
    @staticmethod
    def _read_result(path: str, lance: LancePartitionedHook) -> dict[str, Any]:
        from airflow_provider_lance.namespace import read_json

        try:
            obj = read_json(path, lance.storage_options or None)
        except (OSError, ValueError, StorageError) as exc:
            raise AirflowException(
                f"the Spark job finished but its result {path} is unreadable: {exc}"
            ) from None
        if not isinstance(obj, dict) or "txn_id" not in obj:
            raise AirflowException(f"the Spark job's result {path} is not a write result")
        return obj

    @staticmethod
    def _discard_result(path: str, lance: LancePartitionedHook) -> None:
        from airflow_provider_lance.namespace import remove_json

        remove_json(path, lance.storage_options or None)

    def _summary(self, result: Mapping[str, Any], txn_id: str, uri: str) -> dict[str, Any]:
        partitions = list(result.get("partitions") or [])
        summary = {
            "txn_id": result.get("txn_id", txn_id),
            "uri": result.get("uri", uri),
            "mode": result.get("mode", self.mode),
            "state": result.get("state"),
            "partition_count": int(result.get("partition_count", len(partitions))),
            "rows": int(result.get("rows", 0)),
            "files": int(result.get("files", 0)),
            "manifest_version": result.get("manifest_version"),
            "partitions": [
                {"values": p.get("values"), "rows": p.get("rows")}
                for p in partitions[: self.summary_partitions]
            ],
        }
        self.log.info(
            "%s %d rows into %d partition(s) (%d files) as %s",
            summary["state"],
            summary["rows"],
            summary["partition_count"],
            summary["files"],
            summary["txn_id"],
        )
        return summary
