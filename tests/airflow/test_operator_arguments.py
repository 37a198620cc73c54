"""Wrong arguments of operators, sensor, triggers and decorator fail when the DAG is parsed,
or, for a template, once rendered and before any I/O, without burning retries."""

from __future__ import annotations

import datetime as dt
import inspect
import itertools
import json
import math
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, BaseOperator, BaseSensorOperator, task
from airflow.sdk.definitions.mappedoperator import MappedOperator, OperatorPartial
from airflow.triggers.base import BaseEventTrigger, BaseTrigger

from airflow_provider_lance import validation as v
from airflow_provider_lance.decorators.lance_write import _LanceWriteDecoratedOperator
from airflow_provider_lance.operators import (
    LanceAbortOperator,
    LanceAddColumnOperator,
    LanceAuditOperator,
    LanceCommitOperator,
    LanceCreateIndexOperator,
    LanceCreatePartitionOperator,
    LanceDeleteOperator,
    LanceDropColumnOperator,
    LanceDropIndexOperator,
    LanceDropPartitionsOperator,
    LanceEvolvePartitionSpecOperator,
    LanceMaintainOperator,
    LanceMergeOperator,
    LanceOptimizeIndicesOperator,
    LanceOptimizeOperator,
    LancePromoteColumnOperator,
    LancePruneOperator,
    LanceRecoverOperator,
    LanceRenameColumnOperator,
    LanceRepairOperator,
    LanceSparkWriteOperator,
    LanceTagOperator,
    LanceWriteOperator,
)
from airflow_provider_lance.sensors import LancePartitionSensor
from airflow_provider_lance.triggers import LanceManifestTrigger, LancePartitionTrigger
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events

RunDag = Callable[..., RunResult]
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
TASK_IDS = (f"t{i}" for i in itertools.count())


def produce() -> None:
    """A callable for the operators that take one."""


#: What each class needs to be built (the arguments without a default).
REQUIRED: dict[type, dict[str, Any]] = {
    LanceCreatePartitionOperator: {"values": {"event_date": "2025-12-10"}},
    LancePruneOperator: {},
    LanceCommitOperator: {"transactions": ["t1"]},
    LanceAuditOperator: {"transactions": ["t1"], "checks": {"min_rows": 1}},
    LanceAbortOperator: {"transactions": ["t1"]},
    LanceMaintainOperator: {},
    LanceRecoverOperator: {},
    LanceRepairOperator: {},
    LanceAddColumnOperator: {"column": {"name": "channel", "type": "string"}},
    LanceDropColumnOperator: {"column": "country"},
    LanceRenameColumnOperator: {"column": "country", "new_name": "region"},
    LancePromoteColumnOperator: {"column": "id", "type": "int64"},
    LanceEvolvePartitionSpecOperator: {"partition_fields": [{"name": "event_date"}]},
    LanceTagOperator: {"tag": "eod"},
    LanceDeleteOperator: {"filter": "country = 'DE'"},
    LanceDropPartitionsOperator: {"filter": "event_date < DATE '2025-01-01'"},
    LanceOptimizeOperator: {},
    LanceCreateIndexOperator: {"column": "id", "index_type": "BTREE"},
    LanceOptimizeIndicesOperator: {},
    LanceDropIndexOperator: {"name": "id_idx"},
    LanceMergeOperator: {"on": "id", "source": "/data/corrections.parquet"},
    LanceWriteOperator: {"python_callable": produce},
    LanceSparkWriteOperator: {"source": "/data/events.parquet"},
    LancePartitionSensor: {"filter": "country = 'DE'"},
    LancePartitionTrigger: {"filter": "country = 'DE'"},
    LanceManifestTrigger: {},
}

TYPE, VALUE = TypeError, ValueError
NAMESPACE = {"namespace": ("", VALUE, "omit it (None) for the connection root")}
CONN = {"lance_conn_id": (123, TYPE, "must be a connection id")}
PUBLISHING = {
    **NAMESPACE,
    **CONN,
    "txn_id": ("my txn/1", VALUE, "1-200 letters, digits and _.=:+-"),
    "summary_partitions": (-1, VALUE, "a whole number of at least 0"),
    "emit_partition_keys": ("yes", TYPE, "True or False, or None"),
    "max_partition_keys": (1.5, TYPE, "a whole number of at least 0"),
}
FILTERED = {**PUBLISHING, "claim_timeout": ("2 minutes", VALUE, "write 120 or")}
SCHEMA_CHANGE = {**NAMESPACE, **CONN, "column": ("", VALUE, "must be a column name")}
WAITING = {
    "values": ("2025-12-10", TYPE, "a mapping of partition field to value"),
    "filter": ("country = 'DE", VALUE, "the string literal opened at position 10"),
    "partition_key": (5, TYPE, "a non-empty list of partition keys"),
    "min_partitions": (0, VALUE, "a whole number of at least 1"),
    "require_rows": ("yes", TYPE, "True or False"),
    **NAMESPACE,
    **CONN,
}

