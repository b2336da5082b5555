"""The Paddle-compatible decorators that run in the consumer's thread: batch, shuffle, compose, chain,
map_readers, firstn and cache. Semantics follow Paddle's ``decorator_test.py``; the fixes are tested too."""

from __future__ import annotations

import collections
import functools
import operator
import pickle
import random
from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from datamount.readers import (
    ComposeNotAligned,
    batch,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    shuffle,
)

T = TypeVar("T")

FALSY_SAMPLES: list[object] = [0, "", (), None, b"", False, [], 0.0]


def listed(samples: Sequence[T]) -> functools.partial[list[T]]:
    """A picklable reader over a fixed list of samples."""
    return functools.partial(list, samples)


class TrackedReader:
    """A reader that records how often it is called, how far it is read and how often it is closed."""

    def __init__(self, samples: list[object] | range) -> None:
        self.samples = samples
        self.calls = 0
        self.read = 0
        self.closed = 0

    def __call__(self) -> Iterator[object]:
        self.calls += 1
        return self._generate()

    def _generate(self) -> Iterator[object]:
        try:
            for sample in self.samples:
                self.read += 1
                yield sample
        finally:
            self.closed += 1


class ReaderFailure(Exception):
    pass


def fail_after(count: int) -> Iterator[int]:
    yield from range(count)
    raise ReaderFailure(f"failed after {count} samples")


def multiset(samples: list[object]) -> collections.Counter[str]:
    return collections.Counter(repr(sample) for sample in samples)


# ----------------------------------------------------------------------------------------------------- batch


