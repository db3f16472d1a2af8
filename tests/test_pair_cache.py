"""The lake's pair cache: each (query, row) vector is computed once, read back across instances, and
dropped when the model or nodes behind it change."""

from __future__ import annotations

import numpy as np

from graphlake.warehouse.pair_cache import FOLDER, PairCache


class Counting:
    """A stand-in encoder: a row's vector is a function of (query, row), and every call is recorded."""

    def __init__(self, query: str) -> None:
        self.query, self.calls = query, []

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        self.calls.append(list(rows))
        return np.stack([np.full(4, len(self.query) * 1000 + r, dtype=np.float32) for r in rows])


def test_each_pair_is_encoded_once_and_read_back_in_the_asked_order(tmp_path):
    cache = PairCache(tmp_path, "demo", "stamp-1")
    encode = Counting("what flooded the harbour")
    first = cache.features(encode.query, np.array([5, 2, 9]), encode)
    again = cache.features(encode.query, np.array([9, 7, 2, 7]), encode)
    assert encode.calls == [[5, 2, 9], [7]]  # only the new row, once although asked twice
    np.testing.assert_array_equal(first, encode(np.array([5, 2, 9])))
    np.testing.assert_array_equal(again, encode(np.array([9, 7, 2, 7])))
    assert (cache.hits, cache.misses) == (3, 4)
    other = Counting("another query")  # another query shares nothing
    cache.features(other.query, np.array([5]), other)
    assert other.calls == [[5]]


def test_the_cache_outlives_the_process_and_a_new_stamp_drops_it(tmp_path):
    encode = Counting("q")
    PairCache(tmp_path, "demo", "stamp-1").features("q", np.array([1, 2]), encode)
    reopened = PairCache(tmp_path, "demo", "stamp-1")
    reopened.features("q", np.array([2, 1]), encode)
    assert len(encode.calls) == 1 and reopened.hits == 2
    PairCache(tmp_path, "other", "stamp-1").features("q", np.array([1]), encode)  # corpora are apart
    retrained = PairCache(tmp_path, "demo", "stamp-2")
    retrained.features("q", np.array([1, 2]), encode)
    assert retrained.misses == 2
    assert sorted(p.name for p in (tmp_path / FOLDER / "demo").iterdir()) == ["stamp-2"]
    assert (tmp_path / FOLDER / "other" / "stamp-1").is_dir()
    assert not list((tmp_path / FOLDER).rglob("*.tmp"))