#: A wrong value of every constructor argument: (value, error type, part of the message).
BAD: dict[type, dict[str, tuple[Any, type, str]]] = {
    LanceCreatePartitionOperator: {
        "values": ({"event_date": ["2025-12-10"]}, VALUE, "is not a single value"),
        "schema": ([{"name": "id"}], VALUE, "column 'id' has no 'type'"),
        "partition_fields": (
            [{"name": "day", "expresion": "day"}],
            VALUE,
            "unknown keys 'expresion'",
        ),
        **NAMESPACE,
        **CONN,
        "emit_partition_keys": ("always", TYPE, "True or False"),
    },
    LancePruneOperator: {
        "filter": ("(country = 'DE'", VALUE, "1 '(' not closed"),
        "partition_key": ([1], TYPE, "a non-empty list of partition keys"),
        "as_of": (-1, VALUE, "a __manifest version"),
        "published_only": ("no", TYPE, "True or False"),
        "max_partitions": ("ten", TYPE, "a whole number of at least 1, or None for no limit"),
        **NAMESPACE,
        **CONN,
    },
    LanceCommitOperator: {
        "transactions": ([{"rows": 3}], VALUE, "a write result needs its 'txn_id'"),
        **PUBLISHING,
    },
    LanceAuditOperator: {
        "transactions": ("bad id!", VALUE, "not a transaction id"),
        "checks": ({"not_nul": ["id"]}, VALUE, "unknown checks 'not_nul' (did you mean"),
        "fail_on_violation": ("true", TYPE, "True or False"),
        **NAMESPACE,
        **CONN,
    },
    LanceAbortOperator: {
        "transactions": (42, TYPE, "transaction ids, write results"),
        "reason": (42, TYPE, "must be a string"),
        **NAMESPACE,
        **CONN,
    },
    LanceMaintainOperator: {
        "compact": ("yes", TYPE, "True or False"),
        "older_than": ("7 days", VALUE, "write 604800 or datetime.timedelta(days=7)"),
        "sweep_orphans": (1, TYPE, "True or False"),
        "orphan_min_age": (-5, VALUE, "(finite, not negative)"),
        "dry_run": ("yes", TYPE, "True or False"),
        "enforce_min_age": ("no", TYPE, "True or False"),
        "indices": ("yes", TYPE, "True or False"),
        **NAMESPACE,
        **CONN,
    },
    LanceRecoverOperator: {
        "lease_seconds": ("6h", VALUE, "write 21600 or datetime.timedelta(hours=6)"),
        **NAMESPACE,
        **CONN,
    },
    LanceRepairOperator: {**NAMESPACE, **CONN},
    LanceAddColumnOperator: {
        **SCHEMA_CHANGE,
        "column": (
            {"name": "channel", "type": "string", "nullable": False},
            VALUE,
            "a column added later must be nullable",
        ),
    },
    LanceDropColumnOperator: SCHEMA_CHANGE,
    LanceRenameColumnOperator: {
        **SCHEMA_CHANGE,
        "column": (None, TYPE, "must be a column name"),
        "new_name": (5, TYPE, "must be a column name"),
    },
    LancePromoteColumnOperator: {
        **SCHEMA_CHANGE,
        "column": (["id"], TYPE, "must be a column name"),
        "type": ("", VALUE, "must be a type"),
    },
    LanceEvolvePartitionSpecOperator: {
        "partition_fields": ([], VALUE, "got an empty list"),
        **NAMESPACE,
        **CONN,
    },
    LanceTagOperator: {
        "tag": ("bad name!", VALUE, "1-100 letters, digits and ._-"),
        "action": ("remove", VALUE, "must be one of 'create', 'delete'"),
        "as_of": (1.5, TYPE, "a __manifest version"),
        "replace": ("yes", TYPE, "True or False"),
        **NAMESPACE,
        **CONN,
    },
    LanceDeleteOperator: {
        **FILTERED,
        "filter": (None, TYPE, "must be a SQL boolean expression"),
    },
    LanceDropPartitionsOperator: {
        **FILTERED,
        "filter": ("   ", VALUE, "must be a SQL boolean expression"),
        "claim_timeout": (math.inf, VALUE, "(finite, not negative)"),
    },
    LanceOptimizeOperator: {
        **PUBLISHING,
        "filter": ("event_date > DATE '2025-12-01')", VALUE, "closes no '('"),
        "target_rows_per_fragment": (0, VALUE, "a whole number of at least 1"),
        "materialize_deletions": ("no", TYPE, "True or False"),
    },
    LanceCreateIndexOperator: {
        **FILTERED,
        "column": (None, TYPE, "must be a column name"),
        "index_type": ("HNSW", VALUE, "an index type: IVF_FLAT, IVF_PQ"),
        "name": ("a/b", VALUE, "an index name (non-empty, without '$' or '/')"),
        "filter": ("event_date = '2025-12-10", VALUE, "the string literal opened"),
        "index_params": ({"metric": {1, 2}}, TYPE, "(argument 'metric')"),
        "replace": ("yes", TYPE, "True or False"),
        "shared_model": (1, TYPE, "True or False"),
    },
    LanceOptimizeIndicesOperator: {
        **PUBLISHING,
        "filter": ("(a = 1", VALUE, "1 '(' not closed"),
        "names": ([""], VALUE, "a non-empty list of index names"),
    },
    LanceDropIndexOperator: {
        **FILTERED,
        "name": ("", VALUE, "an index name (non-empty"),
    },
    LanceMergeOperator: {
        **FILTERED,
        "on": ([], VALUE, "a non-empty list of key columns"),
        "source": (5, TYPE, "a Parquet file or directory"),
        "python_callable": ("produce", TYPE, "a callable"),
        "op_args": ("abc", TYPE, "a list (or tuple) of positional arguments"),
        "op_kwargs": ({1: 2}, VALUE, "names must be identifiers"),
        "when_not_matched_by_source_delete": ("yes", TYPE, "True or False"),
        "claim_timeout": ("1h", VALUE, "write 3600 or datetime.timedelta(hours=1)"),
    },
    LanceWriteOperator: {
        "python_callable": (None, TYPE, "a callable"),
        "op_args": ("abc", TYPE, "a list (or tuple) of positional arguments"),
        "op_kwargs": (["day"], TYPE, "a mapping of argument names"),
        "mode": ("upsert", VALUE, "must be one of 'append', 'overwrite'"),
        "stage_only": ("no", TYPE, "True or False"),
        "flush_bytes": (0, VALUE, "a whole number of at least 1"),
        **{k: PUBLISHING[k] for k in ("namespace", "lance_conn_id", "txn_id")},
        "summary_partitions": (None, TYPE, "a whole number of at least 0"),
    },
    LanceSparkWriteOperator: {
        **PUBLISHING,
        "source": ("  ", VALUE, "a path or URI"),
        "source_format": ("delta", VALUE, "must be one of 'parquet', 'csv'"),
        "sql": (5, TYPE, "a SELECT ... FROM source query"),
        "read_options": ({"header": ["true"]}, TYPE, "(option 'header')"),
        "mode": ("upsert", VALUE, "must be one of 'append', 'overwrite'"),
        "commit": ("yes", TYPE, "True or False"),
        "result_path": (5, TYPE, "a path or URI"),
        "spark_conn_id": ("", VALUE, "a connection id"),
        "storage_options_from": ("vault:lance", VALUE, "'env:NAME'"),
        "name": ("", VALUE, "a Spark application name"),
        "application_args": ("--distribution none", TYPE, "a list of strings"),
    },
    LancePartitionSensor: {**WAITING, "deferrable": ("yes", TYPE, "True or False")},
    LancePartitionTrigger: {**WAITING, "poll_interval": (-1, VALUE, "a number of seconds")},
    LanceManifestTrigger: {
        **NAMESPACE,
        **CONN,
        "poll_interval": (0, VALUE, "a number of seconds above 0"),
        "after_version": (-1, VALUE, "a whole number of at least 0"),
        "max_partitions": ("20", TYPE, "a whole number of at least 0"),
        "max_publishes": (None, TYPE, "a whole number of at least 0"),
    },
}