@pytest.mark.parametrize(
    ("count", "drop_last", "expected"),
    [
        (10, False, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]),
        (10, True, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
        (9, False, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
        (2, True, []),
        (0, False, []),
    ],
    ids=["short-last", "drop-last", "exact", "all-dropped", "empty"],
)
def test_batch_groups_samples_in_order(count: int, drop_last: bool, expected: list[list[int]]) -> None:
    assert list(batch(listed(list(range(count))), 3, drop_last=drop_last)()) == expected


@pytest.mark.parametrize(
    ("size", "error"),
    [(0, ValueError), (-1, ValueError), (2.5, TypeError), ("3", TypeError), (None, TypeError), (True, TypeError)],
    ids=repr,
)
def test_batch_rejects_bad_batch_size_when_decorating(size: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="batch_size") as caught:
        batch(listed([1]), size)  # type: ignore[arg-type]
    assert caught.type is error


def test_batch_accepts_numpy_integer_size() -> None:
    assert list(batch(listed([1, 2, 3]), np.int64(2))()) == [[1, 2], [3]]


def test_batch_rejects_a_generator_in_place_of_a_reader() -> None:
    with pytest.raises(TypeError, match=r"not its result \(`reader\(\)`\)"):
        batch(iter([1, 2]), 2)


def test_batch_calls_upstream_only_when_iterated() -> None:
    upstream = TrackedReader(range(5))
    batches = batch(upstream, 2)()
    assert upstream.calls == 0
    assert next(batches) == [0, 1]
    assert upstream.calls == 1


@given(samples=st.lists(st.integers()), size=st.integers(1, 12), drop_last=st.booleans())
def test_batch_then_flatten_is_identity(samples: list[int], size: int, drop_last: bool) -> None:
    batches = list(batch(listed(samples), size, drop_last)())
    flat = [sample for chunk in batches for sample in chunk]
    kept = len(samples) - len(samples) % size if drop_last else len(samples)
    assert flat == samples[:kept]
    assert all(len(chunk) == size for chunk in batches[:-1])
    assert all(0 < len(chunk) <= size for chunk in batches)


# --------------------------------------------------------------------------------------------------- shuffle


@given(samples=st.lists(st.integers()), buf_size=st.integers(-2, 40), seed=st.integers(0, 2**64))
def test_shuffle_is_a_reproducible_permutation(samples: list[int], buf_size: int, seed: int) -> None:
    first, again = (
        shuffle(listed(samples), buf_size, seed=seed),
        shuffle(listed(samples), buf_size, seed=seed),
    )
    epochs = [list(first()), list(first())]
    assert [list(again()), list(again())] == epochs
    assert all(sorted(epoch) == sorted(samples) for epoch in epochs)


@given(count=st.integers(0, 200), buf_size=st.integers(2, 30), seed=st.integers(0, 1000))
def test_shuffle_moves_a_sample_at_most_buf_size_minus_one_places_earlier(count: int, buf_size: int, seed: int) -> None:
    output = list(shuffle(listed(list(range(count))), buf_size, seed=seed)())
    assert all(position >= sample - (buf_size - 1) for position, sample in enumerate(output))


@pytest.mark.parametrize("buf_size", [-1, 0, 1], ids=str)
def test_shuffle_with_buffer_of_one_or_less_keeps_order(buf_size: int) -> None:
    assert list(shuffle(listed(list(range(10))), buf_size)()) == list(range(10))


def test_shuffle_gives_each_epoch_its_own_order() -> None:
    reader = shuffle(listed(list(range(100))), 30, seed=5)
    assert list(reader()) != list(reader())


def test_shuffle_epoch_can_be_set_to_resume() -> None:
    original = shuffle(listed(list(range(50))), 10, seed=9)
    epochs = [list(original()) for _ in range(3)]
    resumed = shuffle(listed(list(range(50))), 10, seed=9)
    resumed.epoch = 2
    assert list(resumed()) == epochs[2]


def test_shuffle_without_seed_keeps_the_drawn_seed_to_repeat_a_run() -> None:
    unseeded = shuffle(listed(list(range(100))), 20)
    seed = unseeded.seed
    assert isinstance(seed, int)
    assert list(unseeded()) == list(shuffle(listed(list(range(100))), 20, seed=seed)())
    assert shuffle(listed([]), 20).seed != seed


def test_shuffle_neither_uses_nor_disturbs_the_global_rng() -> None:
    random.seed(1)
    state = random.getstate()
    first = list(shuffle(listed(list(range(100))), 10, seed=3)())
    assert random.getstate() == state
    random.seed(2)
    assert list(shuffle(listed(list(range(100))), 10, seed=3)()) == first


def test_shuffle_mixes_across_blocks_unlike_a_block_shuffle() -> None:
    output = list(shuffle(listed(list(range(100))), 10, seed=0)())
    assert any(position // 10 != sample // 10 for position, sample in enumerate(output))


def test_shuffle_draws_each_buffered_sample_uniformly() -> None:
    # The first output is drawn from the first buf_size samples: each comes out first a quarter of the time.
    reader = shuffle(listed(list(range(20))), 4, seed=11)
    firsts = collections.Counter(next(iter(reader())) for _ in range(4000))
    assert sorted(firsts) == [0, 1, 2, 3]
    assert all(850 < count < 1150 for count in firsts.values()), firsts


@pytest.mark.parametrize(("buf_size", "seed"), [("10", None), (10, "abc"), (10, 1.5)], ids=str)
def test_shuffle_rejects_non_integer_options(buf_size: object, seed: object) -> None:
    with pytest.raises(TypeError, match="must be a whole number"):
        shuffle(listed([1]), buf_size, seed=seed)


def test_shuffle_closes_upstream_when_stopped_early() -> None:
    upstream = TrackedReader(range(100))
    samples = shuffle(upstream, 10, seed=0)()
    next(samples)
    samples.close()
    assert upstream.closed == 1


# ------------------------------------------------------------------------------------------ compose and chain


def test_compose_splices_tuples_and_wraps_other_outputs() -> None:
    composed = compose(listed([(1, 2)]), listed([3]), listed([(4, 5)]), listed([[6, 7]]))
    assert list(composed()) == [(1, 2, 3, 4, 5, [6, 7])]


def test_compose_of_aligned_readers_zips_them() -> None:
    assert list(compose(listed(list(range(10))), listed(list(range(10))))()) == [(i, i) for i in range(10)]


def test_compose_raises_when_not_aligned_after_the_aligned_samples() -> None:
    composed = compose(chain(listed(list(range(10))), listed(list(range(10)))), listed(list(range(10))))
    seen = []
    with pytest.raises(ComposeNotAligned, match=r"reader\(s\) 1 ended after 10 samples"):
        seen.extend(composed())
    assert len(seen) == 10


def test_compose_without_alignment_check_stops_at_the_shortest() -> None:
    composed = compose(listed(list(range(20))), listed(list(range(10))), check_alignment=False)
    assert len(list(composed())) == 10


def test_compose_takes_none_samples_for_data_not_for_the_end() -> None:
    assert list(compose(listed([None, None]), listed([0, ""]))()) == [(None, 0), (None, "")]
    with pytest.raises(ComposeNotAligned):
        list(compose(listed([None]), listed([None, None]))())


def test_compose_keeps_numpy_arrays_as_single_fields() -> None:
    (row,) = compose(listed([np.arange(3)]), listed([np.zeros(2)]))()
    assert len(row) == 2
    np.testing.assert_array_equal(row[0], np.arange(3))


def test_compose_closes_every_upstream_when_one_ends_early() -> None:
    longer, shorter = TrackedReader(range(5)), TrackedReader(range(2))
    with pytest.raises(ComposeNotAligned):
        list(compose(longer, shorter)())
    assert (longer.closed, shorter.closed) == (1, 1)


@given(parts=st.lists(st.lists(st.integers(), max_size=20), max_size=6))
def test_chain_concatenates_and_adds_lengths(parts: list[list[int]]) -> None:
    chained = list(chain(*(listed(part) for part in parts))())
    assert len(chained) == sum(len(part) for part in parts)
    assert chained == [sample for part in parts for sample in part]


@given(length=st.integers(0, 30), width=st.integers(1, 4))
def test_compose_of_equal_length_readers_has_that_length(length: int, width: int) -> None:
    rows = list(compose(*(listed(list(range(length))) for _ in range(width)))())
    assert rows == [(i,) * width for i in range(length)]


def test_chain_calls_each_reader_only_when_it_is_reached() -> None:
    first, second = TrackedReader(range(2)), TrackedReader(range(2))
    samples = chain(first, second)()
    assert [next(samples), next(samples)] == [0, 1]
    assert second.calls == 0
    assert list(samples) == [0, 1]
    assert (first.closed, second.closed) == (1, 1)


# ------------------------------------------------------------------------------------- map, firstn and cache


def test_map_readers_applies_func_to_one_reader() -> None:
    table = {"h": 0, "i": 1}
    assert list(map_readers(table.__getitem__, listed(["h", "i"]))()) == [0, 1]


def test_map_readers_stops_at_the_shortest_and_closes_the_rest() -> None:
    longer = TrackedReader(range(100))
    assert list(map_readers(operator.sub, longer, listed([1, 1, 1]))()) == [-1, 0, 1]
    assert longer.closed == 1


def test_firstn_zero_never_calls_upstream() -> None:
    upstream = TrackedReader(range(10))
    assert list(firstn(upstream, 0)()) == []
    assert upstream.calls == 0


def test_firstn_reads_exactly_n_samples_then_closes_upstream() -> None:
    upstream = TrackedReader(range(10))
    assert list(firstn(upstream, 4)()) == [0, 1, 2, 3]
    assert (upstream.read, upstream.closed) == (4, 1)


def test_firstn_longer_than_the_reader_gives_everything() -> None:
    assert list(firstn(listed([1, 2]), 5)()) == [1, 2]


def test_firstn_rejects_negative_n() -> None:
    with pytest.raises(ValueError, match="n must be at least 0, got -1"):
        firstn(listed([1]), -1)


def test_cache_reads_upstream_once_and_only_when_first_iterated() -> None:
    upstream = TrackedReader(range(5))
    cached = cache(upstream)
    assert upstream.calls == 0
    assert [list(cached()) for _ in range(3)] == [list(range(5))] * 3
    assert upstream.calls == 1


def test_cache_does_not_keep_an_abandoned_first_pass() -> None:
    upstream = TrackedReader(range(10))
    cached = cache(upstream)
    for sample in cached():
        if sample == 2:
            break
    assert upstream.closed == 1
    assert list(cached()) == list(range(10))
    assert list(cached()) == list(range(10))
    assert upstream.calls == 2


def test_cache_does_not_keep_a_failed_first_pass() -> None:
    attempts = []

    def flaky() -> Iterator[int]:
        attempts.append(1)
        yield from range(3)
        if len(attempts) == 1:
            raise ReaderFailure("first pass fails")

    cached = cache(flaky)
    with pytest.raises(ReaderFailure):
        list(cached())
    assert list(cached()) == [0, 1, 2]
    assert list(cached()) == [0, 1, 2]
    assert len(attempts) == 2


def test_cache_pickles_with_its_samples() -> None:
    cached = cache(listed([1, 2, 3]))
    list(cached())
    copy = pickle.loads(pickle.dumps(cached))
    assert copy.samples == (1, 2, 3)
    assert list(copy()) == [1, 2, 3]


# ------------------------------------------------------------------------------------------------ all of them

PURE_DECORATORS = {
    "batch": lambda reader: batch(reader, 3),
    "shuffle": lambda reader: shuffle(reader, 4, seed=0),
    "chain": lambda reader: chain(reader, reader),
    "map_readers": lambda reader: map_readers(lambda sample: sample, reader),
    "firstn": lambda reader: firstn(reader, 100),
    "cache": cache,
}

FALSY_RUNS = {
    "batch": (lambda reader: [sample for chunk in batch(reader, 3)() for sample in chunk], 1),
    "shuffle": (lambda reader: list(shuffle(reader, 4, seed=0)()), 1),
    "chain": (lambda reader: list(chain(reader, reader)()), 2),
    "map_readers": (lambda reader: list(map_readers(lambda sample: sample, reader)()), 1),
    "firstn": (lambda reader: list(firstn(reader, 100)()), 1),
    "cache": (lambda reader: list(cache(reader)()), 1),
}


@pytest.mark.parametrize(("run", "copies"), FALSY_RUNS.values(), ids=FALSY_RUNS.keys())
def test_falsy_samples_are_data(run, copies: int) -> None:
    assert multiset(run(listed(FALSY_SAMPLES))) == multiset(FALSY_SAMPLES * copies)


@pytest.mark.parametrize("decorate", PURE_DECORATORS.values(), ids=PURE_DECORATORS.keys())
def test_errors_of_the_upstream_reader_propagate(decorate) -> None:
    with pytest.raises(ReaderFailure, match="failed after 5 samples"):
        list(decorate(functools.partial(fail_after, 5))())


def test_decorated_readers_survive_a_pickle_round_trip() -> None:
    source = functools.partial(range, 12)
    readers = [
        batch(source, 5),
        shuffle(source, 4, seed=2),
        compose(source, source),
        chain(source, source),
        map_readers(operator.neg, source),
        firstn(source, 3),
        cache(source),
    ]
    for reader in readers:
        assert list(pickle.loads(pickle.dumps(reader))()) == list(reader())
