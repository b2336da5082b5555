"""DataLoader: the three data sources, collation, epochs, argument checks and the prefetch thread."""

from __future__ import annotations

import gc
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from datamount.readers import DataLoader

BATCH_SIZE = 4
IMAGE_SHAPE = (6,)


def _dataloader_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("datamount-dataloader")]


@pytest.fixture(autouse=True)
def no_thread_left() -> Iterator[None]:
    """Every test must end with no prefetch thread running."""
    yield
    gc.collect()
    assert _dataloader_threads() == []


def _image(index: int) -> np.ndarray:
    return np.full(IMAGE_SHAPE, index, dtype=np.float32)


def image_samples(count: int = 10) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for index in range(count):
        yield _image(index), np.array([index], dtype=np.int64)


def image_sample_lists() -> Iterator[list[tuple[np.ndarray, np.ndarray]]]:
    for start in range(0, 8, BATCH_SIZE):
        yield list(image_samples(start + BATCH_SIZE))[start:]


def image_batches() -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for start in range(0, 8, BATCH_SIZE):
        indices = np.arange(start, start + BATCH_SIZE)
        images = np.repeat(indices[:, None], IMAGE_SHAPE[0], axis=1).astype(np.float32)
        yield images, indices[:, None].astype(np.int64)


def _loader(**options: Any) -> DataLoader:
    return DataLoader.from_generator(capacity=2, **options)


@pytest.mark.parametrize(
    "set_source",
    [
        lambda loader: loader.set_sample_generator(image_samples, batch_size=BATCH_SIZE),
        lambda loader: loader.set_sample_list_generator(image_sample_lists),
        lambda loader: loader.set_batch_generator(image_batches),
    ],
    ids=["sample", "sample-list", "batch"],
)
def test_each_source_yields_the_same_stacked_batches(set_source: Any) -> None:
    loader = set_source(_loader())
    batches = list(loader())
    assert len(batches) == 2
    for number, (images, labels) in enumerate(batches):
        indices = np.arange(number * BATCH_SIZE, (number + 1) * BATCH_SIZE)
        assert images.dtype == np.float32 and images.shape == (BATCH_SIZE, *IMAGE_SHAPE)
        assert labels.dtype == np.int64 and labels.shape == (BATCH_SIZE, 1)
        np.testing.assert_array_equal(images[:, 0], indices)
        np.testing.assert_array_equal(labels[:, 0], indices)


def test_batch_generator_passes_arrays_through_unchanged() -> None:
    images = np.arange(12, dtype=np.int16).reshape(3, 4)

    def batches() -> Iterator[tuple[np.ndarray, list[int]]]:
        yield images, [1, 2, 3]

    [(got_images, got_labels)] = list(_loader().set_batch_generator(batches))
    assert got_images is images
    assert got_labels.dtype == np.int64
    np.testing.assert_array_equal(got_labels, [1, 2, 3])


@pytest.mark.parametrize(("drop_last", "sizes"), [(True, [4, 4]), (False, [4, 4, 2])], ids=["drop-last", "keep-last"])
def test_drop_last_decides_the_fate_of_the_short_batch(drop_last: bool, sizes: list[int]) -> None:
    loader = _loader().set_sample_generator(image_samples, batch_size=4, drop_last=drop_last)
    assert [len(labels) for _, labels in loader] == sizes


COLLATION_CASES = [
    pytest.param([np.ones(3, np.uint8), np.zeros(3, np.uint8)], np.uint8, (2, 3), id="equal-arrays-stack"),
    pytest.param([1, 2, 3], np.int64, (3,), id="ints-int64"),
    pytest.param([1.5, 2.0], np.float64, (2,), id="floats-float64"),
    pytest.param([True, False], np.bool_, (2,), id="bools-bool"),
    pytest.param([1, 2.5], np.float64, (2,), id="int-and-float-promote"),
    pytest.param([np.float32(1), np.float32(2)], np.float32, (2,), id="numpy-scalars-keep-dtype"),
    pytest.param([[1], [2]], np.int64, (2, 1), id="nested-lists-of-numbers"),
    pytest.param([np.datetime64("2024-01-01"), np.datetime64("2024-01-02")], "M8[D]", (2,), id="datetimes"),
]


@pytest.mark.parametrize(("values", "dtype", "shape"), COLLATION_CASES)
def test_columns_become_arrays_when_the_values_allow_it(values: list[Any], dtype: Any, shape: tuple) -> None:
    [[column]] = list(_loader().set_sample_list_generator(lambda: [[(value,) for value in values]]))
    assert isinstance(column, np.ndarray)
    assert column.dtype == np.dtype(dtype)
    assert column.shape == shape


