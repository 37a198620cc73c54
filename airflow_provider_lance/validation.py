"""Argument checks of the provider's operators, sensor, triggers and decorator.

A wrong argument fails where its author sees it:

* a value known when the DAG file is parsed is checked by the constructor, so the file fails
  to import, with a message naming the operator, the task, the argument, what was given and
  what is allowed;
* a templated argument whose value is a Jinja template (``{{``, ``{%``, ``{#``, or a file name
  ending in one of the operator's ``template_ext``) or a runtime reference (an ``XComArg``)
  is checked once Airflow has rendered it, at the start of ``execute`` and before any I/O
  (Airflow's convention: templates are rendered after ``__init__``); the task then fails at
  once, as a retry would render the same value. Inside a list or a mapping only the template
  parts wait: the rest is checked at parse time;
* the arguments of ``.partial()`` and the literal lists of ``.expand()`` are checked at parse
  time too, and each mapped task's arguments again when Airflow builds it.

Errors are :class:`OperatorArgumentError` (a ``ValueError``) or
:class:`OperatorArgumentTypeError` (also a ``TypeError``), both ``AirflowFailException``\\ s.

Durations are what Airflow's own (``retry_delay``, ``execution_timeout``) are: a number of
seconds or a :class:`datetime.timedelta`; a rendered template's number text is read too.
Text with a unit (``'7 days'``, ``'6h'``) is refused with the number to write instead: Airflow
reads no such text anywhere, and ``'1m'`` (a minute or a month?) is not unambiguous.

Nothing here imports pyarrow, pylance, DataFusion or Spark: a DAG file that uses the provider
parses as fast as one using core operators only.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk.definitions.mappedoperator import OperatorPartial

from airflow_provider_lance.namespace import TXN_ID_PATTERN, has_scheme

if TYPE_CHECKING:
    from airflow.sdk.definitions.mappedoperator import MappedOperator


class OperatorArgumentError(AirflowFailException, ValueError):
    """A wrong argument of an operator, sensor, trigger or decorator of this provider.

    A ``ValueError`` where a DAG file is parsed (the file's import error); an
    ``AirflowFailException`` where a rendered template is checked, so the task fails without
    burning its retries.
    """


class OperatorArgumentTypeError(OperatorArgumentError, TypeError):
    """An argument of the wrong type."""


class Refused(Exception):
    """Raised by a check; its text completes ``"<argument> ..."`` (e.g. ``"must be ...; got
    ..."``)."""

    def __init__(self, detail: str, *, wrong_type: bool = False) -> None:
        super().__init__(detail)
        self.wrong_type = wrong_type


#: Whether a value (or a part of one) is only known once Airflow renders it.
Deferred = Callable[[Any], bool]
#: A check of one argument's value: raises :class:`Refused`; parts ``deferred`` says are
#: templates are skipped (the whole value never is one: the caller skipped it then).
Check = Callable[[Any, Deferred], None]

_TEMPLATE_MARKERS = ("{{", "{%", "{#")
#: What text a template renders for an absent value (``None``) or an empty one.
_ABSENT_TEXT = ("", "None")
_MAX_SHOWN = 200


def never(value: Any) -> bool:
    """No value is deferred (a non-templated argument, or one already rendered)."""
    return False


def is_template(value: Any, template_ext: Sequence[str] = ()) -> bool:
    """Whether Airflow's rendering replaces ``value``: a Jinja string, a template file name,
    or a runtime reference such as an ``XComArg``."""
    if isinstance(value, str):
        return any(m in value for m in _TEMPLATE_MARKERS) or (
            bool(template_ext) and value.endswith(tuple(template_ext))
        )
    if isinstance(value, os.PathLike):
        return False
    return callable(getattr(value, "resolve", None)) and hasattr(value, "iter_references")


def absent(value: Any) -> bool:
    """None, or what a template renders for None or nothing (``''``, ``'None'``)."""
    return value is None or (isinstance(value, str) and value.strip() in _ABSENT_TEXT)


def given(value: Any) -> str | None:
    """An optional text argument once rendered: None when :func:`absent`."""
    return None if absent(value) else str(value)


def shown(value: Any) -> str:
    """A value as a message shows it: its repr (cut) and its type."""
    text = repr(value)
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return f"{text} ({type(value).__name__})"


def refuse(expected: str, value: Any, *, wrong_type: bool = False, hint: str = "") -> NoReturn:
    raise Refused(f"must be {expected}; got {shown(value)}{hint}", wrong_type=wrong_type)


# -- running the checks ---------------------------------------------------------------------


def owner_name(cls: type, task_id: Any = None) -> str:
    """``LancePruneOperator(task_id='prune')``: who an argument belongs to, in messages."""
    name = getattr(cls, "custom_operator_name", None) or cls.__name__
    return name if task_id is None else f"{name}(task_id={task_id!r})"


def error(
    owner: str | None, refused: Refused, argument: str | None = None
) -> OperatorArgumentError:
    """The error of a refused argument (or combination of arguments, without ``argument``)."""
    kind = OperatorArgumentTypeError if refused.wrong_type else OperatorArgumentError
    text = str(refused) if argument is None else f"{argument} {refused}"
    return kind(text if owner is None else f"{owner}: {text}")


def run_checks(
    owner: str,
    checks: Mapping[str, Check],
    values: Mapping[str, Any],
    deferred_for: Callable[[str], Deferred],
    where: str = "",
) -> dict[str, Any]:
    """Check each of ``values`` that has a check; returns the values known now (those not
    deferred as a whole)."""
    known = {}
    for name, value in values.items():
        check = checks.get(name)
        deferred = deferred_for(name)
        if check is None or deferred(value):
            continue
        try:
            check(value, deferred)
        except Refused as refused:
            raise error(owner, refused, f"{name}{where}") from None
        known[name] = value
    return known


def check_values(
    owner: str, checks: Mapping[str, Check], values: Mapping[str, Any]
) -> dict[str, Any]:
    """:func:`run_checks` of values nothing renders (trigger kwargs, a helper's arguments)."""
    return run_checks(owner, checks, values, lambda name: never)


class ArgumentChecks:
    """What the provider's operators and sensor mix in (before ``BaseOperator``).

    ``argument_checks`` maps each constructor argument to its check. Each ``__init__`` ends
    with :meth:`check_arguments` (arguments not set yet, in a base class's ``__init__``, are
    skipped; the subclass's call checks them), ``execute`` starts with
    ``check_arguments(rendered=True)``, and :meth:`check_combination` checks what arguments
    mean together.
    """

    argument_checks: ClassVar[Mapping[str, Check]] = {}
    #: argument -> the attribute holding it, where the names differ
    argument_attributes: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def deferred_for_arguments(cls, rendered: bool) -> Callable[[str], Deferred]:
        """Per argument, what of its value waits for rendering (nothing once ``rendered``)."""
        if rendered:
            return lambda name: never
        templated = set(getattr(cls, "template_fields", ()))
        ext = tuple(getattr(cls, "template_ext", ()))

        def deferred_for(name: str) -> Deferred:
            if cls.argument_attributes.get(name, name) not in templated:
                return never
            return lambda value: is_template(value, ext)

        return deferred_for

    def check_arguments(self, *, rendered: bool = False) -> None:
        """Check the arguments set so far (``rendered``: after Airflow rendered templates)."""
        values = {}
        for name in self.argument_checks:
            attribute = self.argument_attributes.get(name, name)
            if attribute in vars(self):
                values[name] = vars(self)[attribute]
        owner = owner_name(type(self), getattr(self, "task_id", None))
        known = run_checks(
            owner, self.argument_checks, values, self.deferred_for_arguments(rendered)
        )
        if len(values) == len(self.argument_checks):
            try:
                self.check_combination(known)
            except Refused as refused:
                raise error(owner, refused) from None

    def check_combination(self, known: Mapping[str, Any]) -> None:
        """Raise :class:`Refused` for arguments that do not go together; ``known`` holds
        the arguments whose values are known now (not templates waiting to be rendered)."""

    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """Airflow's ``partial``, its arguments checked now; ``expand`` checks the values of
        literal lists (each mapped task's arguments are checked again when it is built)."""
        owner = owner_name(cls, kwargs.get("task_id"))
        run_checks(owner, cls.argument_checks, kwargs, cls.deferred_for_arguments(False))
        base: OperatorPartial = super().partial(**kwargs)  # type: ignore[misc]
        checked = CheckedPartial(
            operator_class=base.operator_class, kwargs=base.kwargs, params=base.params
        )
        base._expand_called = True  # replaced by ``checked``: not a partial never expanded
        return checked


class CheckedPartial(OperatorPartial):
    """Airflow's ``OperatorPartial`` whose ``expand``/``expand_kwargs`` check the literal
    values of an :class:`ArgumentChecks` operator first (an ``XComArg`` waits for the run)."""

    __slots__ = ()

    def _check(self, values: Mapping[str, Any], where: str) -> None:
        cls = self.operator_class
        if not issubclass(cls, ArgumentChecks):
            return
        owner = owner_name(cls, self.kwargs.get("task_id"))
        run_checks(owner, cls.argument_checks, values, cls.deferred_for_arguments(False), where)

    def expand(self, **mapped_kwargs: Any) -> MappedOperator:
        for name, value in mapped_kwargs.items():
            if isinstance(value, (list, tuple)):
                for index, item in enumerate(value):
                    self._check({name: item}, f" (expand value {index})")
        return super().expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> MappedOperator:
        if isinstance(kwargs, (list, tuple)):
            for index, item in enumerate(kwargs):
                if isinstance(item, Mapping):
                    self._check(item, f" (expand_kwargs item {index})")
        return super().expand_kwargs(kwargs, strict=strict)


# -- checks of one kind of value ------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def whole(*, minimum: int = 0, optional: bool = False, none_means: str = "") -> Check:
    """An ``int`` (not a bool) of at least ``minimum``; None too when ``optional``."""
    expected = f"a whole number of at least {minimum}"
    if optional:
        expected += f", or None{f' for {none_means}' if none_means else ''}"

    def check(value: Any, deferred: Deferred) -> None:
        if value is None and optional:
            return
        if not _is_int(value):
            refuse(expected, value, wrong_type=True)
        if value < minimum:
            refuse(expected, value)

    return check


def flag(*, optional: bool = False, none_means: str = "") -> Check:
    """``True`` or ``False`` (not a truthy text: ``'false'`` is true); None too when
    ``optional``."""
    expected = "True or False" + (f", or None for {none_means}" if optional else "")

    def check(value: Any, deferred: Deferred) -> None:
        if not (isinstance(value, bool) or (value is None and optional)):
            refuse(expected, value, wrong_type=True)

    return check


def text(*, optional: bool = False, blank: bool = False, what: str = "a non-empty string") -> Check:
    """A string with more than whitespace (``blank``: any string); when ``optional``, None
    too and what a template renders for None (``''``, ``'None'``: see :func:`absent`)."""
    expected = what + (", or None" if optional else "")

    def check(value: Any, deferred: Deferred) -> None:
        if optional and (absent(value) or (blank and isinstance(value, str))):
            return
        if not isinstance(value, str):
            refuse(expected, value, wrong_type=True)
        if not blank and not value.strip():
            refuse(expected, value)

    return check


def choice(options: Sequence[str]) -> Check:
    """One of ``options`` (exactly: no other case, no whitespace)."""
    expected = "one of " + ", ".join(repr(o) for o in options)

    def check(value: Any, deferred: Deferred) -> None:
        if not isinstance(value, str):
            refuse(expected, value, wrong_type=True)
        if value not in options:
            refuse(expected, value)

    return check


def a_callable(value: Any, deferred: Deferred) -> None:
    if not callable(value):
        refuse("a callable (a function)", value, wrong_type=True)


def optional_callable(value: Any, deferred: Deferred) -> None:
    if value is not None:
        a_callable(value, deferred)


def conn_id(value: Any, deferred: Deferred) -> None:
    """A connection id: a non-empty string without surrounding whitespace."""
    expected = "a connection id (a non-empty string, e.g. 'lance_default')"
    if not isinstance(value, str):
        refuse(expected, value, wrong_type=True)
    if not value.strip() or value != value.strip():
        refuse(expected + " without surrounding whitespace", value)


def namespace(value: Any, deferred: Deferred) -> None:
    """A namespace: None (the connection root), a name relative to the root (no ``..``), a
    full URI or an absolute path."""
    expected = (
        "a namespace name relative to the connection root (e.g. 'events'), a full URI or an "
        "absolute path; omit it (None) for the connection root itself"
    )
    if value is None:
        return
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        refuse(expected, value, wrong_type=True)
    if not value.strip() or value != value.strip():
        refuse(expected, value)
    if not has_scheme(value) and not os.path.isabs(value) and ".." in value.split("/"):
        refuse("a namespace name without '..' (names are relative to the connection root)", value)


def txn_id(value: Any, deferred: Deferred) -> None:
    """None (derived from the task instance; also what a template renders for None) or an
    id of the core's alphabet."""
    expected = (
        "None (derived from the task instance) or a transaction id: 1-200 letters, digits "
        "and _.=:+- starting with a letter or digit"
    )
    if absent(value):
        return
    if not isinstance(value, str):
        refuse(expected, value, wrong_type=True)
    if not TXN_ID_PATTERN.match(value.strip()):
        refuse(expected, value)


def txn_id_value(value: Any) -> str | None:
    """``txn_id`` once rendered: None for what a template renders for an absent value."""
    return None if absent(value) else str(value).strip()


def op_args(value: Any, deferred: Deferred) -> None:
    if value is not None and (
        isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence)
    ):
        refuse("a list (or tuple) of positional arguments, or None", value, wrong_type=True)


def op_kwargs(value: Any, deferred: Deferred) -> None:
    expected = "a mapping of argument names to values, or None"
    if value is None:
        return
    if not isinstance(value, Mapping):
        refuse(expected, value, wrong_type=True)
    if not all(isinstance(k, str) and k.isidentifier() for k in value):
        refuse(expected + " (names must be identifiers)", value)


def names(*, single: bool = False, optional: bool = False, what: str = "name") -> Check:
    """A non-empty list of non-empty strings (``single``: one string too)."""
    expected = f"a non-empty list of {what}s" + (f" (or one {what})" if single else "")
    expected += ", or None" if optional else ""

    def check(value: Any, deferred: Deferred) -> None:
        if value is None and optional:
            return
        if isinstance(value, str) and single:
            items: Sequence[Any] = [value]
        elif isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            refuse(expected, value, wrong_type=True)
        else:
            items = value
        if not items:
            refuse(expected, value)
        for item in items:
            if deferred(item):
                continue
            if not isinstance(item, str) or not item.strip():
                refuse(expected, value, wrong_type=not isinstance(item, str))

    return check


def arguments_list(value: Any, deferred: Deferred) -> None:
    """Command-line arguments: a list of strings (a string would be split into characters)."""
    expected = "a list of strings (e.g. ['--distribution', 'none']), or None"
    if value is None:
        return
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        refuse(expected, value, wrong_type=True)
    for item in value:
        if not deferred(item) and not isinstance(item, str):
            refuse(expected, value, wrong_type=True)


_SCALARS = (str, int, float, bool, Decimal, dt.date, dt.datetime, dt.time, bytes)


def options_mapping(value: Any, deferred: Deferred) -> None:
    """Reader options: a mapping of option names to scalar values, or None."""
    expected = "a mapping of option names to strings, numbers or booleans, or None"
    if value is None:
        return
    if not isinstance(value, Mapping):
        refuse(expected, value, wrong_type=True)
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip():
            refuse(expected, value, wrong_type=True)
        if not deferred(item) and not isinstance(item, (str, int, float, bool)):
            refuse(expected, value, wrong_type=True, hint=f" (option {key!r})")


# -- durations ------------------------------------------------------------------------------

_UNIT_TEXT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$")
_UNITS = {
    "seconds": ("s", "sec", "secs", "second", "seconds"),
    "minutes": ("m", "min", "mins", "minute", "minutes"),
    "hours": ("h", "hr", "hrs", "hour", "hours"),
    "days": ("d", "day", "days"),
    "weeks": ("w", "week", "weeks"),
}
_UNIT_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400, "weeks": 604800}
_DURATION = "a number of seconds (e.g. 3600) or a datetime.timedelta (e.g. timedelta(hours=1))"


