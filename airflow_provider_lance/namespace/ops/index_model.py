"""One vector index model (IVF centroids, and a PQ codebook for the PQ types) trained once
across the partitions of an index and used by every leaf's index: one training instead of
one per leaf, a new partition indexed without training, and PQ distances comparable across
partitions. Saved as a JSON file under ``_index_models/`` that the declaration names.
"""

from __future__ import annotations

import base64
import math
import statistics
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.indices import IndicesBuilder

from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage


@dataclass(frozen=True)
class ModelSpec:
    """What a model is trained for: the index's name, type and pylance parameters."""

    name: str
    index_type: str
    params: Mapping[str, Any]


#: The root's directory of shared models (not a leaf: the orphan sweep leaves it alone).
MODEL_DIR = "_index_models"
#: IVF types whose leaves can take given centroids (IVF_RQ pins a rotation instead).
_SHARED = frozenset("IVF_FLAT IVF_PQ IVF_SQ IVF_HNSW_FLAT IVF_HNSW_PQ IVF_HNSW_SQ".split())  # noqa: SIM905
_CODEBOOK = frozenset({"IVF_PQ", "IVF_HNSW_PQ"})
#: Lance's defaults: rows per IVF partition (``lance.util``), samples per centroid.
_TARGET_PARTITION_SIZE = 8192
_SAMPLE_RATE = 256
#: Arguments a leaf build takes from the model instead of the declaration.
_FROM_MODEL = ("num_partitions", "target_partition_size", "num_sub_vectors", "num_bits")


def shares_model(index_type: str) -> bool:
    return index_type in _SHARED


@dataclass(frozen=True)
class SharedModel:
    """IVF centroids (one vector per partition) and, for PQ types, the PQ codebook."""

    centroids: pa.FixedSizeListArray
    codebook: pa.FixedSizeListArray | None = None
    num_sub_vectors: int | None = None
    num_bits: int = 8

    def save(self, storage: Storage, name: str, before: Callable[[str], None] | None = None) -> str:
        """Write it under :data:`MODEL_DIR`; its root-relative path (given to ``before``
        first: the build records it)."""
        path = f"{MODEL_DIR}/{name}-{uuid.uuid4().hex[:12]}.json"
        if before is not None:
            before(path)
        doc = {
            "centroids": _encode(self.centroids),
            "codebook": None if self.codebook is None else _encode(self.codebook),
            "num_sub_vectors": self.num_sub_vectors,
            "num_bits": self.num_bits,
        }
        storage.put_json(path, doc)
        return path

    @classmethod
    def load(cls, storage: Storage, path: str) -> SharedModel:
        doc = storage.get_json(path)
        codebook = doc.get("codebook")
        return cls(
            _decode(doc["centroids"]),
            None if codebook is None else _decode(codebook),
            doc.get("num_sub_vectors"),
            int(doc.get("num_bits", 8)),
        )


def _encode(vectors: pa.FixedSizeListArray) -> dict[str, Any]:
    values = np.asarray(vectors.flatten().to_numpy(zero_copy_only=False), dtype="<f4")
    return {"dim": vectors.type.list_size, "f32": base64.b64encode(values.tobytes()).decode()}


def _decode(doc: Mapping[str, Any]) -> pa.FixedSizeListArray:
    values = np.frombuffer(base64.b64decode(doc["f32"]), dtype="<f4")
    return pa.FixedSizeListArray.from_arrays(pa.array(values), int(doc["dim"]))


def model_arguments(
    params: Mapping[str, Any], model: SharedModel, index_type: str
) -> dict[str, Any]:
    """The leaf build's arguments with the model's in place of the training ones."""
    out = {k: v for k, v in params.items() if k not in _FROM_MODEL}
    out["ivf_centroids"] = model.centroids
    if model.codebook is not None and index_type in _CODEBOOK:
        out["pq_codebook"] = model.codebook
        out["num_sub_vectors"] = model.num_sub_vectors
    return out


def as_vectors(value: Any, what: str) -> pa.FixedSizeListArray:
    """A caller's ``ivf_centroids``/``pq_codebook`` (2-D numpy or fixed-size lists)."""
    if isinstance(value, pa.FixedSizeListArray):
        return value
    array = np.asarray(value, dtype="float32")
    if array.ndim != 2 or 0 in array.shape:
        raise InvalidArgumentError(f"{what} must be a 2-D array (vectors x dimension)")
    return pa.FixedSizeListArray.from_arrays(pa.array(array.reshape(-1)), array.shape[1])