LIST_CASES = [
    pytest.param([b"\x89PNG\x00", b"raw\x00\x00"], id="bytes-keep-trailing-nul"),
    pytest.param(["cat", "dog"], id="str"),
    pytest.param([np.ones(2), np.ones(3)], id="ragged-arrays"),
    pytest.param([np.ones(2, np.float32), np.ones(2, np.float64)], id="dtypes-differ-no-promotion"),
    pytest.param([[1], [1, 2]], id="ragged-lists"),
    pytest.param([None, 1], id="none"),
    pytest.param([1, "a"], id="number-and-str"),
    pytest.param([2**70, 1], id="int-beyond-int64"),
]


@pytest.mark.parametrize("values", LIST_CASES)
def test_other_columns_stay_lists_of_the_original_values(values: list[Any]) -> None:
    [[column]] = list(_loader().set_sample_list_generator(lambda: [[(value,) for value in values]]))
    assert type(column) is list
    assert len(column) == len(values)
    for got, expected in zip(column, values, strict=True):
        assert got is expected


@st.composite
def arrays_of_one_shape_and_dtype(draw: st.DrawFn) -> list[np.ndarray]:
    dtype = draw(hnp.scalar_dtypes())
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    return draw(st.lists(hnp.arrays(dtype, shape), min_size=1, max_size=5))


@settings(max_examples=30, deadline=None)
@given(arrays=arrays_of_one_shape_and_dtype())
def test_arrays_of_one_shape_and_dtype_stack_exactly(arrays: list[np.ndarray]) -> None:
    [[column]] = list(_loader().set_sample_list_generator(lambda: [[(array,) for array in arrays]]))
    expected = np.stack(arrays)
    assert column.dtype == expected.dtype and column.shape == expected.shape
    assert column.tobytes() == expected.tobytes()