def _unit_hint(value: str) -> str:
    match = _UNIT_TEXT.match(value)
    if match is None:
        return ""
    amount, word = match.group(1), match.group(2).lower()
    for unit, spellings in _UNITS.items():
        if word in spellings:
            seconds = float(amount) * _UNIT_SECONDS[unit]
            number = int(seconds) if seconds.is_integer() else seconds
            return (
                f": text with a unit is not read; write {number} or "
                f"datetime.timedelta({unit}={amount})"
            )
    return ": text with a unit is not read; write the number of seconds"


def seconds_of(value: Any, *, optional: bool = False) -> float | None:
    """A duration in seconds: a timedelta, a number, or a number's text (as a template
    renders it); None (or absent text) when ``optional``. Raises :class:`Refused`."""
    expected = _DURATION + (", or None" if optional else "")
    if absent(value):
        if optional:
            return None
        refuse(expected, value, wrong_type=value is None)
    if isinstance(value, dt.timedelta):
        number = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        refuse(expected, value, wrong_type=True)
    else:
        try:
            number = float(value)
        except ValueError:
            refuse(expected, value, hint=_unit_hint(str(value)))
    if not math.isfinite(number) or number < 0:
        refuse(expected + " (finite, not negative)", value)
    return number


def duration(*, optional: bool = False) -> Check:
    def check(value: Any, deferred: Deferred) -> None:
        seconds_of(value, optional=optional)

    return check


