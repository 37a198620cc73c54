"""``Remembered``, the LRU behind the caches of reads (parsed filters, prunes, plans, leaves
kept open): against a plain model of it, and from many threads at once."""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_lance.namespace.read.remembered import Remembered

KEYS = st.integers(0, 6)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("keep"), KEYS, st.integers(0, 5)),
        st.tuples(st.just("get"), KEYS, st.just(0)),
    ),
    max_size=60,
)


class Model:
    """What the LRU must do, written the plain way."""

    def __init__(self, entries: int, budget: int) -> None:
        self.entries, self.budget = entries, budget
        self.kept: OrderedDict[int, int] = OrderedDict()

    def keep(self, key: int, weight: int) -> None:
        if weight > self.budget:
            return
        self.kept.pop(key, None)
        self.kept[key] = weight
        while len(self.kept) > self.entries or sum(self.kept.values()) > self.budget:
            self.kept.popitem(last=False)

    def get(self, key: int) -> int | None:
        if key in self.kept:
            self.kept.move_to_end(key)
        return self.kept.get(key)


@given(entries=st.integers(1, 4), budget=st.integers(0, 8), ops=OPS)
def test_it_keeps_what_the_model_keeps(entries: int, budget: int, ops: list) -> None:
    lru: Remembered[int, int] = Remembered(entries, budget, weight=lambda w: w)
    model = Model(entries, budget)
    for op, key, weight in ops:
        if op == "keep":
            lru.keep(key, weight)
            model.keep(key, weight)
        else:
            assert lru.get(key) == model.get(key)
        assert lru.values() == list(model.kept.values())
        assert len(lru) == len(model.kept)
        assert all(k in lru for k in model.kept)


def test_get_or_make_makes_once_and_keeps_falsy_values() -> None:
    made: list[int] = []
    lru: Remembered[int, object] = Remembered(2)
    for _ in range(3):
        assert lru.get_or_make(1, lambda: made.append(1) or 0) == 0
        assert lru.get_or_make(2, lambda: made.append(2) or False) is False
    assert made == [1, 2]


def test_threads_at_once_stay_within_the_bounds() -> None:
    lru: Remembered[int, int] = Remembered(8, 20, weight=lambda w: w)

    def work(seed: int) -> None:
        for i in range(2_000):
            key = (seed * 7 + i) % 13
            lru.keep(key, key % 5)
            lru.get_or_make((key + 1) % 13, lambda k=key: k % 4)
            assert len(lru) <= 8

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(work, range(6)))  # a failure in a thread is raised here
    assert len(lru) <= 8
    assert sum(lru.values()) <= 20
