"""``reader(..., zero_copy=True)``: a packed version's raw values are read-only memoryviews into the decoded row
group, equal to the bytes the default reader yields, with no copy of their own; an unpacked version yields the bytes
each read returned."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets.arrow_codec import column_decoder
from datamount.readers import reader
from datamount.storage import Store
from tests.generated import PackedImages, SharedDatasets

IMAGES = PackedImages("views", count=40, size=900, shard_bytes=16_000, row_group_bytes=4_000)


def test_packed_values_are_views_into_their_row_group(shared_store: Store, shared_datasets: SharedDatasets) -> None:
    dataset = shared_datasets.packed(shared_store, IMAGES)
    samples = reader(dataset.name, shared_store, zero_copy=True)
    rows = list(samples())
    assert all(isinstance(image, memoryview) and image.readonly for image, *_ in rows)
    assert [(bytes(image), *rest) for image, *rest in rows] == dataset.rows
    # Views of one row group share its buffer: no value was copied out of it.
    buffers = {id(image.obj) for image, *_ in rows}
    assert len(buffers) < len(rows) / 2
    image, *rest = samples[7]
    assert isinstance(image, memoryview) and (bytes(image), *rest) == dataset.rows[7]
    assert all(isinstance(image, bytes) for image, *_ in reader(dataset.name, shared_store)())


def test_unpacked_values_are_the_bytes_read(shared_store: Store, shared_datasets: SharedDatasets) -> None:
    dataset = shared_datasets.packed(shared_store, IMAGES)
    rows = list(reader(dataset.name, shared_store, use_shards=False, zero_copy=True)())
    assert rows == dataset.rows and all(type(image) is bytes for image, *_ in rows)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30),
    large=st.booleans(),
    start=st.integers(0, 30),
    length=st.integers(0, 30),
)
def test_binary_views_equal_to_pylist_on_any_slice(
    values: list[bytes | None], large: bool, start: int, length: int
) -> None:
    """Any binary array (with nulls, empty values, large offsets, a slice of another) decodes to the same values."""
    field = pa.field("v", pa.large_binary() if large else pa.binary())
    array = pa.array(values, type=field.type).slice(min(start, len(values)), length)
    views = column_decoder(field, writable=False, views=True)(array)
    assert [None if view is None else bytes(view) for view in views] == array.to_pylist()
    assert all(view is None or (isinstance(view, memoryview) and view.readonly) for view in views)


def test_zero_copy_must_be_a_boolean(shared_store: Store, shared_datasets: SharedDatasets) -> None:
    dataset = shared_datasets.packed(shared_store, IMAGES)
    with pytest.raises(TypeError, match="zero_copy"):
        reader(dataset.name, shared_store, zero_copy="yes")  # type: ignore[arg-type]
