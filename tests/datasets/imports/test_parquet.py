"""``--from-format parquet``: files ``pyarrow.parquet.write_table`` wrote read back, sample for sample, as
``pq.read_table`` reads them, from a file, a brace pattern and a folder, on disk and on moto's S3; resumed exactly
at any row without reading the row groups before it; a page that fails its CRC, a truncated file and a file of
another schema refused, naming the file (and the sample where known)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog
from datamount.datasets.imports import MappingError, import_dataset
from datamount.datasets.imports.location import locate
from datamount.datasets.imports.parquet import open_parquet
from datamount.datasets.imports.source import BATCH_ROWS, Source, SourceError
from datamount.datasets.manifest import Kind
from datamount.readers import reader
from datamount.storage import ObjectNotFoundError, Store
from tests.datasets.imports.killing import killed_then_resumed
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

ROWS = 2600
GROUP_ROWS = 700


def table(rows: int = ROWS, first: int = 0) -> pa.Table:
    """Rows of every plain type, some null, with binary values of a few hundred bytes."""
    numbers = range(first, first + rows)
    return pa.table(
        {
            "index": pa.array(numbers, pa.int64()),
            "data": pa.array([bytes([n % 251]) * (100 + n % 300) for n in numbers], pa.binary()),
            "text": pa.array([None if n % 17 == 0 else f"row {n}" for n in numbers], pa.string()),
            "score": pa.array([n / 7 for n in numbers], pa.float32()),
            "flag": pa.array([n % 3 == 0 for n in numbers], pa.bool_()),
            "tags": pa.array([[n, n + 1][: n % 3] for n in numbers], pa.list_(pa.int32())),
        }
    )


def write(path: Path, data: pa.Table, *, checksums: bool = True, **options: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path, row_group_size=GROUP_ROWS, write_page_checksum=checksums, **options)
    return path


def all_rows(source: Source, skip: int = 0, shard: int | None = None) -> list[dict[str, Any]]:
    shards = range(len(source.shards)) if shard is None else [shard]
    rows = []
    for number in shards:
        for batch in source.batches(number, skip):
            assert batch.schema.equals(source.schema, check_metadata=True) and 0 < batch.num_rows <= BATCH_ROWS
            rows.extend(batch.to_pylist())
    return rows


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Three files (two in a hive-style partition folder), with and without page checksums, and what Arrow's
    discovery leaves out beside them."""
    root = tmp_path / "src"
    write(root / "a.parquet", table(ROWS), checksums=True)
    write(root / "year=2024" / "b.parquet", table(900, first=ROWS), checksums=False, compression="zstd")
    write(root / "year=2025" / "c.parquet", table(3, first=ROWS + 900), data_page_size=64)
    write(root / "_temporary" / "d.parquet", table(5))
    (root / "_SUCCESS").write_bytes(b"")
    (root / "notes.txt").write_text("not a parquet file\n")
    return root


def test_a_folder_is_read_as_pq_read_table_reads_each_file(folder: Path) -> None:
    source = open_parquet(locate(folder))
    names = ["a.parquet", "year=2024/b.parquet", "year=2025/c.parquet"]
    assert [shard.name for shard in source.shards] == names
    assert [shard.rows for shard in source.shards] == [ROWS, 900, 3]
    assert [shard.size for shard in source.shards] == [(folder / name).stat().st_size for name in names]
    assert source.format == "parquet" and source.where == str(folder)
    assert source.schema.equals(table().schema) and "year" not in source.schema.names
    assert all_rows(source) == [row for name in names for row in pq.read_table(folder / name).to_pylist()]


