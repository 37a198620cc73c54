"""``LanceAuditOperator``: data-quality checks of staged, unpublished transactions.

The "audit" of write-audit-publish: the rows a write staged are checked while no reader
can see them (:meth:`Transaction.to_reader` reads the staged files, commits nothing), and
only a passing audit lets the publish run. The checks are declarative and computed in one
streaming pass (per batch: counts, NULLs, minimum and maximum), so their memory does not
grow with the data:

    checks = {
        "min_rows": 1, "max_rows": 5_000_000,
        "not_null": ["id", "event_date"],
        "ranges": {"amount": {"min": 0, "max": 10_000}, "event_date": {"min": "{{ ds }}"}},
        "invalid_when": {"refund without order": "amount < 0 AND order_id IS NULL"},
    }

``invalid_when`` names SQL filters (the namespace's read filter dialect) that no row may
match. :func:`audit_transactions` does the work without Airflow, for ``@task`` code.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSkipException,
    BaseOperator,
)

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.operators.commit import parse_transactions, transactions_namespace

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_lance.namespace import PartitionedNamespace

_CHECK_KEYS = ("min_rows", "max_rows", "not_null", "ranges", "invalid_when")
_CHECKS = "a mapping of checks (" + ", ".join(_CHECK_KEYS) + ")"


def check_spec(spec: Any, deferred: v.Deferred = v.never) -> None:
    """Raise :class:`~airflow_provider_lance.validation.Refused` for a malformed checks
    mapping; parts ``deferred`` says are templates are checked once rendered."""
    if not isinstance(spec, Mapping):
        v.refuse(_CHECKS, spec, wrong_type=True)
    unknown = [k for k in spec if k not in _CHECK_KEYS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), _CHECK_KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise v.Refused(f"has unknown checks {', '.join(map(repr, unknown))}{hint}; {_CHECKS}")
    low = _count(spec.get("min_rows"), "min_rows", deferred)
    high = _count(spec.get("max_rows"), "max_rows", deferred)
    if low is not None and high is not None and low > high:
        raise v.Refused(f"min_rows {low} is above max_rows {high}: no staged data can pass")
    not_null = spec.get("not_null")
    if not_null is not None and not deferred(not_null):
        try:
            v.names(what="column name")(not_null, deferred)
        except v.Refused as refused:
            raise v.Refused(f"not_null {refused}", wrong_type=refused.wrong_type) from None
    _check_ranges(spec.get("ranges"), deferred)
    _check_invalid_when(spec.get("invalid_when"), deferred)


def _check_ranges(ranges: Any, deferred: v.Deferred) -> None:
    if ranges is None or deferred(ranges):
        return
    if not isinstance(ranges, Mapping):
        raise v.Refused(
            f"ranges must map columns to {{'min': ..., 'max': ...}}, got {v.shown(ranges)}"
        )
    for column, bounds in ranges.items():
        if deferred(bounds):
            continue
        if not isinstance(bounds, Mapping) or not bounds or not set(bounds) <= {"min", "max"}:
            raise v.Refused(
                f"the range of {column!r} must be {{'min': ..., 'max': ...}} (either or both), "
                f"got {v.shown(bounds)}"
            )


def _check_invalid_when(invalid: Any, deferred: v.Deferred) -> None:
    if invalid is None or deferred(invalid):
        return
    if not isinstance(invalid, Mapping):
        raise v.Refused(f"invalid_when must map names to SQL filters, got {v.shown(invalid)}")
    sql = v.sql_filter(required=True)
    for name, filter_ in invalid.items():
        if deferred(filter_):
            continue
        try:
            sql(filter_, deferred)
        except v.Refused as refused:
            raise v.Refused(f"invalid_when {name!r} {refused}") from None


def _count(value: Any, name: str, deferred: v.Deferred = v.never) -> int | None:
    """A number of rows (a rendered template's digits too); None for none."""
    if deferred(value) or v.absent(value):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise v.Refused(
            f"{name} must be a whole number of rows (0 or more), got {v.shown(value)}",
            wrong_type=not isinstance(value, (int, str)) or isinstance(value, bool),
        )
    return value


@dataclass(frozen=True)
class AuditChecks:
    """The checks of an audit (see the module docstring for the mapping they come from)."""

    min_rows: int | None = None
    max_rows: int | None = None
    not_null: tuple[str, ...] = ()
    #: column -> (minimum, maximum), each inclusive and optional
    ranges: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    #: name -> SQL filter no row may match
    invalid_when: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: Any) -> AuditChecks:
        """The checks of a rendered ``checks`` mapping; a malformed one raises
        :class:`~airflow_provider_lance.validation.OperatorArgumentError`."""
        try:
            check_spec(spec)
        except v.Refused as refused:
            raise v.error(None, refused, "checks") from None
        ranges = spec.get("ranges") or {}
        return cls(
            min_rows=_count(spec.get("min_rows"), "min_rows"),
            max_rows=_count(spec.get("max_rows"), "max_rows"),
            not_null=tuple(spec.get("not_null") or ()),
            ranges={c: (b.get("min"), b.get("max")) for c, b in ranges.items()},
            invalid_when={str(k): q.strip() for k, q in (spec.get("invalid_when") or {}).items()},
        )