CASES = [(cls, arg) for cls, bad in BAD.items() for arg in bad]
AIRFLOW_BASES = (
    BaseOperator,
    BaseSensorOperator,
    SparkSubmitOperator,
    BaseTrigger,
    BaseEventTrigger,
)
#: Arguments whose message points into the value (an entry, a check) instead of showing it.
POINTED = {"checks", "schema", "partition_fields", "transactions"}


def constructor_arguments(cls: type) -> set[str]:
    """The keyword arguments of ``cls`` and its bases up to Airflow's own class."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in AIRFLOW_BASES or klass is object:
            break
        init = klass.__dict__.get("__init__")
        if init is not None:
            params = inspect.signature(init).parameters.values()
            names |= {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    if issubclass(cls, LanceSparkWriteOperator):
        names.add("application_args")  # taken from **kwargs: SparkSubmitOperator's own
    return names


def build(cls: type, **kwargs: Any) -> Any:
    """``cls`` with its required arguments and ``kwargs``, in a DAG for operators."""
    arguments = {**REQUIRED[cls], **kwargs}
    if issubclass(cls, BaseTrigger):
        return cls(**arguments)
    with DAG(f"d{next(TASK_IDS)}", schedule=None, start_date=START):
        return cls(task_id="t", **arguments)


def owner(cls: type) -> str:
    return cls.__name__ if issubclass(cls, BaseTrigger) else f"{cls.__name__}(task_id='t')"


@pytest.mark.parametrize("cls", list(BAD), ids=lambda c: c.__name__)
def test_every_constructor_argument_has_a_check_and_a_refused_value(cls: type) -> None:
    arguments = constructor_arguments(cls)
    assert set(cls.argument_checks) == arguments  # type: ignore[attr-defined]
    assert set(BAD[cls]) == arguments
    build(cls)  # the required arguments alone are fine


@pytest.mark.parametrize(("cls", "argument"), CASES, ids=[f"{c.__name__}-{a}" for c, a in CASES])
def test_a_bad_argument_is_refused_when_the_dag_is_parsed(cls: type, argument: str) -> None:
    value, kind, fragment = BAD[cls][argument]
    with pytest.raises(v.OperatorArgumentError) as refused:
        build(cls, **{argument: value})
    message = str(refused.value)
    assert message.startswith(f"{owner(cls)}: {argument} "), message
    assert fragment in message
    pointed = argument in POINTED or (cls, argument) == (LanceAddColumnOperator, "column")
    assert pointed or v.shown(value) in message
    assert isinstance(refused.value, kind)  # ValueError always; TypeError for a wrong type
    assert isinstance(refused.value, ValueError)


TEMPLATED = [(cls, arg) for cls, arg in CASES if arg in getattr(cls, "template_fields", ())]
#: What a templated argument needs beside it to make sense (checked with the arguments).
COMPANIONS: dict[tuple[type, str], dict[str, Any]] = {
    (LanceCreatePartitionOperator, "schema"): {"partition_fields": [{"name": "event_date"}]},
    (LanceCreatePartitionOperator, "partition_fields"): {
        "schema": [{"name": "event_date", "type": "date32"}]
    },
    (LanceMaintainOperator, "orphan_min_age"): {"sweep_orphans": True},
    (LanceMergeOperator, "op_args"): {"source": None, "python_callable": produce},
    (LanceMergeOperator, "op_kwargs"): {"source": None, "python_callable": produce},
    (LancePartitionSensor, "values"): {"filter": None},
    (LancePartitionSensor, "partition_key"): {"filter": None},
}


@pytest.mark.parametrize(
    ("cls", "argument"), TEMPLATED, ids=[f"{c.__name__}-{a}" for c, a in TEMPLATED]
)
def test_a_templated_argument_is_checked_once_rendered(cls: type, argument: str) -> None:
    """A template is taken as it is when parsed; Airflow's own rendering (native objects)
    then gives the bad value, which ``execute``'s first step refuses."""
    value, kind, fragment = BAD[cls][argument]
    with DAG(
        f"d{next(TASK_IDS)}",
        schedule=None,
        start_date=START,
        render_template_as_native_obj=True,
    ):
        companions = COMPANIONS.get((cls, argument), {})
        op = cls(task_id="t", **{**REQUIRED[cls], **companions, argument: "{{ params.bad }}"})
    attribute = op.argument_attributes.get(argument, argument)
    op.render_template_fields({"params": {"bad": value}})
    assert getattr(op, attribute) == value
    with pytest.raises(v.OperatorArgumentError) as refused:
        op.check_arguments(rendered=True)
    assert str(refused.value).startswith(f"{owner(cls)}: {argument} ")
    assert fragment in str(refused.value)
    assert isinstance(refused.value, kind)