def duration_seconds(value: Any, name: str, *, optional: bool = False) -> float | None:
    """:func:`seconds_of` raising :class:`OperatorArgumentError` naming the argument (for
    ``execute``, after :meth:`ArgumentChecks.check_arguments` passed)."""
    try:
        return seconds_of(value, optional=optional)
    except Refused as refused:
        raise error(None, refused, name) from None


# -- SQL filters ----------------------------------------------------------------------------


def filter_problem(sql: str) -> str | None:
    """What makes ``sql`` unreadable without parsing it (an unclosed string literal or
    quoted name, unbalanced parentheses), or None. The full parse happens when the task
    runs (it needs DataFusion and the namespace's schema)."""
    depth = 0
    quote: str | None = None
    start = 0
    i = 0
    while i < len(sql):
        char = sql[i]
        if quote is not None:
            if char == quote:
                if sql[i + 1 : i + 2] == quote:  # '' or "" inside a literal
                    i += 1
                else:
                    quote = None
        elif char in ("'", '"'):
            quote, start = char, i
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return f"the ')' at position {i} closes no '('"
        i += 1
    if quote is not None:
        kind = "string literal" if quote == "'" else "quoted name"
        return f"the {kind} opened at position {start} is not closed"
    if depth:
        return f"{depth} '(' not closed"
    return None


