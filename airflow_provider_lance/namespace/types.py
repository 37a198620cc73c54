"""Types of the public API's arguments: write modes and the data a write accepts (no
PyArrow at import: Airflow operators name the modes at DAG parse).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Protocol, Union, get_args

if TYPE_CHECKING:
    import pyarrow as pa

#: ``append`` adds rows; ``overwrite`` is a *dynamic partition overwrite*: the partitions
#: the rows fall into are replaced, every other one stays.
WriteMode = Literal["append", "overwrite"]
MODES: tuple[str, ...] = get_args(WriteMode)


class ArrowStreamExportable(Protocol):
    """Anything that exports an Arrow C stream (``__arrow_c_stream__``): pyarrow tables and
    readers, polars DataFrames, DuckDB results, pandas through pyarrow, nanoarrow..."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...


class ArrowArrayExportable(Protocol):
    """Anything that exports one Arrow C array of structs (``__arrow_c_array__``), e.g. a
    record batch of another Arrow library."""

    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[object, object]: ...


#: What ``write`` and ``Transaction.stage`` take: any Arrow-exportable object, or an
#: iterable of pyarrow tables or record batches (streamed: never collected whole).
ArrowData = Union[
    "pa.Table",
    "pa.RecordBatch",
    "pa.RecordBatchReader",
    ArrowStreamExportable,
    ArrowArrayExportable,
    Iterable[Union["pa.Table", "pa.RecordBatch"]],
]