def test_a_file_and_a_brace_pattern(folder: Path) -> None:
    single = open_parquet(locate(folder / "a.parquet"))
    assert [shard.name for shard in single.shards] == ["a.parquet"]
    assert all_rows(single) == pq.read_table(folder / "a.parquet").to_pylist()
    pattern = open_parquet(locate(f"{folder}/{{year=2025/c,year=2024/b}}.parquet"))
    assert [shard.name for shard in pattern.shards] == ["year=2025/c.parquet", "year=2024/b.parquet"]
    assert all_rows(pattern) == table(3, first=ROWS + 900).to_pylist() + table(900, first=ROWS).to_pylist()


def test_an_empty_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing\n")
    with pytest.raises(ObjectNotFoundError, match=r"no \.parquet file"):
        open_parquet(locate(tmp_path / "empty"))


@pytest.mark.s3
def test_the_folder_on_moto_s3_reads_as_on_disk(folder: Path, s3_server: S3Server, s3_store: Store) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            s3_store.put_file(path, f"src/{path.relative_to(folder).as_posix()}")
    options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    remote = open_parquet(locate(s3_store.url_for("src"), options))
    local = open_parquet(locate(folder))
    assert remote.shards == local.shards and remote.schema.equals(local.schema)
    assert all_rows(remote) == all_rows(local)
    assert all_rows(remote, skip=GROUP_ROWS * 2 + 5, shard=0) == all_rows(local, shard=0)[GROUP_ROWS * 2 + 5 :]


@settings(max_examples=40, deadline=None)
@given(skip=st.integers(min_value=0, max_value=ROWS + 10))
def test_skip_resumes_at_exactly_that_row(tmp_path_factory: pytest.TempPathFactory, skip: int) -> None:
    path = _skip_file(tmp_path_factory)
    expected = pq.read_table(path).to_pylist()
    assert all_rows(open_parquet(locate(path)), skip=skip) == expected[skip:]


def _skip_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.getbasetemp() / "skip" / "rows.parquet"
    if not path.exists():
        write(path, table())
    return path


def flip_in_page(path: Path, group: int, column: int) -> None:
    """Flip one bit of the last data page of ``column``'s chunk in row group ``group`` (in its values, not its
    header)."""
    chunk = pq.ParquetFile(path).metadata.row_group(group).column(column)
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    data = bytearray(path.read_bytes())
    data[first + chunk.total_compressed_size - 3] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_page_that_fails_its_crc_names_the_file_row_group_and_sample(tmp_path: Path) -> None:
    path = write(tmp_path / "src" / "rows.parquet", table(), compression="none")
    flip_in_page(path, group=2, column=1)
    source = open_parquet(locate(tmp_path / "src"))
    with pytest.raises(SourceError, match=r"rows\.parquet, sample \d+: row group 2 is damaged: .*CRC") as caught:
        all_rows(source)
    assert caught.value.shard == "rows.parquet"
    assert 2 * GROUP_ROWS <= caught.value.sample < 3 * GROUP_ROWS  # type: ignore[operator]
    # a resumed read starts at its row group: the damaged one before it is not read
    after = all_rows(source, skip=3 * GROUP_ROWS)
    assert after == pq.read_table(tmp_path / "src").to_pylist()[3 * GROUP_ROWS :]


@pytest.mark.parametrize("cut", [1, 8, 2000], ids=["last-byte", "footer-tail", "into-footer"])
def test_a_truncated_file_is_refused_naming_it(tmp_path: Path, cut: int) -> None:
    write(tmp_path / "src" / "a.parquet", table(10))
    path = write(tmp_path / "src" / "b.parquet", table())
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(SourceError, match=r"b\.parquet: it does not end with a Parquet footer") as caught:
        open_parquet(locate(tmp_path / "src"))
    assert caught.value.shard == "b.parquet" and caught.value.sample is None


