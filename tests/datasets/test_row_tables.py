"""A version's rows as Arrow tables (``RowSource.tables``), what front ends that hand rows on as Arrow read: the rows
a pass reads, with the shards' types, checked as a pass checks them; and a packed version's columns read alone."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamount.datasets import catalog, layout
from datamount.datasets.rows import Piece, decoded_rows, open_rows
from datamount.datasets.upload import upload
from datamount.storage import IntegrityError, Store, open_store
from tests.datasets.layouts import LAYOUTS, ROWS, make_layout
from tests.generated import write_image_list
from tests.readers.test_remote_shard_streaming import bytes_asked
from tests.servers.fault_proxy import FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server


def table_of(store: Store, name: str, **options: object) -> pa.Table:
    """Every row of version ``name`` (of a split, a selection of columns...) through ``tables``, span by span."""
    source = open_rows(store, catalog.resolve(store, name), **options)  # type: ignore[arg-type]
    tables = list(source.tables(Piece(span, span) for span in source.spans()))
    assert [table.num_rows for table in tables] == [len(span) for span in source.spans()]
    return pa.concat_tables(tables)


def rows_of(table: pa.Table) -> list[tuple[object, ...]]:
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in decoded_rows(table)]


@pytest.mark.parametrize("kind", LAYOUTS)
def test_tables_hold_the_rows_a_pass_reads_with_the_shards_types(local_store: Store, tmp_path: Path, kind: str) -> None:
    name = make_layout(local_store, tmp_path, kind)
    manifest = catalog.resolve(local_store, name)
    expected = list(open_rows(local_store, manifest).rows(0, ROWS))
    whole = table_of(local_store, name)
    assert whole.column_names == manifest.columns
    assert [repr(r) for r in rows_of(whole)] == [repr(r) for r in expected]  # numpy arrays compare by repr
    if kind != "table":
        assert whole.schema.field(0).type == (pa.binary() if kind.startswith("image") else pa.string())
        train = open_rows(local_store, manifest, split="train")
        assert rows_of(table_of(local_store, name, split="train")) == list(train.rows(0, len(train)))


def test_columns_of_a_packed_version_come_in_the_order_asked(local_store: Store, tmp_path: Path) -> None:
    make_layout(local_store, tmp_path, "table")
    whole = table_of(local_store, "table")
    chosen = table_of(local_store, "table", columns=["score", "id"])
    assert chosen.column_names == ["score", "id"]
    assert chosen.equals(whole.select(["score", "id"]))
    assert table_of(local_store, "table", columns=whole.column_names).equals(whole)


def test_columns_asked_are_checked_first(local_store: Store, tmp_path: Path) -> None:
    make_layout(local_store, tmp_path, "table")
    make_layout(local_store, tmp_path, "text")
    manifest = catalog.resolve(local_store, "table")
    for wrong, problem in [(["id", "nope"], "has no column 'nope'"), (["id", "id"], "each named once"), ([], "one")]:
        with pytest.raises(ValueError, match=problem):
            open_rows(local_store, manifest, columns=wrong)
    with pytest.raises(TypeError, match="a list of column names"):
        open_rows(local_store, manifest, columns="id")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="text@1 is not packed"):
        open_rows(local_store, catalog.resolve(local_store, "text"), columns=["source"])


@pytest.mark.parametrize("kind", ["image-packed", "table"])
def test_a_flipped_byte_fails_the_columns_read_whole_or_alone(local_store: Store, tmp_path: Path, kind: str) -> None:
    make_layout(local_store, tmp_path, kind)
    manifest = catalog.resolve(local_store, kind)
    shard = layout.shard_path(kind, manifest.shards[0])
    data = bytearray(local_store.read(shard))
    chunk = pq.read_metadata(pa.py_buffer(bytes(data))).row_group(1).column(0)  # the images' bytes, the ids
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0x01
    local_store.write(shard, bytes(data))
    first, *others = manifest.columns
    for columns in (None, [first], [*others, first]):
        with pytest.raises(IntegrityError, match=r"row group 1 of shard .* is damaged"):
            table_of(local_store, kind, columns=columns)
    assert table_of(local_store, kind, columns=others).num_rows == ROWS  # the damaged chunk is not read


@pytest.mark.s3
def test_columns_of_a_remote_shard_fetch_only_their_chunks(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    keys = {"key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    direct = open_store(f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, **keys)
    upload(write_image_list(tmp_path, 30, size=20_000), "d", store=direct, packed=True, row_group_bytes=40_000)
    [shard] = catalog.resolve(direct, "d").shards
    proxy = fault_proxy(s3_server.endpoint_url)
    far = open_store(f"s3://{s3_bucket}/root", endpoint_url=proxy.endpoint_url, **keys)
    labels = table_of(far, "d", columns=["label"])
    assert labels.column("label").to_pylist() == [str(i % 3) for i in range(30)]
    asked = [r.range for r in proxy.requests if r.method == "GET" and "/packs/" in unquote(r.target)]
    assert len(asked) > len(shard.row_groups)  # the footer, then each row group's label chunk
    assert bytes_asked(asked) < shard.size / 4  # the footer (its last 64 KiB) and the labels; not the images