@pytest.mark.parametrize(
    ("cls", "rendered"),
    [
        (LanceDeleteOperator, "None"),
        (LanceDropPartitionsOperator, "None"),
        (LancePruneOperator, None),
    ],
)
def test_a_filter_rendered_from_an_absent_param(cls: type, rendered: str | None) -> None:
    """Rendered as text, an absent param is ``'None'``: no filter where one is optional, and
    refused where an operation must say which rows it changes."""
    with DAG(f"d{next(TASK_IDS)}", schedule=None, start_date=START):
        op = cls(task_id="t", **{**REQUIRED[cls], "filter": "{{ params.f }}"})
    op.render_template_fields({"params": {"f": None}})
    assert op.filter == "None"
    if rendered is None:
        op.check_arguments(rendered=True)
        assert v.filter_value(op.filter) is None
        return
    with pytest.raises(v.OperatorArgumentError, match=r"filter must be a SQL boolean expression"):
        op.check_arguments(rendered=True)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (LancePruneOperator, {"filter": "a = 1", "partition_key": "k"}, "not both"),
        (
            LanceCreatePartitionOperator,
            {"schema": [{"name": "id", "type": "int64"}]},
            "needs both schema and partition_fields",
        ),
        (LanceMaintainOperator, {"dry_run": True}, "dry_run applies to the orphan sweep"),
        (LanceMaintainOperator, {"orphan_min_age": 86400}, "set sweep_orphans=True"),
        (LanceMaintainOperator, {"enforce_min_age": False}, "set sweep_orphans=True"),
        (
            LanceMaintainOperator,
            {"sweep_orphans": True, "orphan_min_age": dt.timedelta(minutes=5)},
            "is under 6 hours",
        ),
        (LanceTagOperator, {"action": "delete", "as_of": 3}, "a delete takes neither"),
        (LanceTagOperator, {"action": "delete", "replace": True}, "a delete takes neither"),
        (LanceRenameColumnOperator, {"new_name": "country"}, "is the column's name"),
        (LanceMergeOperator, {"source": None}, "a source (a Parquet path or URI) or a python"),
        (LanceMergeOperator, {"python_callable": produce}, "or a python_callable"),
        (LanceMergeOperator, {"op_kwargs": {"day": 1}}, "are the python_callable's"),
        (LanceSparkWriteOperator, {"emit_partition_keys": True}, "(commit=True)"),
        (LancePartitionSensor, {"values": {"day": "x"}}, "exactly one of values, filter"),
        (LancePartitionSensor, {"filter": None}, "exactly one of values, filter"),
        (LancePartitionSensor, {"filter": None, "values": {"d": 1}, "min_partitions": 2}, "1)"),
        (LancePartitionTrigger, {"partition_key": "2025-12-10"}, "(got filter, partition_key)"),
        (LanceAuditOperator, {"checks": {"min_rows": 9, "max_rows": 1}}, "above max_rows"),
    ],
)
def test_arguments_that_do_not_go_together_are_refused(
    cls: type, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(v.OperatorArgumentError) as refused:
        build(cls, **kwargs)
    assert str(refused.value).startswith(owner(cls))
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (LancePruneOperator, {"filter": "{{ params.f }}", "as_of": "{{ params.a }}"}),
        (LancePruneOperator, {"filter": "event_date = DATE '{{ ds }}'"}),
        (LanceCreatePartitionOperator, {"values": {"event_date": "{{ ds }}"}}),
        (LanceCreatePartitionOperator, {"values": "{{ ti.xcom_pull('prune') }}"}),
        (LanceMaintainOperator, {"sweep_orphans": True, "orphan_min_age": "{{ params.age }}"}),
        (
            LanceAuditOperator,
            {"checks": {"min_rows": "{{ params.n }}", "invalid_when": {"x": "d > '{{ ds }}'"}}},
        ),
        (LanceSparkWriteOperator, {"source": "/landing/{{ ds }}/a.parquet", "sql": ""}),
        (LanceSparkWriteOperator, {"application_args": ["--read-option", "{{ params.o }}"]}),
        (LanceWriteOperator, {"txn_id": "None", "mode": "{% if 1 %}overwrite{% endif %}"}),
        (LanceTagOperator, {"tag": "eod-{{ ds }}", "as_of": "2025-12-10T18:00:00Z"}),
        (LanceRecoverOperator, {"lease_seconds": dt.timedelta(hours=6)}),
        (LanceRecoverOperator, {"lease_seconds": "3600"}),
        (LanceMergeOperator, {"on": ["id", "{{ params.key }}"]}),
        (
            LanceCreateIndexOperator,
            {"index_type": "ivf_pq", "index_params": {"num_partitions": "{{ params.n }}"}},
        ),
        (LanceCreateIndexOperator, {"filter": "event_date = DATE '{{ ds }}'", "name": None}),
        (LanceOptimizeIndicesOperator, {"names": "id_idx", "filter": "{{ params.f }}"}),
    ],
)
def test_good_and_templated_arguments_are_taken(cls: type, kwargs: dict[str, Any]) -> None:
    build(cls, **kwargs)


