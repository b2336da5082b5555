"""``open_litdata``: datasets written by ``litdata.optimize`` read, sample for sample, as litdata's own
``StreamingDataset`` yields them (tuples, dict samples it keeps as Arrow rows, numpy leaves, each way it compresses),
from a folder and from moto's S3; ``skip`` resumes exactly; a broken offsets table and a truncated chunk are refused,
naming the chunk and the sample.

litdata's reader is given a copy of each folder: it decompresses chunks into the folder it reads.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets.imports import import_dataset, packed_rows
from datamount.datasets.imports.litdata import LitdataSource, open_litdata
from datamount.datasets.imports.location import locate
from datamount.datasets.imports.mds import INDEX
from datamount.datasets.imports.source import BATCH_ROWS, SOURCE_ENCODING, SourceError
from datamount.datasets.manifest import Kind
from datamount.readers import reader
from datamount.storage import Store
from tests.datasets.imports.killing import killed_then_resumed
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

litdata = pytest.importorskip("litdata", reason="litdata (and the torch it needs) is not installed")


def pair(row: int) -> tuple[bytes, str]:
    return bytes([row % 256]) * (row * 7 % 50), f"label {row} é"


def record(row: int) -> dict[str, Any]:
    return {
        "image": bytes([row % 256]) * (row % 40),
        "label": row,
        "score": row / 3,
        "name": f"n{row}",
        "ok": row % 2 == 0,
        "tags": [f"t{tag}" for tag in range(row % 3)],
        "meta": {"a": row, "b": "x" if row % 2 else None},
    }


def array(row: int) -> dict[str, Any]:
    return {"x": np.arange(row % 5, dtype=np.int32) * row, "n": row, "s": f"s{row}"}


#: name: (sample, rows, optimize's options)
DATASETS: dict[str, tuple[Callable[[int], Any], int, dict[str, Any]]] = {
    "pairs": (pair, 120, {"chunk_bytes": 1500}),
    "records": (record, 300, {"chunk_bytes": 6000}),
    "arrays": (array, 100, {"chunk_bytes": 1000}),
    "pairs-zstd": (pair, 100, {"chunk_bytes": 1000, "compression": "zstd"}),
    "pairs-zstd-chunk": (pair, 100, {"chunk_bytes": 1000, "compression": "zstd", "compression_level": "chunk"}),
    "arrays-zstd-batch": (array, 600, {"chunk_bytes": 10000, "compression": "zstd"}),
    "arrays-zstd-sample": (array, 100, {"chunk_bytes": 1000, "compression": "zstd", "compression_level": "sample"}),
    "records-zstd": (record, 100, {"chunk_bytes": 2000, "compression": "zstd"}),
}


@contextlib.contextmanager
def start_method_kept() -> Iterator[None]:
    """The process's multiprocessing start method as it was, after ``litdata.optimize`` forces its own (``spawn``)
    on it: later tests in this process (a memory store read in forked DataLoader workers) rely on the default."""
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The folder of dataset ``name`` of :data:`DATASETS`, written by ``litdata.optimize`` the first time it is
    asked for."""
    folders: dict[str, Path] = {}

    def folder(name: str) -> Path:
        if name not in folders:
            sample, rows, options = DATASETS[name]
            out = tmp_path_factory.mktemp("litdata") / name
            with start_method_kept():
                litdata.optimize(sample, list(range(rows)), str(out), num_workers=1, **options)
            folders[name] = out
        return folders[name]

    return folder


def plain(value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, np.ndarray):
        return value.tobytes()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def litdata_reads(folder: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """What litdata's own reader yields from (a copy of) ``folder``: a tuple's items under ``0``, ``1``..."""
    copy = shutil.copytree(folder, tmp_path / f"copy-{folder.name}")
    samples = []
    for sample in litdata.StreamingDataset(input_dir=str(copy), shuffle=False):
        value = plain(sample)
        samples.append({str(at): item for at, item in enumerate(value)} if isinstance(value, tuple) else value)
    return samples


def rows(source: LitdataSource) -> list[dict[str, Any]]:
    out = []
    for shard in range(len(source.shards)):
        for batch in source.batches(shard):
            assert batch.schema == source.schema and batch.num_rows <= BATCH_ROWS
            out += batch.to_pylist()
    return out


@pytest.mark.parametrize("name", [name for name in DATASETS if name != "pairs-zstd"])
def test_it_reads_as_litdata_reads_it(name: str, written: Callable[[str], Path], tmp_path: Path) -> None:
    folder = written(name)
    source = open_litdata(locate(folder))
    assert rows(source) == litdata_reads(folder, tmp_path)
    assert sum(shard.rows or 0 for shard in source.shards) == DATASETS[name][1] and len(source.shards) > 1


def test_tuples_litdata_left_unframed_read_as_written(written: Callable[[str], Path], tmp_path: Path) -> None:
    """Under ``compression="zstd"`` litdata 0.2.76 writes tuple samples unframed and its own reader then refuses
    them (its index says "batch"): the rows are checked all the same, and equal what was written."""
    folder = written("pairs-zstd")
    with pytest.raises(RuntimeError, match="missing LDFZ01 magic"):
        litdata_reads(folder, tmp_path)
    expected = [dict(zip(("0", "1"), pair(row), strict=True)) for row in range(DATASETS["pairs-zstd"][1])]
    assert rows(open_litdata(locate(folder))) == expected


def test_columns_and_types(written: Callable[[str], Path]) -> None:
    pairs = open_litdata(locate(written("pairs"))).schema
    assert [(field.name, str(field.type)) for field in pairs] == [("0", "binary"), ("1", "string")]
    records = open_litdata(locate(written("records") / "index.json")).schema
    assert records.names == ["image", "label", "score", "name", "ok", "tags", "meta"]
    assert str(records.field("tags").type) == "list<item: string>"
    arrays = open_litdata(locate(written("arrays"))).schema
    assert arrays.names == ["x", "n", "s"] and arrays.field("x").metadata == {SOURCE_ENCODING: b"no_header_numpy:2"}


@pytest.mark.s3
def test_the_same_sources_on_s3(
    s3_server: S3Server, s3_store: Store, written: Callable[[str], Path], tmp_path: Path
) -> None:
    options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    for name in ("pairs", "records", "pairs-zstd-chunk", "arrays-zstd-batch"):
        for path in written(name).iterdir():
            s3_store.write(f"{name}/{path.name}", path.read_bytes())
        source = open_litdata(locate(s3_store.url_for(name), options))
        assert rows(source) == litdata_reads(written(name), tmp_path), name


@pytest.mark.parametrize("name", ["pairs", "records", "arrays-zstd-batch", "pairs-zstd-chunk"])
def test_skip_resumes_exactly(name: str, written: Callable[[str], Path]) -> None:
    source = open_litdata(locate(written(name)))
    every = [
        [row for batch in source.batches(shard) for row in batch.to_pylist()] for shard in range(len(source.shards))
    ]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def resumes(data: st.DataObject) -> None:
        shard = data.draw(st.integers(0, len(source.shards) - 1))
        skip = data.draw(st.integers(0, len(every[shard]) + 1))
        assert [row for batch in source.batches(shard, skip) for row in batch.to_pylist()] == every[shard][skip:]

    resumes()


def test_batches_are_cut_by_rows_and_bytes() -> None:
    offsets = np.concatenate(([0], np.cumsum(np.full(3000, 10)), [30000 + packed_rows.BATCH_BYTES + 1]))
    cut = list(packed_rows.spans(offsets, 5))
    assert cut[0] == (5, 5 + BATCH_ROWS) and cut[-2:] == [(2053, 3000), (3000, 3001)]


def damaged_copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "damaged"))


def offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data)
    return list(struct.unpack_from(f"<{count + 1}I", data, 4))


def refusal(folder: Path) -> SourceError:
    source = open_litdata(locate(folder))
    with pytest.raises(SourceError) as raised:
        for shard in range(len(source.shards)):
            for _ in source.batches(shard):
                pass
    return raised.value


def test_a_broken_offsets_table_names_the_chunk_and_sample(written: Callable[[str], Path], tmp_path: Path) -> None:
    chunk = damaged_copy(written("pairs"), tmp_path) / "chunk-0-1.bin"
    data = bytearray(chunk.read_bytes())
    struct.pack_into("<I", data, 4 + 4 * 5, offsets(chunk)[4] - 1)  # row 4 ends before it starts
    chunk.write_bytes(bytes(data))
    error = refusal(chunk.parent)
    assert (error.shard, error.sample) == ("chunk-0-1.bin", 4) and "before it starts" in error.reason


def test_a_row_whose_sizes_do_not_add_up_is_refused(written: Callable[[str], Path], tmp_path: Path) -> None:
    chunk = damaged_copy(written("pairs"), tmp_path) / "chunk-0-0.bin"
    data = bytearray(chunk.read_bytes())
    start = offsets(chunk)[7]
    struct.pack_into("<I", data, start, struct.unpack_from("<I", data, start)[0] + 1)  # row 7's first leaf: 1 more
    chunk.write_bytes(bytes(data))
    error = refusal(chunk.parent)
    assert (error.shard, error.sample) == ("chunk-0-0.bin", 7)


def test_a_truncated_chunk_names_the_chunk_and_sample(written: Callable[[str], Path], tmp_path: Path) -> None:
    chunk = damaged_copy(written("pairs"), tmp_path) / "chunk-0-2.bin"
    chunk.write_bytes(chunk.read_bytes()[: offsets(chunk)[10] + 3])
    error = refusal(chunk.parent)
    assert (error.shard, error.sample) == ("chunk-0-2.bin", 10) and "truncated" in error.reason


@pytest.mark.parametrize("name", ["records", "pairs-zstd-chunk", "arrays-zstd-batch"])
def test_other_truncated_chunks_are_refused(name: str, written: Callable[[str], Path], tmp_path: Path) -> None:
    folder = damaged_copy(written(name), tmp_path)
    chunk = sorted(folder.glob("chunk-*"))[0]
    chunk.write_bytes(chunk.read_bytes()[:-20])
    error = refusal(folder)
    assert error.shard == chunk.name


def test_an_mds_folder_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / INDEX).write_text('{"version": 2, "shards": []}')
    with pytest.raises(SourceError, match="--from-format mds"):
        open_litdata(locate(tmp_path))


@pytest.mark.parametrize("name", ["pairs", "records"])
def test_an_import_reads_back_as_litdata_reads_it(
    name: str, written: Callable[[str], Path], tmp_path: Path, local_store: Store
) -> None:
    done = import_dataset(written(name), name, format="litdata", store=local_store)
    expected = litdata_reads(written(name), tmp_path)
    assert done.manifest.kind is Kind.TABLE and done.manifest.columns == list(expected[0])
    got = [dict(zip(done.manifest.columns, row, strict=True)) for row in reader(name, local_store)()]
    assert got == expected


def test_an_import_killed_part_way_goes_on_from_its_last_shard(
    written: Callable[[str], Path], tmp_path: Path, local_store: Store
) -> None:
    options = {"format": "litdata", "shard_bytes": 1500, "row_group_bytes": 500}
    done = killed_then_resumed(written("pairs"), local_store, tmp_path, 70, **options)
    got = [dict(zip(done.manifest.columns, row, strict=True)) for row in reader("killed", local_store)()]
    assert got == litdata_reads(written("pairs"), tmp_path)
