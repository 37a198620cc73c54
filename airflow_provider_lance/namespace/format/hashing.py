"""The ``hash()`` partition function: xxhash64, seed 0, over a promotion-stable encoding.

Values are encoded canonically before hashing so that ``hash(5)`` is the same for an int32 and
an int64 column (type promotion must not move rows between buckets): signed integers as int64,
unsigned as uint64, floats as float64 (``-0.0`` as ``0.0``, one canonical NaN), date32/date64
as int64 days, timestamps as int64 microseconds since the epoch (UTC), all little-endian 8
bytes; strings as UTF-8 bytes, binary as raw bytes, booleans as one byte. The unsigned 64-bit
digest is reinterpreted as a two's-complement int64. NULL hashes to NULL.
Eight-byte inputs are hashed by a vectorised NumPy XXH64, others by ``xxhash``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from airflow_provider_lance.namespace.errors import ExpressionError

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_CANONICAL_NAN = np.uint64(0x7FF8000000000000)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh64_u64(lanes: np.ndarray) -> np.ndarray:
    """XXH64(seed=0) of each value's 8 little-endian bytes, vectorised (uint64 in, uint64 out)."""
    lanes = lanes.astype(np.uint64, copy=False)
    with np.errstate(over="ignore"):
        k1 = _rotl(lanes * _P2, 31) * _P1
        h = (_P5 + np.uint64(8)) ^ k1
        h = _rotl(h, 27) * _P1 + _P4
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def hashable_type(dtype: pa.DataType) -> bool:
    """Whether ``hash()`` is defined for values of this type."""
    t = pa.types
    tests = [t.is_integer, t.is_floating, t.is_date, t.is_timestamp, t.is_string, t.is_boolean]
    tests += [t.is_large_string, t.is_binary, t.is_large_binary, t.is_fixed_size_binary, t.is_null]
    return any(test(dtype) for test in tests) or dtype in (pa.string_view(), pa.binary_view())


def _lanes(arr: pa.Array) -> np.ndarray | None:
    """The canonical 8-byte lane of every value, or None for variable-length types."""
    dtype = arr.type
    if pa.types.is_integer(dtype):
        wide = pa.int64() if pa.types.is_signed_integer(dtype) else pa.uint64()
        return np.asarray(pc.fill_null(arr.cast(wide), 0)).view(np.uint64)
    if pa.types.is_floating(dtype):
        values = np.asarray(pc.fill_null(arr.cast(pa.float64()), 0.0)).copy()
        values[values == 0.0] = 0.0  # folds -0.0 into 0.0
        bits = values.view(np.uint64).copy()
        bits[np.isnan(values)] = _CANONICAL_NAN
        return bits
    if pa.types.is_date(dtype):
        days = arr.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
        return np.asarray(pc.fill_null(days, 0)).view(np.uint64)
    if pa.types.is_timestamp(dtype):
        raw = np.asarray(pc.fill_null(arr.cast(pa.int64()), 0))
        scale = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 1}[dtype.unit]
        micros = raw * np.int64(scale) if dtype.unit != "ns" else np.floor_divide(raw, 1_000)
        return micros.astype(np.int64).view(np.uint64)
    return None


def hash_array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``hash()`` of every value of ``arr`` as an int64 array (NULL stays NULL)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    dtype = arr.type
    if pa.types.is_dictionary(dtype):
        arr = arr.cast(dtype.value_type)
        dtype = arr.type
    if not hashable_type(dtype):
        raise ExpressionError(f"hash() is not defined for values of type {dtype}")
    if pa.types.is_null(dtype):
        return pa.nulls(len(arr), pa.int64())
    validity = arr.is_valid()
    lanes = _lanes(arr)
    if lanes is not None:
        digests = xxh64_u64(lanes).view(np.int64)
    elif pa.types.is_boolean(dtype):
        table = np.array([xxhash.xxh64_intdigest(bytes([b])) for b in (0, 1)], dtype=np.uint64)
        digests = table[np.asarray(pc.fill_null(arr, False)).astype(np.int64)].view(np.int64)
    else:
        if dtype == pa.string_view():
            arr = arr.cast(pa.utf8())
        elif dtype == pa.binary_view():
            arr = arr.cast(pa.binary())
        values = arr.to_pylist()
        out = np.zeros(len(values), dtype=np.uint64)
        for i, v in enumerate(values):
            if v is not None:
                out[i] = xxhash.xxh64_intdigest(v.encode("utf-8") if isinstance(v, str) else v)
        digests = out.view(np.int64)
    return pa.array(digests, type=pa.int64(), mask=~np.asarray(validity))