def test_a_template_in_an_argument_that_is_not_templated_is_refused() -> None:
    with pytest.raises(v.OperatorArgumentTypeError, match="max_partitions must be a whole"):
        build(LancePruneOperator, max_partitions="{{ params.limit }}")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: LanceSparkWriteOperator.partial(task_id="w", mode="upsert"),
            "LanceSparkWriteOperator(task_id='w'): mode must be one of",
        ),
        (
            lambda: LanceWriteOperator.partial(task_id="w", python_callable=produce).expand(
                mode=["append", "upsert"]
            ),
            "LanceWriteOperator(task_id='w'): mode (expand value 1) must be one of",
        ),
        (
            lambda: LancePruneOperator.partial(task_id="p").expand_kwargs(
                [{"filter": "a = 1"}, {"filter": "a = 'x"}]
            ),
            "LancePruneOperator(task_id='p'): filter (expand_kwargs item 1) must be",
        ),
        (
            lambda: LanceDeleteOperator.partial(task_id="d").expand(filter=["a = 1", ""]),
            "filter (expand value 1) must be a SQL boolean expression",
        ),
    ],
    ids=["partial", "expand", "expand-kwargs", "expand-required-filter"],
)
def test_mapped_operators_are_checked_when_the_dag_is_parsed(
    make: Callable[[], Any], message: str
) -> None:
    with (
        DAG(f"d{next(TASK_IDS)}", schedule=None, start_date=START),
        pytest.raises(v.OperatorArgumentError) as refused,
    ):
        make()
    assert message in str(refused.value)


def test_mapped_operators_with_good_or_runtime_values_are_built() -> None:
    with DAG(f"d{next(TASK_IDS)}", schedule=None, start_date=START) as dag:

        @task
        def sources() -> list[str]:
            return ["/a.parquet"]

        partial = LanceSparkWriteOperator.partial(task_id="w", namespace="events", mode="append")
        assert isinstance(partial, OperatorPartial)
        literal = partial.expand(source=["/landing/{{ ds }}/a.parquet", "/landing/b.parquet"])
        runtime = LanceSparkWriteOperator.partial(task_id="x").expand(source=sources())
    assert isinstance(literal, MappedOperator)
    assert isinstance(runtime, MappedOperator)
    assert {"w", "x"} <= set(dag.task_dict)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "upsert"}, "@task.lance_write(task_id='stage'): mode must be one of"),
        ({"flush_bytes": "128MiB"}, "flush_bytes must be a whole number of at least 1"),
        ({"lance_conn_id": None}, "lance_conn_id must be a connection id"),
    ],
)
def test_the_decorator_checks_its_arguments_when_the_dag_is_parsed(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(v.OperatorArgumentError) as refused:
        task.lance_write(task_id="stage", **kwargs)  # type: ignore[attr-defined]
    assert message in str(refused.value)
    with DAG(f"d{next(TASK_IDS)}", schedule=None, start_date=START):

        @task.lance_write(namespace="events", stage_only=True)  # type: ignore[attr-defined]
        def stage(region: str) -> None:
            """Mapped: the operator is built at run time, the decorator's arguments now."""

        stage.expand(region=["emea", "amer"])
    assert _LanceWriteDecoratedOperator.custom_operator_name == "@task.lance_write"


def test_triggers_rebuilt_from_their_serialisation_are_checked_too() -> None:
    trigger = LancePartitionTrigger(values={"event_date": "2025-12-10"}, poll_interval=5)
    path, kwargs = trigger.serialize()
    assert LancePartitionTrigger(**kwargs).serialize() == (path, kwargs)
    assert kwargs["values"] == [{"event_date": "2025-12-10"}]
    with pytest.raises(v.OperatorArgumentError, match=r"LancePartitionTrigger: values must"):
        LancePartitionTrigger(**{**kwargs, "values": [{"event_date": {"nested": 1}}]})
    manifest = LanceManifestTrigger(namespace="sales", poll_interval=30.0)
    assert LanceManifestTrigger(**manifest.serialize()[1]).serialize() == manifest.serialize()


def test_the_hook_checks_its_connection_id() -> None:
    from airflow_provider_lance.hooks import LancePartitionedHook

    with pytest.raises(v.OperatorArgumentTypeError, match="lance_conn_id must be a connection"):
        LancePartitionedHook(lance_conn_id=["lance_default"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7 days", "write 604800 or datetime.timedelta(days=7)"),
        ("6h", "write 21600 or datetime.timedelta(hours=6)"),
        ("1.5 hours", "write 5400 or datetime.timedelta(hours=1.5)"),
        ("90 min", "write 5400 or datetime.timedelta(minutes=90)"),
        ("3 fortnights", "text with a unit is not read; write the number of seconds"),
        ("PT6H", "must be a number of seconds"),
    ],
)
def test_durations_with_units_are_refused_with_the_number_to_write(
    text: str, expected: str
) -> None:
    with pytest.raises(v.Refused, match=re.escape(expected)):
        v.seconds_of(text)


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        ("name = 'it''s (here'", None),
        ('"odd ""col" = 1 AND (a IN (1, 2) OR b = \')\')', None),
        ("event_date = DATE '2025-12-10", "the string literal opened at position 18 is not closed"),
        ('"country = 1', "the quoted name opened at position 0 is not closed"),
        ("(a = 1 OR (b = 2)", "1 '(' not closed"),
        ("a = 1)", "the ')' at position 5 closes no '('"),
    ],
)
def test_filters_are_read_for_quotes_and_parentheses(sql: str, problem: str | None) -> None:
    assert v.filter_problem(sql) == problem