def test_a_file_cut_short_after_opening_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "src" / "a.parquet", table())
    source = open_parquet(locate(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=r"a\.parquet: it does not end with a Parquet footer"):
        all_rows(source)


def test_a_file_of_another_schema_is_refused_naming_it(tmp_path: Path) -> None:
    write(tmp_path / "src" / "a.parquet", table(10))
    write(tmp_path / "src" / "b.parquet", table(10).set_column(0, "index", pa.array(range(10), pa.int32())))
    with pytest.raises(SourceError, match=r"b\.parquet: its schema is not a\.parquet's: column 'index' is int32"):
        open_parquet(locate(tmp_path / "src"))
    write(tmp_path / "src" / "b.parquet", table(10).drop_columns(["flag"]))
    with pytest.raises(SourceError, match=r"b\.parquet: its schema is not a\.parquet's: columns \["):
        open_parquet(locate(tmp_path / "src"))
    # metadata aside: the same columns with pandas' metadata (and another writer's) are the same schema
    write(tmp_path / "src" / "b.parquet", table(10).replace_schema_metadata({b"pandas": b"{}"}))
    assert len(all_rows(open_parquet(locate(tmp_path / "src")))) == 20


def test_an_import_reads_back_as_pyarrow_reads_the_files(tmp_path: Path, local_store: Store) -> None:
    files = [write(tmp_path / "in" / f"part-{n}.parquet", table(900, first=900 * n)) for n in range(3)]
    pattern = str(tmp_path / "in" / "part-{0..2}.parquet")
    with pytest.raises(MappingError, match="'index'"):
        import_dataset(pattern, "rows", format="parquet", store=local_store)
    kept = ["data", "text", "score", "flag", "tags"]
    done = import_dataset(
        pattern, "rows", format="parquet", store=local_store, columns=kept, shard_bytes=60_000, row_group_bytes=20_000
    )
    assert (done.manifest.kind, done.manifest.columns, done.manifest.rows) == (Kind.TABLE, kept, 2700)
    assert len(done.manifest.shards) > 3
    expected = [tuple(row[c] for c in kept) for f in files for row in pq.read_table(f).to_pylist()]
    got = list(reader("rows", local_store)())
    assert [row[:2] + row[3:] for row in got] == [row[:2] + row[3:] for row in expected]
    assert [row[2] for row in got] == pytest.approx([row[2] for row in expected])  # float32, as stored


def test_an_image_and_a_label_column_import_as_an_image_version(tmp_path: Path, local_store: Store) -> None:
    images = [b"\x89PNG\r\n\x1a\n" + bytes([n]) * 50 for n in range(40)]
    labels = [f"class {n % 4}" for n in range(40)]
    write(tmp_path / "pictures.parquet", pa.table({"picture": images, "label": labels}))
    done = import_dataset(tmp_path / "pictures.parquet", "pictures", format="parquet", store=local_store)
    assert (done.manifest.kind, done.manifest.rows) == (Kind.IMAGE, 40)
    assert list(reader("pictures", local_store)()) == list(zip(images, labels, strict=True))
    assert done.manifest.source == "parquet:pictures.parquet"


def test_an_import_killed_part_way_goes_on_from_its_last_shard(tmp_path: Path, local_store: Store) -> None:
    files = [write(tmp_path / "in" / f"part-{n}.parquet", table(900, first=900 * n)) for n in range(3)]
    kept = ["data", "text", "flag", "tags"]
    options = {"format": "parquet", "columns": kept, "shard_bytes": 60_000, "row_group_bytes": 20_000}
    done = killed_then_resumed(tmp_path / "in", local_store, tmp_path, 1500, **options)
    assert done.manifest.rows == 2700
    expected = [tuple(row[c] for c in kept) for f in files for row in pq.read_table(f).to_pylist()]
    assert list(reader("killed", local_store)()) == expected


def test_a_source_of_no_samples_is_refused(tmp_path: Path, local_store: Store) -> None:
    write(tmp_path / "empty.parquet", table(0).drop_columns(["index"]))
    with pytest.raises(SourceError, match="hold no samples"):
        import_dataset(tmp_path / "empty.parquet", "empty", format="parquet", store=local_store)
    assert catalog.versions(local_store, "empty") == []