def train_model(
    storage: Storage,
    state: NamespaceState,
    declaration: ModelSpec,
    column: str,
    partitions: Sequence[Partition],
    given: Mapping[str, Any] | None = None,
    before: Callable[[str], None] | None = None,
) -> str | None:
    """Train the model of ``declaration`` on a sample of ``partitions`` (or take the
    caller's ``given`` centroids and codebook), save it; its path (None: no rows yet),
    given to ``before`` ahead of the write."""
    params = declaration.params
    if given:
        centroids = as_vectors(given["ivf_centroids"], "ivf_centroids")
        codebook = given.get("pq_codebook")
        book = None if codebook is None else as_vectors(codebook, "pq_codebook")
        subs = params.get("num_sub_vectors")
        model = SharedModel(centroids, book, subs, int(params.get("num_bits", 8)))
        return model.save(storage, declaration.name, before)
    found = _sample(storage, state, column, partitions, declaration)
    if found is None:
        return None
    return _train(*found, declaration).save(storage, declaration.name, before)


def _num_partitions(params: Mapping[str, Any], rows: Sequence[int]) -> int:
    """The caller's ``num_partitions``, else Lance's default for the median leaf."""
    given = params.get("num_partitions")
    if given is not None:
        return int(given)
    size = int(params.get("target_partition_size") or _TARGET_PARTITION_SIZE)
    return min(max(1, int(statistics.median(rows)) // size), 4096)


def _sample(
    storage: Storage,
    state: NamespaceState,
    column: str,
    partitions: Sequence[Partition],
    declaration: ModelSpec,
) -> tuple[pa.Table, int] | None:
    """Vectors drawn from every partition in proportion to its rows, and the number of
    IVF partitions (None: no rows)."""

    def open_leaf(p: Partition) -> tuple[lance.LanceDataset, str | None, int]:
        leaf = storage.table(p.location, p.read_version)
        source = state.schema.read_plan(leaf.schema, [column]).sources[column]
        return leaf, source, (int(leaf.count_rows()) if source is not None else 0)

    leaves = [x for x in storage.map(open_leaf, list(partitions)) if x[2] > 0]
    if not leaves:
        return None
    rows = [n for _, _, n in leaves]
    total = sum(rows)
    k = _num_partitions(declaration.params, rows)
    bits = int(declaration.params.get("num_bits", 8))
    wanted = k * _SAMPLE_RATE
    if declaration.index_type in _CODEBOOK:
        wanted = max(wanted, (2**bits) * _SAMPLE_RATE)
    wanted = min(wanted, total)

    def draw(item: tuple[lance.LanceDataset, str | None, int]) -> pa.Table:
        leaf, source, n = item
        assert source is not None
        take = min(n, math.ceil(wanted * n / total))
        table = leaf.sample(take, columns=[source])
        vectors = table.column(source)
        return pa.table({"vector": pc.drop_null(vectors)})

    return pa.concat_tables(storage.map(draw, leaves)), k


def _train(sample: pa.Table, k: int, declaration: ModelSpec) -> SharedModel:
    params = declaration.params
    n = sample.num_rows
    metric = str(params.get("metric", "L2")).lower()
    bits = int(params.get("num_bits", 8))
    with tempfile.TemporaryDirectory(prefix="lance-ns-model-") as tmp:
        ds = lance.write_dataset(sample, tmp)
        builder = IndicesBuilder(ds, "vector")
        try:
            ivf = builder.train_ivf(k, distance_type=metric, sample_rate=_rate(n, k))
            if declaration.index_type not in _CODEBOOK:
                return SharedModel(ivf.centroids)
            pq = builder.train_pq(
                ivf, params.get("num_sub_vectors"), sample_rate=_rate(n, 2**bits), num_bits=bits
            )
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(
                f"training the shared model of index {declaration.name!r} failed: "
                f"{str(exc).splitlines()[0]} (sampled {n} vectors); pass other parameters, "
                "or shared_model=False to train each partition's model on its own rows"
            ) from exc
    return SharedModel(ivf.centroids, pq.codebook, pq.num_subvectors, bits)


def _rate(rows: int, clusters: int) -> int:
    """Samples per cluster: Lance's default where the sample has enough rows."""
    return max(2, min(_SAMPLE_RATE, rows // max(clusters, 1)))