@pytest.mark.parametrize(
    "name",
    [
        "eod-2025-12-10",
        "a",
        "1.2",
        "x" * 100,
        "x" * 101,
        "123",
        "a..b",
        "a.",
        "release.lock",
        "-a",
        "_a",
        "a b",
        "été",
        "",
        "a/b",
    ],
)
def test_the_tag_rule_checked_at_parse_time_is_the_cores(name: str) -> None:
    from airflow_provider_lance.namespace import InvalidArgumentError, check_tag_name

    try:
        check_tag_name(name)
        core_ok = True
    except InvalidArgumentError:
        core_ok = False
    assert (v.tag_problem(name) is None) == core_ok


def test_the_safe_orphan_age_checked_at_parse_time_is_the_cores() -> None:
    from airflow_provider_lance.namespace import MIN_SAFE_ORPHAN_AGE
    from airflow_provider_lance.operators.upkeep import MIN_SAFE_ORPHAN_AGE_SECONDS

    assert MIN_SAFE_ORPHAN_AGE.total_seconds() == MIN_SAFE_ORPHAN_AGE_SECONDS


# -- a DAG file as the DAG processor parses it ----------------------------------------------

EVERY_OPERATOR_DAG = '''
"""Every operator, the sensor, both triggers and the decorator, with every argument."""
import datetime as dt

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_lance.operators import *  # noqa: F403
from airflow_provider_lance.operators import (
    LanceAbortOperator, LanceAddColumnOperator, LanceAuditOperator, LanceDeleteOperator,
    LanceDropColumnOperator, LanceDropPartitionsOperator, LanceEvolvePartitionSpecOperator,
    LanceMaintainOperator, LanceMergeOperator, LanceOptimizeOperator,
    LancePromoteColumnOperator, LanceRecoverOperator, LanceRenameColumnOperator,
    LanceRepairOperator, LanceSparkWriteOperator, LanceTagOperator, LanceWriteOperator,
)
from airflow_provider_lance.sensors import LancePartitionSensor
from airflow_provider_lance.triggers import LanceManifestTrigger

NS = dict(namespace="events", lance_conn_id="lance_default")
OPS = dict(NS, txn_id=None, summary_partitions=5, emit_partition_keys=None, max_partition_keys=10)
SCHEMA = [{"name": "id", "type": "int64", "nullable": False}, {"name": "day", "type": "date32"}]
FIELDS = [{"name": "day", "source": "day", "expression": "col", "result_type": "date32"}]
published = Asset("published", watchers=[AssetWatcher(name="w", trigger=LanceManifestTrigger(
    poll_interval=30, after_version=None, max_partitions=20, max_publishes=50, **NS))])

with DAG("every_operator", schedule=None, start_date=dt.datetime(2025, 12, 1)):
    create = LanceCreatePartitionOperator(task_id="create", values={"day": "{{ ds }}"},
        schema=SCHEMA, partition_fields=FIELDS, emit_partition_keys=True, **NS)
    prune = LancePruneOperator(task_id="prune", filter="day = DATE '{{ ds }}'", as_of=None,
        published_only=True, max_partitions=100, **NS)
    LancePruneOperator(task_id="keys", partition_key=["2025-12-10"], **NS)
    write = LanceWriteOperator(task_id="write", python_callable=lambda: None, op_args=[1],
        op_kwargs={"a": 1}, mode="append", stage_only=True, flush_bytes=1 << 20, txn_id=None,
        summary_partitions=5, **NS)
    spark = LanceSparkWriteOperator.partial(task_id="spark", source_format="csv", sql=None,
        read_options={"header": "true"}, mode="overwrite", commit=True, result_path=None,
        spark_conn_id="spark_default", storage_options_from="env:OPTS", name="w",
        application_args=["--distribution", "none"], **OPS).expand(
        source=["/landing/{{ ds }}/a.csv", "/landing/{{ ds }}/b.csv"])
    LanceAuditOperator(task_id="audit", transactions=write.output, fail_on_violation=False,
        checks={"min_rows": 1, "max_rows": 9, "not_null": ["id"], "ranges": {"id": {"min": 0}},
                "invalid_when": {"future": "day > DATE '{{ ds }}'"}}, **NS)
    LanceCommitOperator(task_id="commit", transactions=write.output, **OPS)
    LanceAbortOperator(task_id="abort", transactions=[write.output], reason="audit", **NS)
    LanceMaintainOperator(task_id="maintain", compact=True, older_than=dt.timedelta(days=7),
        sweep_orphans=True, orphan_min_age=86400, dry_run=True, enforce_min_age=True, **NS)
    LanceRecoverOperator(task_id="recover", lease_seconds=21600, **NS)
    LanceRepairOperator(task_id="repair", **NS)
    LanceAddColumnOperator(task_id="add", column={"name": "c", "type": "string"}, **NS)
    LanceDropColumnOperator(task_id="drop_column", column="c", **NS)
    LanceRenameColumnOperator(task_id="rename", column="c", new_name="d", **NS)
    LancePromoteColumnOperator(task_id="promote", column="id", type="int64", **NS)
    LanceEvolvePartitionSpecOperator(task_id="evolve", partition_fields=FIELDS, **NS)
    LanceTagOperator(task_id="tag", tag="eod-{{ ds }}", action="create", as_of=3, replace=False,
        **NS)
    LanceDeleteOperator(task_id="delete", filter="id < 0", claim_timeout=60, **OPS)
    LanceDropPartitionsOperator(task_id="retention", filter="day < DATE '2025-01-01'",
        claim_timeout=None, **OPS)
    LanceOptimizeOperator(task_id="optimize", filter=None, target_rows_per_fragment=1000,
        materialize_deletions=True, **OPS)
    LanceMergeOperator(task_id="merge", on=["id", "day"], source="/landing/fix.parquet",
        python_callable=None, op_args=None, op_kwargs=None,
        when_not_matched_by_source_delete=False, claim_timeout=30, **OPS)
    LancePartitionSensor(task_id="sensor", values={"day": "{{ ds }}"}, min_partitions=1,
        require_rows=True, deferrable=True, **NS)

    @task.lance_write(namespace="events", mode="append", stage_only=True, flush_bytes=1024)
    def stage(region: str) -> None:
        return None

    stage.expand(region=["emea", "amer"])
'''

