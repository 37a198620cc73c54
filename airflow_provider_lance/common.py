"""What the operators, the sensor and the trigger share: transaction ids and error mapping."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_lance.namespace import TXN_ID_PATTERN
from airflow_provider_lance.namespace.errors import LanceNamespaceError, is_retryable

# Airflow forks from processes that have imported Lance (the task supervisor, the
# OpenLineage listener), and Lance warns "lance is not fork-safe" at every fork. The children
# never use a Lance handle of their parent: the core opens its sessions per process id
# (namespace/io/storage.py), so the warning says nothing about this provider's tasks.
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)

_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.=:+-]")
_MAX_LEN = 200
_HASH_LEN = 16


def derive_txn_id(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1) -> str:
    """A transaction id that is the same for every try of one task instance.

    ``dag_id=run_id=task_id[=map_index]`` when that already fits the core's alphabet (the
    common case: Airflow run ids are letters, digits and ``_:+.-``); otherwise the text is
    sanitised and a hash of the exact original is appended, so two different task
    instances never share an id.
    """
    parts = [dag_id, run_id, task_id]
    if map_index is not None and map_index >= 0:
        parts.append(str(map_index))
    raw = "=".join(parts)
    if TXN_ID_PATTERN.match(raw) and not any("=" in p for p in parts):
        return raw
    digest = hashlib.blake2b(raw.encode(), digest_size=_HASH_LEN // 2).hexdigest()
    clean = _BAD_CHARS.sub("-", raw).lstrip("_.=:+-") or "txn"
    return f"{clean[: _MAX_LEN - _HASH_LEN - 1]}+{digest}"


def txn_id_from_context(context: Mapping[str, Any], suffix: str | None = None) -> str:
    """:func:`derive_txn_id` for the running task instance (``suffix`` for sub-transactions)."""
    ti = context["ti"]
    task_id = ti.task_id if suffix is None else f"{ti.task_id}.{suffix}"
    return derive_txn_id(ti.dag_id, ti.run_id, task_id, getattr(ti, "map_index", -1))


def describe_values(values: Mapping[str, Any]) -> str:
    """Partition values as a person reads them in a task log: ``event_date=2025-12-10,
    country=NULL`` (not ``{'event_date': datetime.date(2025, 12, 10), 'country': None}``)."""

    def text(value: Any) -> str:
        if value is None:
            return "NULL"
        return value.isoformat() if isinstance(value, (dt.date, dt.time)) else str(value)

    return ", ".join(f"{name}={text(value)}" for name, value in values.items())


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextmanager
def lance_errors(action: str) -> Iterator[None]:
    """Turn project exceptions into Airflow task failures with the project's message.

    The error class decides (:func:`~airflow_provider_lance.namespace.errors.is_retryable`):
    errors no retry can fix (bad input, an aborted or closed transaction, a malformed
    connection, a read-only or denied store) fail the task at once
    (:class:`AirflowFailException`, no retries burnt); retryable ones (storage, commit
    conflicts) raise :class:`AirflowException`, so the task's retries apply. The deep
    pylance/DataFusion stack is dropped. A library's ``OSError`` that reached here is
    classified as the core classifies storage failures (``permanent_failure``): a
    permanent one fails the task at once. Other exceptions pass through unchanged
    (Airflow retries them).
    """
    try:
        yield
    except LanceNamespaceError as exc:
        message = f"{action} failed: {describe_error(exc)}"
        if is_retryable(exc):
            raise AirflowException(message) from None
        raise AirflowFailException(message) from None
    except OSError as exc:
        from airflow_provider_lance.namespace import permanent_failure  # (loads pylance)

        permanent = permanent_failure(exc)
        if permanent is None:
            raise
        raise AirflowFailException(f"{action} failed: {describe_error(permanent)}") from None


def values_list(values: Any) -> list[Mapping[str, Any]]:
    """One mapping or a list of mappings (e.g. rendered from XCom) as a list of mappings."""
    if isinstance(values, Mapping):
        return [values]
    if isinstance(values, (str, bytes)):
        raise AirflowFailException(
            f"partition values must be a mapping or a list of mappings, got {values!r}"
        )
    if not isinstance(values, Sequence):
        try:
            values = list(values)  # lazy XCom sequences of mapped upstream tasks
        except TypeError:
            raise AirflowFailException(
                f"partition values must be a mapping or a list of mappings, got {values!r}"
            ) from None
    out = []
    for item in values:
        if isinstance(item, Mapping) and isinstance(item.get("values"), Mapping):
            item = item["values"]  # a partition summary from LancePruneOperator
        if not isinstance(item, Mapping):
            raise AirflowFailException(f"partition values must be mappings, got {item!r}")
        out.append(item)
    return out
