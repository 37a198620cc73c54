"""``@task.lance_write``: the decorated function returns the data, the task writes it.

    @task.lance_write(namespace="events", mode="overwrite")
    def extract(day: str) -> Iterator[pa.RecordBatch]:
        yield from fetch_batches(day)          # consumed as it is staged

    extract.expand(day=["2025-12-01", "2025-12-02"])   # one transaction per map index

Everything :class:`~airflow_provider_lance.operators.write.LanceWriteOperator` takes
(``namespace``, ``mode``, ``stage_only``, ``txn_id``, ``flush_bytes``...) is an argument of
the decorator; the task's XCom is the write summary, never the data.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import DecoratedOperator, task_decorator_factory

from airflow_provider_lance import validation as v
from airflow_provider_lance.operators.write import LanceWriteOperator

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import TaskDecorator


class _LanceWriteDecoratedOperator(DecoratedOperator, LanceWriteOperator):
    """Runs the decorated function and writes what it returns (see the module docstring)."""

    template_fields: Sequence[str] = tuple(
        dict.fromkeys((*DecoratedOperator.template_fields, *LanceWriteOperator.template_fields))
    )
    template_fields_renderers = {
        **DecoratedOperator.template_fields_renderers,
        **LanceWriteOperator.template_fields_renderers,
    }
    custom_operator_name = "@task.lance_write"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            kwargs_to_upstream={
                "python_callable": python_callable,
                "op_args": op_args,
                "op_kwargs": op_kwargs,
            },
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )


def lance_write_task(
    python_callable: Callable[..., Any] | None = None, **kwargs: Any
) -> TaskDecorator:
    """Wrap a function returning Arrow data into a :class:`LanceWriteOperator` task.

    :param python_callable: the decorated function.
    :param kwargs: arguments of :class:`LanceWriteOperator` and :class:`BaseOperator`.
    """
    if kwargs.pop("multiple_outputs", None):
        raise v.OperatorArgumentTypeError(
            "@task.lance_write pushes one write summary: multiple_outputs is not taken"
        )
    # checked now: a decorated task that is only ever .expand()ed is built at run time
    cls = _LanceWriteDecoratedOperator
    task_id = kwargs.get("task_id") or getattr(python_callable, "__name__", None)
    v.run_checks(
        v.owner_name(cls, task_id), cls.argument_checks, kwargs, cls.deferred_for_arguments(False)
    )
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=False,
        decorated_operator_class=_LanceWriteDecoratedOperator,
        **kwargs,
    )