BAD_DAG_FILES = {
    "prune_limit.py": (
        "LancePruneOperator(task_id='prune', max_partitions='ten')",
        "LancePruneOperator(task_id='prune'): max_partitions must be a whole number",
    ),
    "upsert.py": (
        "LanceSparkWriteOperator.partial(task_id='w', mode='upsert').expand(source=['/a'])",
        "LanceSparkWriteOperator(task_id='w'): mode must be one of 'append', 'overwrite'",
    ),
    "maintain_days.py": (
        "LanceMaintainOperator(task_id='maintain', older_than='7 days')",
        "write 604800 or datetime.timedelta(days=7)",
    ),
    "audit_typo.py": (
        "LanceAuditOperator(task_id='audit', transactions=[], checks={'not_nul': ['id']})",
        "unknown checks 'not_nul' (did you mean 'not_null'?)",
    ),
}

PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
heavy = ("lance", "datafusion", "pyarrow", "pyspark", "xxhash", "pandas")
report = {}
for folder in sys.argv[1:]:
    bag = DagBag(dag_folder=folder)
    errors = {k.rsplit("/", 1)[-1]: str(e) for k, e in bag.import_errors.items()}
    report[folder] = {"dags": sorted(bag.dags), "errors": errors}
report["heavy"] = sorted(m for m in heavy if m in sys.modules)
print(json.dumps(report))
"""


@pytest.fixture
def dag_folders(tmp_path: Path) -> tuple[Path, Path]:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "every_operator.py").write_text(EVERY_OPERATOR_DAG)
    for name, (statement, _) in BAD_DAG_FILES.items():
        (bad / name).write_text(
            textwrap.dedent(f"""
                import datetime as dt
                from airflow.sdk import DAG
                from airflow_provider_lance.operators import *
                with DAG("{name[:-3]}", schedule=None, start_date=dt.datetime(2025, 12, 1)):
                    {statement}
            """)
        )
    return good, bad


def test_a_dag_file_with_a_bad_argument_fails_to_import_and_parsing_stays_light(
    dag_folders: tuple[Path, Path],
) -> None:
    """The DAG processor's view, in a fresh interpreter: a bad argument is the file's import
    error (naming the operator, the task and the argument), and parsing a file that uses
    every operator with every argument loads no pylance, DataFusion, PyArrow or Spark."""
    good, bad = dag_folders
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(good), str(bad)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report[str(good)] == {"dags": ["every_operator"], "errors": {}}
    errors = report[str(bad)]["errors"]
    assert report[str(bad)]["dags"] == []
    assert set(errors) == set(BAD_DAG_FILES)
    for name, (_, message) in BAD_DAG_FILES.items():
        assert message in errors[name], errors[name]
    assert report["heavy"] == []


# -- real runs: rendered templates are checked before any I/O, without retries ---------------

#: One bad value per task of ``lance_test_rendered_arguments``: the task's refusal.
RENDERED_BAD: dict[str, tuple[str, Any, str]] = {
    "create": ("namespace", "", "LanceCreatePartitionOperator(task_id='create'): namespace"),
    "prune": ("filter", "event_date = '2025-12-01", "LancePruneOperator(task_id='prune'): filter"),
    "commit": ("transactions", ["not an id!"], "(not a transaction id)"),
    "audit": ("min_rows", 2.5, "checks min_rows must be a whole number of rows"),
    "abort": ("reason", 42, "LanceAbortOperator(task_id='abort'): reason must be a string"),
    "maintain": ("older_than", "7 days", "write 604800 or datetime.timedelta(days=7)"),
    "recover": ("lease", "6h", "write 21600 or datetime.timedelta(hours=6)"),
    "repair": ("repair_namespace", "../elsewhere", "a namespace name without '..'"),
    "add_column": (
        "column",
        {"name": "channel", "type": "string", "nullable": False},
        "a column added later must be nullable",
    ),
    "rename": ("new_name", "", "LanceRenameColumnOperator(task_id='rename'): new_name"),
    "promote": ("type", "", "LancePromoteColumnOperator(task_id='promote'): type must be a type"),
    "evolve": (
        "partition_fields",
        [{"name": "event_date", "sorce": "event_date"}],
        "has unknown keys 'sorce'",
    ),
    "tag": ("action", "remove", "LanceTagOperator(task_id='tag'): action must be one of"),
    "delete": ("claim_timeout", "2 minutes", "write 120 or datetime.timedelta(minutes=2)"),
    "optimize": ("optimize_filter", "(event_date > DATE '2025-12-01'", "1 '(' not closed"),
    "merge": ("on", "", "LanceMergeOperator(task_id='merge'): on must be"),
    "write": ("mode", "upsert", "LanceWriteOperator(task_id='write'): mode must be one of"),
    "sensor": ("sensor_filter", "country = 'DE", "the string literal opened at position 10"),
}


def make_events_namespace(root: Path) -> Any:
    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

    ns = PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    ns.write(events(6, start=dt.date(2025, 12, 1), days=2), "append")
    return ns


def test_rendered_templates_with_good_values_run(run_dag: RunDag, lance_test_root: Path) -> None:
    """The control: the same tasks with good values succeed (or skip: nothing staged)."""
    make_events_namespace(lance_test_root)
    run = run_dag("lance_test_rendered_arguments")
    assert run.state == "success", run.output[-3000:]
    skipped = {"commit", "audit", "abort"}  # given no transactions
    assert {t for t, s in run.states.items() if s == "skipped"} == skipped
    assert set(run.states) == set(RENDERED_BAD)


def test_rendered_templates_with_bad_values_fail_at_once_before_any_io(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    from tests.support import tree

    ns = make_events_namespace(lance_test_root)
    version, files = ns.version, tree(lance_test_root)
    conf = {param: value for param, value, _ in RENDERED_BAD.values()}
    run = run_dag("lance_test_rendered_arguments", conf=conf)
    assert run.state == "failed"
    for task_id, (_, _, message) in RENDERED_BAD.items():
        assert run.states[task_id] == "failed", task_id
        assert run.tries[task_id] == 1, task_id  # its retry is not used
        assert message in run.output, task_id
    assert "OperatorArgumentError" in run.output
    assert ns.version == version  # nothing touched the namespace
    assert tree(lance_test_root) == files


def test_a_bad_mapped_value_fails_its_map_index_at_once(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    make_events_namespace(lance_test_root)
    conf = {"modes": ["append", "upsert"], "source_format": "delta"}
    run = run_dag("lance_test_mapped_and_spark_arguments", conf=conf)
    assert run.states["mapped_write[0]"] == "success"
    assert (run.states["mapped_write[1]"], run.tries["mapped_write[1]"]) == ("failed", 1)
    assert "LanceWriteOperator(task_id='mapped_write'): mode must be one of" in run.output
    assert (run.states["spark"], run.tries["spark"]) == ("failed", 1)
    assert "LanceSparkWriteOperator(task_id='spark'): source_format must be one of" in run.output
    assert "Spark append of /nowhere/events.parquet" not in run.output  # never submitted


def test_a_txn_id_rendered_from_an_absent_param_is_derived(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """``txn_id="{{ params.txn_id }}"`` without the param renders ``'None'``: every run then
    named one transaction, and each run after the first returned the first one's result
    without writing. What a template renders for None is no id: each run derives its own."""
    from airflow_provider_lance.common import derive_txn_id

    ns = make_events_namespace(lance_test_root)
    before = ns.count_rows()
    first = run_dag("lance_test_txn_id_param")
    second = run_dag("lance_test_txn_id_param")
    for run in (first, second):
        assert run.state == "success", run.output[-3000:]
        expected = derive_txn_id("lance_test_txn_id_param", run.run_id, "write")
        assert run.xcom("write")["txn_id"] == expected
    assert ns.count_rows() == before + 4  # both runs wrote their two rows