def sql_filter(*, required: bool) -> Check:
    """A SQL boolean expression (``required``: not None, blank or ``'None'``, what a template
    renders for None)."""
    expected = "a SQL boolean expression, e.g. \"event_date = DATE '2025-12-10'\""
    if not required:
        expected += ", or None for every partition"

    def check(value: Any, deferred: Deferred) -> None:
        if absent(value):
            if not required:
                return
            refuse(expected, value, wrong_type=value is None)
        if not isinstance(value, str):
            refuse(expected, value, wrong_type=True)
        if not value.strip():
            refuse(expected, value)
        problem = filter_problem(value)
        if problem is not None:
            refuse(expected, value, hint=f": {problem}")

    return check


def filter_value(value: Any) -> str | None:
    """A filter once rendered: None for what a template renders for an absent value."""
    return None if absent(value) else str(value).strip()


# -- partitions and transactions ------------------------------------------------------------


def _scalar(value: Any, deferred: Deferred) -> bool:
    return value is None or isinstance(value, _SCALARS) or deferred(value)


def _partition_values(item: Any, deferred: Deferred, expected: str, entire: Any) -> None:
    if deferred(item):
        return
    if isinstance(item, Mapping) and isinstance(item.get("values"), Mapping):
        item = item["values"]  # a partition summary of LancePruneOperator
    if not isinstance(item, Mapping):
        refuse(expected, entire, wrong_type=True)
    for key, value in item.items():
        if not isinstance(key, str) or not key:
            refuse(expected, entire, hint=" (field names must be non-empty strings)")
        if not _scalar(value, deferred):
            refuse(expected, entire, hint=f" (the value of {key!r} is not a single value)")


