"""Leaf work in parallel (``Storage.map`` / ``Storage.ahead``): bounded, ordered, errors
raised after every call finished, nested calls inline, no threads left behind by handles."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import InvalidArgumentError, PartitionedNamespace
from airflow_provider_lance.namespace.io.storage import Storage, default_concurrency
from tests.support import BY_PART, TAGGED, tagged_rows


def test_default_concurrency_suits_the_store() -> None:
    assert default_concurrency("/data/ns") == default_concurrency("file:///data/ns") == 8
    assert default_concurrency("s3://bucket/ns") == default_concurrency("gs://b/ns") == 32
    assert Storage("s3://bucket/ns", concurrency=3).concurrency == 3
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        Storage("/data/ns", concurrency=0)


def test_map_runs_at_most_concurrency_calls_at_once_and_keeps_the_order() -> None:
    storage = Storage("/data/ns", concurrency=3)
    running, peak, lock = 0, 0, threading.Lock()

    def call(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return i * i

    assert storage.map(call, list(range(12))) == [i * i for i in range(12)]
    assert peak == 3


def test_map_raises_the_first_error_after_every_call_finished() -> None:
    storage = Storage("/data/ns", concurrency=4)
    finished: list[int] = []

    def call(i: int) -> int:
        if i == 1:
            raise ValueError("boom")
        time.sleep(0.05)
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="boom"):
        storage.map(call, list(range(6)))
    assert sorted(finished) == [0, 2, 3, 4, 5]  # nothing still runs when the caller cleans up


def test_map_raises_the_error_of_the_first_failed_item_not_of_the_first_to_fail() -> None:
    storage = Storage("/data/ns", concurrency=4)

    def call(i: int) -> int:
        if i == 1:
            time.sleep(0.1)
            raise ValueError("one")
        if i == 3:
            raise ValueError("three")
        return i

    with pytest.raises(ValueError, match="one"):
        storage.map(call, list(range(6)))


def test_nested_map_runs_inline_instead_of_waiting_for_its_own_threads() -> None:
    storage = Storage("/data/ns", concurrency=2)

    def outer(i: int) -> list[int]:
        return storage.map(lambda j: i * 10 + j, [0, 1, 2])

    assert storage.map(outer, [1, 2, 3, 4]) == [
        [10, 11, 12],
        [20, 21, 22],
        [30, 31, 32],
        [40, 41, 42],
    ]


def test_ahead_streams_in_order_with_a_bounded_window() -> None:
    storage = Storage("/data/ns", concurrency=2)
    started: list[int] = []

    def call(i: int) -> int:
        started.append(i)
        return i

    stream = storage.ahead(call, range(100))
    assert next(stream) == 0
    time.sleep(0.05)
    assert len(started) <= 3  # the one consumed and at most two ahead
    assert list(stream) == list(range(1, 100))
    stream.close()


def test_handles_opened_per_task_leave_no_threads_behind(root: Path) -> None:
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(tagged_rows("warm", [1, 2, 3], 2, first_id=0))
    before = threading.active_count()
    for i in range(20):
        handle = PartitionedNamespace.open(ns.uri)
        handle.write(tagged_rows("t", [1, 2, 3], 1, first_id=100 + 3 * i))
        assert handle.to_table().num_rows == 6 + 3 * (i + 1)
    assert threading.active_count() <= before + 8  # one shared pool at most
