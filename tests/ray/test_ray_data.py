"""Ray Data reads and writes versions (``datamount.ray``), on the session's local Ray cluster: ``read_version`` yields
what ``reader()`` yields, checked as it checks; ``write_version`` commits one whole version or nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamount.datasets import catalog, layout
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from tests.datasets.layouts import LAYOUTS, ROWS, make_layout

ray_data = pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'datamount[ray]')")

from ray.exceptions import RayTaskError  # noqa: E402

from datamount.ray import read_version, write_version  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]


@pytest.fixture(autouse=True)
def ordered() -> Iterator[None]:
    """Ray Data keeps the blocks' order, and shows no progress bars."""
    context = ray_data.DataContext.get_current()
    saved = context.execution_options.preserve_order, context.enable_progress_bars
    context.execution_options.preserve_order, context.enable_progress_bars = True, False
    yield
    context.execution_options.preserve_order, context.enable_progress_bars = saved


def as_tuples(rows: list[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    return [tuple(row[column] for column in columns) for row in rows]


def same(found: list[tuple[Any, ...]], expected: list[tuple[Any, ...]]) -> bool:
    """Equal rows, numpy arrays compared by value, dtype and shape (their repr)."""
    return len(found) == len(expected) and all(repr(a) == repr(b) for a, b in zip(found, expected, strict=True))


@pytest.mark.parametrize("kind", LAYOUTS)
def test_read_version_yields_what_reader_yields(local_store: Store, tmp_path: Path, kind: str) -> None:
    name = make_layout(local_store, tmp_path, kind)
    columns = catalog.resolve(local_store, name).columns
    dataset = read_version(name, store=local_store, override_num_blocks=4)
    assert dataset.count() == ROWS
    assert same(as_tuples(dataset.take_all(), columns), list(reader(name, local_store)()))
    if kind != "table":  # the table has no splits
        train = read_version(name, store=local_store, split="train").take_all()
        assert same(as_tuples(train, columns), list(reader(name, local_store, split="train")()))
    chosen = [columns[-1], columns[0]]
    expected = [(row[-1], row[0]) for row in reader(name, local_store)()]
    assert same(as_tuples(read_version(name, store=local_store, columns=chosen).take_all(), chosen), expected)


@pytest.mark.parametrize("kind", ["image-packed", "image"])
def test_a_flipped_byte_fails_the_job_with_an_integrity_error(local_store: Store, tmp_path: Path, kind: str) -> None:
    name = make_layout(local_store, tmp_path, kind)
    manifest = catalog.resolve(local_store, name)
    if manifest.shards:
        path = layout.shard_path(name, manifest.shards[-1])
    else:
        path = layout.object_path(name, next(iter(manifest.files)).sha256)
    data = bytearray(local_store.read(path))
    data[len(data) // 2] ^= 0x01
    local_store.write(path, bytes(data))
    with pytest.raises(IntegrityError, match="damaged"):
        read_version(name, store=local_store).take_all()


def test_a_store_only_this_process_sees_is_refused(memory_store: Store, text_list: Path) -> None:
    from datamount.datasets.upload import upload

    upload(text_list, "pairs", store=memory_store)
    with pytest.raises(ValueError, match="in this process only"):
        read_version("pairs", store=memory_store)
    with pytest.raises(ValueError, match="in this process only"):
        write_version(ray_data.range(3), "copy", store=memory_store)


def rows_table(count: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "image": [bytes([i % 251]) * (100 + i % 50) for i in range(count)],
            "label": [f"label {i % 7}" for i in range(count)],
        }
    )


def shard_indexes(store: Store, name: str) -> list[int]:
    """The ``index`` column of every shard of ``name``'s latest version, in order."""
    manifest = catalog.resolve(store, name)
    return [
        value
        for shard in manifest.shards
        for value in pq.read_table(store.local_path(layout.shard_path(name, shard)), columns=["index"])
        .column("index")
        .to_pylist()
    ]


def test_write_version_then_reader_round_trip(local_store: Store) -> None:
    table = rows_table(500)
    dataset = ray_data.from_arrow(table).repartition(5)
    manifest = write_version(dataset, "written", store=local_store, row_group_bytes=10_000)
    assert (manifest.ref, manifest.kind.value, manifest.columns, manifest.rows) == (
        "written@1",
        "table",
        ["id", "image", "label"],
        500,
    )
    assert len(manifest.shards) >= 5  # each write task writes its own shards
    rows = sorted(reader("written", local_store)())
    assert rows == [tuple(row.values()) for row in table.to_pylist()]
    assert shard_indexes(local_store, "written") == list(range(500))  # each row's number in the version
    assert sorted(local_store.list("datasets/written/packs")) == sorted(
        layout.shard_path("written", shard) for shard in manifest.shards
    )
    assert as_tuples(read_version("written", store=local_store).take_all(), manifest.columns) == list(
        reader("written", local_store)()
    )


def test_tensors_and_one_block_keep_their_values_and_order(local_store: Store) -> None:
    items = [{"id": i, "pixels": np.full((2, 3), i, dtype=np.uint8), "score": i / 3} for i in range(40)]
    manifest = write_version(ray_data.from_items(items, override_num_blocks=1), "tensors", store=local_store)
    rows = list(reader("tensors", local_store)())
    assert manifest.columns == ["id", "pixels", "score"]
    assert same(rows, [(item["id"], item["pixels"], item["score"]) for item in items])


def test_a_write_whose_task_raises_commits_nothing_and_leaves_no_shard(local_store: Store) -> None:
    def fail_on_the_last_batch(batch: dict[str, Any]) -> dict[str, Any]:  # nested: Ray takes it by value
        if 499 in batch["id"]:
            raise RuntimeError("this batch cannot be made")
        return batch

    dataset = ray_data.from_arrow(rows_table(500)).repartition(5).map_batches(fail_on_the_last_batch)
    with pytest.raises(RayTaskError, match="this batch cannot be made"):  # Ray Data's UserCodeException
        write_version(dataset, "broken", store=local_store)
    assert catalog.versions(local_store, "broken") == []
    assert local_store.list("datasets/broken") == {}  # no shard, and the lock let go


def test_an_empty_dataset_makes_no_version(local_store: Store) -> None:
    with pytest.raises(ValueError, match="no rows"):
        write_version(ray_data.from_arrow(rows_table(0)), "empty", store=local_store)
    assert local_store.list("datasets/empty") == {}


def test_a_column_named_index_is_refused(local_store: Store) -> None:
    with pytest.raises(ValueError, match="kept for the row number"):
        write_version(ray_data.range(3).rename_columns({"id": "index"}), "numbered", store=local_store)
    assert local_store.list("datasets/numbered") == {}