def partition_values(*, optional: bool = False) -> Check:
    """A mapping of partition field -> value, a list of them, or partition summaries (the
    XCom of :class:`LancePruneOperator`)."""
    expected = (
        "a mapping of partition field to value, e.g. {'event_date': '2025-12-10'}, or a list "
        "of them"
    ) + (", or None" if optional else "")

    def check(value: Any, deferred: Deferred) -> None:
        if value is None and optional:
            return
        if isinstance(value, Mapping):
            _partition_values(value, deferred, expected, value)
            return
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            refuse(expected, value, wrong_type=True)
        for item in value:
            _partition_values(item, deferred, expected, value)

    return check


def partition_key(value: Any, deferred: Deferred) -> None:
    """None, an Airflow partition key, or a list of them."""
    names(single=True, optional=True, what="partition key")(value, deferred)


def transactions(value: Any, deferred: Deferred) -> None:
    """Transaction ids or write results (``{"txn_id", ...}``), nested in lists; None or an
    empty list is nothing (the task skips)."""
    expected = (
        "transaction ids, write results ({'txn_id': ...}, e.g. a write task's output) or lists "
        "of them"
    )
    if value is None or deferred(value):
        return
    if isinstance(value, str):
        if not TXN_ID_PATTERN.match(value):
            refuse(expected, value, hint=" (not a transaction id)")
        return
    if isinstance(value, Mapping):
        txn = value.get("txn_id")
        if not deferred(txn) and not (isinstance(txn, str) and TXN_ID_PATTERN.match(txn)):
            refuse(expected, value, hint=" (a write result needs its 'txn_id')")
        return
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        refuse(expected, value, wrong_type=True)
    for item in value:
        transactions(item, deferred)