@dataclass
class AuditResult:
    """What an audit found: each check's observed value and whether it passed."""

    rows: int = 0
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def failures(self) -> list[str]:
        return [f"{name}: {c['detail']}" for name, c in self.checks.items() if not c["passed"]]

    @property
    def passed(self) -> bool:
        return not self.failures

    def record(self, name: str, passed: bool, value: Any, detail: str) -> None:
        self.checks[name] = {"passed": passed, "value": value, "detail": detail}


def audit_transactions(
    ns: PartitionedNamespace, txn_ids: Sequence[str], checks: AuditChecks
) -> AuditResult:
    """Run ``checks`` over the rows the transactions staged, in one streaming pass."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_provider_lance.namespace import RowFilter

    state = ns.state()
    filters = {name: RowFilter(sql, state) for name, sql in checks.invalid_when.items()}
    needed = list(dict.fromkeys([*checks.not_null, *checks.ranges]))
    for row_filter in filters.values():
        needed += [c for c in row_filter.columns if c not in needed]
    active = state.schema.project(needed)  # unknown columns fail here, before anything is read
    bounds = {
        c: _typed_bounds(c, lo, hi, active.field(c).type) for c, (lo, hi) in checks.ranges.items()
    }
    transactions = [ns.transaction(t) for t in txn_ids]

    rows = 0
    nulls = dict.fromkeys(checks.not_null, 0)
    out_of_range = dict.fromkeys(checks.ranges, 0)
    seen: dict[str, list[Any]] = {c: [None, None] for c in checks.ranges}
    matches = dict.fromkeys(filters, 0)
    if needed:
        for txn in transactions:
            for batch in txn.to_reader(columns=needed):
                table = pa.Table.from_batches([batch])
                rows += table.num_rows
                for column in checks.not_null:
                    nulls[column] += table.column(column).null_count
                for column, (lo, hi) in bounds.items():
                    values = table.column(column)
                    low, high = pc.min_max(values).values()
                    _widen(seen[column], low.as_py(), high.as_py())
                    bad = pc.less(values, lo) if lo is not None else None
                    if hi is not None:
                        above = pc.greater(values, hi)
                        bad = above if bad is None else pc.or_(bad, above)
                    if bad is not None:
                        out_of_range[column] += int(pc.sum(bad).as_py() or 0)
                for name, row_filter in filters.items():
                    matches[name] += row_filter.filter(table).num_rows
    else:
        rows = sum(txn.info().rows for txn in transactions)

    result = AuditResult(rows=rows)
    if checks.min_rows is not None:
        ok = rows >= checks.min_rows
        result.record(
            "min_rows", ok, rows, f"{rows} rows staged, at least {checks.min_rows} wanted"
        )
    if checks.max_rows is not None:
        ok = rows <= checks.max_rows
        result.record("max_rows", ok, rows, f"{rows} rows staged, at most {checks.max_rows} wanted")
    for column, count in nulls.items():
        result.record(f"not_null:{column}", count == 0, count, f"{count} NULL(s) in {column!r}")
    for column, count in out_of_range.items():
        lo, hi = checks.ranges[column]
        low, high = seen[column]
        result.record(
            f"range:{column}",
            count == 0,
            count,
            f"{count} value(s) of {column!r} outside [{lo}, {hi}] (seen {low} .. {high})",
        )
    for name, count in matches.items():
        result.record(
            f"invalid_when:{name}",
            count == 0,
            count,
            f"{count} row(s) match {checks.invalid_when[name]!r}",
        )
    return result


def _typed_bounds(column: str, lo: Any, hi: Any, dtype: Any) -> tuple[Any, Any]:
    """The range bounds as scalars of the column's type (a date given as text, say)."""
    import pyarrow as pa

    def typed(value: Any) -> Any:
        if value is None:
            return None
        try:
            return pa.array([value]).cast(dtype)[0]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise AirflowFailException(
                f"range bound {value!r} of {column!r} is not a {dtype}: {exc}"
            ) from None

    return typed(lo), typed(hi)