class _Variable:
    """Stands for a Paddle feed variable: only its ``name`` matters."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize(
    ("feed_list", "keys"),
    [
        pytest.param(["image", "label"], ["image", "label"], id="names"),
        pytest.param([_Variable("image"), _Variable("label")], ["image", "label"], id="variables"),
        pytest.param(None, [0, 1], id="no-feed-list-indices"),
    ],
)
def test_return_list_false_gives_dicts(feed_list: list[Any] | None, keys: list[Any]) -> None:
    loader = _loader(feed_list=feed_list, return_list=False).set_batch_generator(image_batches)
    batches = list(loader)
    assert [list(batch) for batch in batches] == [keys, keys]
    np.testing.assert_array_equal(batches[1][keys[1]][:, 0], [4, 5, 6, 7])


def test_feed_list_must_match_the_number_of_columns() -> None:
    loader = _loader(feed_list=["image", "label", "weight"]).set_batch_generator(image_batches)
    with pytest.raises(ValueError, match=r"2 columns but feed_list names 3"):
        next(iter(loader))


def test_each_for_loop_is_one_epoch() -> None:
    calls = []

    def reader() -> Iterator[tuple[int]]:
        calls.append(1)
        yield from ((index,) for index in range(6))

    loader = _loader().set_sample_generator(reader, batch_size=3)
    first = [labels.tolist() for (labels,) in loader()]
    second = [labels.tolist() for (labels,) in loader]
    assert first == second == [[0, 1, 2], [3, 4, 5]]
    assert len(calls) == 2


@pytest.mark.timeout(30)
def test_a_new_epoch_ends_the_unfinished_one() -> None:
    loader = _loader().set_sample_generator(image_samples, batch_size=1)
    first = iter(loader)
    next(first)
    assert len(_dataloader_threads()) == 1
    second = iter(loader)
    assert len(_dataloader_threads()) == 1
    assert next(first, None) is None
    assert len(list(second)) == 10


@pytest.mark.timeout(30)
def test_prefetch_is_bounded_by_capacity() -> None:
    produced = []

    def batches() -> Iterator[tuple[list[int]]]:
        for index in range(100):
            produced.append(index)
            yield ([index],)

    loader = DataLoader.from_generator(capacity=3).set_batch_generator(batches)
    iterator = iter(loader)
    next(iterator)
    time.sleep(0.3)
    # consumed + ``capacity`` queued + one waiting to be queued
    assert 3 <= len(produced) <= 1 + 3 + 1
    iterator.close()


def failing_reader() -> Iterator[tuple[int]]:
    yield (1,)
    raise KeyError("sample 7 is missing")


@pytest.mark.timeout(30)
def test_reader_error_reaches_the_consumer_with_its_traceback() -> None:
    loader = _loader().set_sample_generator(failing_reader, batch_size=1)
    iterator = iter(loader)
    assert next(iterator)[0].tolist() == [1]
    with pytest.raises(KeyError, match="sample 7 is missing") as caught:
        next(iterator)
    text = "".join(traceback.format_exception(caught.value))
    assert "in failing_reader" in text
    assert next(iterator, None) is None


@pytest.mark.timeout(30)
def test_break_stops_the_thread_and_closes_the_reader() -> None:
    events = []

    def reader() -> Iterator[tuple[int]]:
        try:
            yield from ((index,) for index in range(1000))
        finally:
            events.append("closed")

    loader = _loader().set_sample_generator(reader, batch_size=2)
    for _ in loader:
        break
    assert _dataloader_threads() == []
    assert events == ["closed"]


@pytest.mark.timeout(30)
def test_error_in_the_loop_body_stops_the_thread() -> None:
    loader = _loader().set_sample_generator(image_samples, batch_size=1)
    with pytest.raises(ZeroDivisionError):
        for _ in loader:
            1 / 0  # noqa: B018
    assert _dataloader_threads() == []


@pytest.mark.timeout(30)
def test_close_and_context_manager_end_the_epoch_for_good() -> None:
    with _loader().set_sample_generator(image_samples, batch_size=1) as loader:
        iterator = iter(loader)
        next(iterator)
    assert _dataloader_threads() == []
    assert next(iterator, None) is None
    with pytest.raises(ValueError, match="closed"):
        iter(loader)


@pytest.mark.timeout(30)
def test_garbage_collected_loader_stops_its_thread() -> None:
    def start() -> None:
        loader = _loader().set_sample_generator(image_samples, batch_size=1)
        iterator = iter(loader)
        next(iterator)
        assert len(_dataloader_threads()) == 1

    start()
    gc.collect()
    assert _dataloader_threads() == []


ARGUMENT_ERRORS = [
    pytest.param(lambda: DataLoader.from_generator(), ValueError, "capacity is required", id="capacity-missing"),
    pytest.param(
        lambda: DataLoader.from_generator(capacity=0),
        ValueError,
        r"capacity \(.*\) must be at least 1, got 0",
        id="zero",
    ),
    pytest.param(lambda: DataLoader.from_generator(capacity=-2), ValueError, "got -2", id="negative"),
    pytest.param(
        lambda: DataLoader.from_generator(capacity=1.5), TypeError, "must be a whole number, got 1.5", id="float"
    ),
    pytest.param(
        lambda: DataLoader.from_generator(capacity=True), TypeError, "must be a whole number, got True", id="bool"
    ),
    pytest.param(
        lambda: _loader().set_sample_generator(image_samples, batch_size=0),
        ValueError,
        r"batch_size \(.*\) must be at least 1",
        id="batch-size-zero",
    ),
    pytest.param(lambda: _loader(iterable=False), ValueError, "drop iterable=False", id="iterable-false-not-supported"),
    pytest.param(
        lambda: _loader(mp_context="spawn"), ValueError, "only applies with use_multiprocess", id="mp-context"
    ),
    pytest.param(
        lambda: _loader(fallback_to_thread=True),
        ValueError,
        "only applies with use_multiprocess",
        id="fallback",
    ),
    pytest.param(lambda: _loader(use_multiprocess=True, mp_context="threads"), ValueError, "one of", id="bad-method"),
    pytest.param(lambda: _loader(feed_list="image"), TypeError, "list of names", id="feed-list-str"),
    pytest.param(lambda: _loader(feed_list=["a", "a"]), ValueError, "unique", id="feed-list-duplicates"),
    pytest.param(
        lambda: _loader().set_batch_generator(image_batches()),
        TypeError,
        r"not its result \(`reader\(\)`\)",
        id="generator-object-not-reader",
    ),
    pytest.param(lambda: iter(_loader()), RuntimeError, "call set_sample_generator", id="iterate-before-set"),
    pytest.param(
        lambda: _loader().set_batch_generator(image_batches).set_sample_list_generator(image_sample_lists),
        RuntimeError,
        r"already reads from a generator given to set_batch_generator\(\)",
        id="two-sources",
    ),
]


@pytest.mark.parametrize(("call", "error", "message"), ARGUMENT_ERRORS)
def test_arguments_are_checked_up_front(call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    ("samples", "error", "message"),
    [
        pytest.param([np.ones(2), np.ones(2)], TypeError, r"yield \(x,\)", id="bare-array-sample"),
        pytest.param([(1, 2), (1,)], ValueError, "sample 1 of a batch has 1 fields", id="widths-differ"),
    ],
)
def test_malformed_samples_are_reported(samples: list[Any], error: type[Exception], message: str) -> None:
    loader = _loader().set_sample_generator(lambda: iter(samples), batch_size=2)
    with pytest.raises(error, match=message):
        list(loader)


def test_malformed_batch_is_reported() -> None:
    loader = _loader().set_batch_generator(lambda: iter([np.ones((2, 3))]))
    with pytest.raises(TypeError, match="batch 0 is a ndarray"):
        list(loader)