# -- schemas --------------------------------------------------------------------------------


def _is_instance(value: Any, module: str, name: str) -> bool:
    """``isinstance(value, module.name)`` without importing the module (a value of a type
    whose module nobody imported is not an instance of it)."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(value, cls)


def arrow_type(value: Any, deferred: Deferred) -> None:
    """A type spec: a short name (``'int64'``, ``'timestamp[us, tz=UTC]'``), a
    JsonArrowDataType object (``{'type': 'int64'}``) or a pyarrow DataType. The name itself
    is resolved when the task runs (that needs pyarrow)."""
    expected = "a type: a name such as 'int64', a {'type': ...} object or a pyarrow DataType"
    if _is_instance(value, "pyarrow", "DataType"):
        return
    if isinstance(value, Mapping):
        if not (deferred(value.get("type")) or isinstance(value.get("type"), str)):
            refuse(expected, value, hint=" (its 'type' must be a name)")
        return
    if not isinstance(value, str):
        refuse(expected, value, wrong_type=True)
    if not value.strip():
        refuse(expected, value)


_COLUMN_KEYS = ("name", "type", "nullable", "metadata")
_FIELD_KEYS = ("name", "source", "expression", "result_type")
_SCHEMA = "a list of columns {name, type, nullable, metadata} (or a pyarrow Schema)"
_FIELDS = "a list of partition fields {name, source, expression, result_type}"


class _Problem(Exception):
    """What is wrong inside a spec (completes "...; <problem>")."""

    def __init__(self, problem: str, *, wrong_type: bool = False) -> None:
        super().__init__(problem)
        self.wrong_type = wrong_type


def _entry(item: Any, deferred: Deferred, keys: Sequence[str], what: str, index: int) -> str:
    """Check one ``{"name", ...}`` entry of a spec; returns its name."""
    if not isinstance(item, Mapping):
        raise _Problem(f"entry {index} is {shown(item)}, not a {what} object", wrong_type=True)
    name = item.get("name")
    if not deferred(name) and not (isinstance(name, str) and name.strip()):
        raise _Problem(f"entry {index} has no 'name' string: {shown(item)}")
    unknown = [k for k in item if k not in keys]
    if unknown:
        raise _Problem(
            f"{what} {name!r} has unknown keys {', '.join(map(repr, unknown))} (known: "
            f"{', '.join(keys)})"
        )
    return str(name)


def _type_of(owner: str, value: Any, deferred: Deferred) -> None:
    if value is not None and not deferred(value):
        try:
            arrow_type(value, deferred)
        except Refused as refused:
            raise _Problem(f"{owner}: type {refused}", wrong_type=refused.wrong_type) from None


def _column(item: Any, deferred: Deferred, index: int = 0) -> None:
    name = _entry(item, deferred, _COLUMN_KEYS, "column", index)
    if "type" not in item:
        raise _Problem(f"column {name!r} has no 'type'")
    _type_of(f"column {name!r}", item["type"], deferred)
    nullable = item.get("nullable", True)
    if not deferred(nullable) and not isinstance(nullable, bool):
        raise _Problem(f"column {name!r}: nullable must be True or False, got {shown(nullable)}")
    metadata = item.get("metadata")
    if metadata is not None and not deferred(metadata) and not isinstance(metadata, Mapping):
        raise _Problem(f"column {name!r}: metadata must be a mapping, got {shown(metadata)}")


def _spec_list(value: Any) -> Sequence[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise _Problem(f"got {shown(value)}", wrong_type=True)
    if not value:
        raise _Problem("got an empty list")
    return value


def _spec_check(expected: str, body: Callable[[Any, Deferred], None]) -> Check:
    def check(value: Any, deferred: Deferred) -> None:
        try:
            body(value, deferred)
        except _Problem as problem:
            raise Refused(f"must be {expected}; {problem}", wrong_type=problem.wrong_type) from None

    return check


def _schema(value: Any, deferred: Deferred) -> None:
    if _is_instance(value, "pyarrow", "Schema"):
        return
    if isinstance(value, Mapping):  # {"fields": [...]}, as JsonArrowSchema has it
        value = value.get("fields")
        if deferred(value):
            return
    for index, item in enumerate(_spec_list(value)):
        if not deferred(item):
            _column(item, deferred, index)


def _partition_fields(value: Any, deferred: Deferred) -> None:
    for index, item in enumerate(_spec_list(value)):
        if deferred(item) or _is_instance(
            item, "airflow_provider_lance.namespace.format.spec", "PartitionField"
        ):
            continue
        name = _entry(item, deferred, _FIELD_KEYS, "partition field", index)
        for key in ("source", "expression"):
            part = item.get(key)
            if part is not None and not deferred(part) and not isinstance(part, str):
                raise _Problem(f"partition field {name!r}: {key} must be a string", wrong_type=True)
        _type_of(f"partition field {name!r}", item.get("result_type"), deferred)


def _new_column(value: Any, deferred: Deferred) -> None:
    if _is_instance(value, "pyarrow", "Field"):
        nullable = value.nullable
    else:
        _column(value, deferred)
        nullable = value.get("nullable", True)
    if nullable is False:
        raise _Problem(
            "a column added later must be nullable: the partitions written before it hold "
            "no value for it"
        )


def _optional(check: Check) -> Check:
    def optional(value: Any, deferred: Deferred) -> None:
        if value is not None:
            check(value, deferred)

    return optional


def schema(*, optional: bool = False) -> Check:
    """A schema spec: a list of ``{"name", "type", "nullable", "metadata"}``, an object
    with such a ``fields`` list, or a pyarrow Schema (type names are resolved when the task
    runs: that needs pyarrow)."""
    check = _spec_check(_SCHEMA + (", or None" if optional else ""), _schema)
    return _optional(check) if optional else check


def partition_fields(*, optional: bool = False) -> Check:
    """Partition field specs: a list of ``{"name", "source", "expression", "result_type"}``
    or ``PartitionField`` objects."""
    check = _spec_check(_FIELDS + (", or None" if optional else ""), _partition_fields)
    return _optional(check) if optional else check


#: A column to add: ``{"name", "type", "nullable", "metadata"}`` or a pyarrow Field, nullable.
new_column = _spec_check(
    "a column {name, type, nullable, metadata} or a pyarrow Field", _new_column
)


def column_name(value: Any, deferred: Deferred) -> None:
    text(what="a column name")(value, deferred)


# -- tags and past states -------------------------------------------------------------------

#: The core's tag name rule (``namespace.read.timetravel.check_tag_name``; that module loads
#: pylance). tests/airflow/test_operator_arguments.py holds the two to the same answers.
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: A date, then a time of day: what makes an ``as_of`` text a moment rather than a tag name.
MOMENT = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def tag_problem(name: str) -> str | None:
    if not _TAG.fullmatch(name):
        return "1-100 letters, digits and ._- starting with a letter or digit"
    if name.isdigit() or ".." in name or name.endswith((".", ".lock")):
        return "not only digits (a version), without '..', not ending in '.' or '.lock'"
    return None


def tag_name(value: Any, deferred: Deferred) -> None:
    expected = "a tag name"
    if not isinstance(value, str):
        refuse(expected, value, wrong_type=True)
    problem = tag_problem(value.strip())
    if problem is not None:
        refuse(f"{expected}: {problem}", value)


def as_of(value: Any, deferred: Deferred) -> None:
    """A past state: None (the latest), a ``__manifest`` version, a datetime or an ISO
    timestamp with a time of day, or a tag name (see ``operators.timetravel.as_of_value``)."""
    expected = (
        "None (the latest state), a __manifest version (a whole number), a datetime or an "
        "ISO timestamp with a time of day ('2025-12-10T18:00:00Z'), or a tag name"
    )
    if value is None or isinstance(value, dt.datetime):
        return
    if isinstance(value, dt.date):
        refuse(expected, value, wrong_type=True, hint=" (a date has no time of day)")
    if _is_int(value):
        if value < 0:
            refuse(expected, value)
        return
    if not isinstance(value, str):
        refuse(expected, value, wrong_type=True)
    text_ = value.strip()
    if text_ in _ABSENT_TEXT or text_.isdigit():
        return
    if MOMENT.match(text_):
        try:
            dt.datetime.fromisoformat(text_)
        except ValueError:
            refuse(expected, value, hint=" (not an ISO timestamp)")
        return
    problem = tag_problem(text_)
    if problem is not None:
        refuse(expected, value, hint=f" (as a tag name: {problem})")


# -- the trigger's numbers ------------------------------------------------------------------


def interval(*, positive: bool) -> Check:
    """A number of seconds between polls (``positive``: more than 0)."""
    expected = "a number of seconds" + (" above 0" if positive else " (0 or more)")

    def check(value: Any, deferred: Deferred) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            refuse(expected, value, wrong_type=True)
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            refuse(expected, value)

    return check