def _widen(seen: list[Any], low: Any, high: Any) -> None:
    if low is not None and (seen[0] is None or low < seen[0]):
        seen[0] = low
    if high is not None and (seen[1] is None or high > seen[1]):
        seen[1] = high


class LanceAuditOperator(v.ArgumentChecks, BaseOperator):
    """Check staged transactions before they are published; fail when a check fails.

    Place it between the staging writes (``stage_only=True``) and the
    :class:`LanceCommitOperator`: a failure leaves the commit ``upstream_failed`` (nothing
    published) and triggers an abort task (:class:`LanceAbortOperator` with
    ``trigger_rule="one_failed"``). The findings are pushed as the XCom ``audit`` in either
    case, so a failed audit shows what failed.

    :param transactions: transaction ids or write results (templated).
    :param checks: the checks (see the module docstring) (templated).
    :param namespace: relative name or full URI (templated; default: the ``uri`` the
        write results name).
    :param fail_on_violation: fail the task when a check fails (otherwise only report).
    :return: (XCom) ``{"uri", "transactions", "passed", "rows", "failures", "checks"}``.
    """

    template_fields: Sequence[str] = ("transactions", "checks", "namespace")
    template_fields_renderers = {"checks": "json"}
    ui_color = "#fbe3b4"
    argument_checks = {
        "transactions": v.transactions,
        "checks": check_spec,
        "namespace": v.namespace,
        "fail_on_violation": v.flag(),
        "lance_conn_id": v.conn_id,
    }

    def __init__(
        self,
        *,
        transactions: Any,
        checks: Mapping[str, Any],
        namespace: str | None = None,
        fail_on_violation: bool = True,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.transactions = transactions
        self.checks = checks
        self.namespace = namespace
        self.fail_on_violation = fail_on_violation
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        checks = AuditChecks.parse(self.checks)
        ids, uris, published = parse_transactions(self.transactions)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = transactions_namespace(hook, self.namespace, uris)
        if published:
            raise AirflowFailException(
                f"transactions {published} were published by their writers: an audit before "
                "publishing needs staged writes (stage_only=True / commit=False)"
            )
        if not ids:
            raise AirflowSkipException(f"nothing staged to audit in {uri}")
        with lance_errors(f"audit of {ids} in {uri}"):
            result = audit_transactions(hook.open(uri), ids, checks)
        summary = {
            "uri": uri,
            "transactions": ids,
            "passed": result.passed,
            "rows": result.rows,
            "failures": result.failures,
            "checks": result.checks,
        }
        context["ti"].xcom_push(key="audit", value=summary)
        for name, check in result.checks.items():
            self.log.info("%s %s: %s", "PASS" if check["passed"] else "FAIL", name, check["detail"])
        if not result.passed and self.fail_on_violation:
            raise AirflowFailException(
                f"audit of {ids} failed, nothing was published: {'; '.join(result.failures)}"
            )
        return summary
