"""The tools of the Python data ecosystem read ``datamount://`` URLs, each on a packed and an unpacked version, on a
local store and on moto's S3, and get what ``reader()`` yields; a damaged shard is an error through each of them.

Hugging Face ``datasets`` runs in a process of its own: in this one, the repository's ``datasets/`` folder (on
``sys.path`` for the tests) would be imported in its place.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import fsspec
import pandas as pd
import polars as pl
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from datamount.datasets import layout, upload
from datamount.datasets.manifest import ShardEntry
from datamount.storage import Store
from datamount.urlfs import DatamountFileSystem
from tests.servers.fault_proxy import FaultProxy, FaultProxyFactory
from tests.servers.moto import S3Server
from tests.urlfs.conftest import ON_STORES
from tests.urlfs.test_urlfs import flip_in_store, stored_files
from tests.urlfs.versions import NAMES, Versions, table_rows

pytestmark = pytest.mark.timeout(300)


def shards_folder(versions: Versions, name: str) -> str:
    return versions.url(name, "shards")


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_pandas_pyarrow_duckdb_and_polars_read_the_shards_as_reader_yields(versions: Versions, name: str) -> None:
    expected = versions.rows(name)
    options = versions.options()
    fs = versions.filesystem()
    folder = shards_folder(versions, name)
    frame = pd.read_parquet(folder, storage_options=options).sort_values("index")
    assert list(zip(frame["file"], frame["label"], strict=True)) == expected
    dataset = pads.dataset(folder.removeprefix("datamount://"), filesystem=fs, format="parquet")
    assert table_rows(dataset.to_table()) == expected
    first = versions.shard_urls(name)[0].removeprefix("datamount://")
    subset = pq.read_table(first, filesystem=fs, columns=["label", "index"])
    assert subset.column_names == ["label", "index"]
    assert subset.column("label").to_pylist() == [label for _, label in expected[: subset.num_rows]]
    connection = duckdb.connect()
    connection.register_filesystem(fs)
    found = connection.sql(f"SELECT file, label FROM read_parquet('{folder}/*.parquet') ORDER BY index").fetchall()
    assert [(bytes(file), label) for file, label in found] == expected
    with fsspec.open(versions.shard_urls(name)[-1], **options) as file:
        last = pl.read_parquet(file)
    assert list(zip(last["file"], last["label"], strict=True)) == expected[len(expected) - len(last) :]
    # polars reads its own object stores' URLs; others as files, or as a pyarrow dataset (lazily)
    everything = pl.scan_pyarrow_dataset(dataset).sort("index").collect()
    assert list(zip(everything["file"], everything["label"], strict=True)) == expected


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_pil_opens_an_image_and_get_copies_a_folder(versions: Versions, name: str, tmp_path: Path) -> None:
    from PIL import Image

    fs = versions.filesystem()
    files = stored_files(versions)
    with fsspec.open(versions.url(name, "data/img0007.png"), **versions.options()) as file:
        image = Image.open(file)
        image.load()
    assert image.tobytes() == Image.open(io.BytesIO(files["data/img0007.png"])).tobytes()
    fs.get(versions.url(name, "data"), str(tmp_path / "copy"), recursive=True)
    copied = {
        path.relative_to(tmp_path / "copy").as_posix(): path.read_bytes() for path in (tmp_path / "copy").rglob("*.png")
    }
    assert {f"data/{key}": value for key, value in copied.items()} == files
    assert [files[f"data/img{i:04d}.png"] for i in range(len(files))] == [data for data, _ in versions.rows(name)]


HF_SCRIPT = """
import json, sys
from datasets import load_dataset
url, options, cache = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
loaded = load_dataset("parquet", data_files=url, storage_options=options, cache_dir=cache, split="train")
rows = sorted(zip(loaded["index"], loaded["file"], loaded["label"]))
print(json.dumps([[file.hex(), label] for _, file, label in rows]))
"""


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_hugging_face_datasets_loads_the_shards(versions: Versions, name: str, tmp_path: Path) -> None:
    url = shards_folder(versions, name) + "/*.parquet"
    done = subprocess.run(
        [sys.executable, "-c", HF_SCRIPT, url, json.dumps(versions.options()), str(tmp_path / "hf-cache")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [(bytes.fromhex(file), label) for file, label in json.loads(done.stdout.splitlines()[-1])]
    assert rows == versions.rows(name)


def _one_shard_behind_a_proxy(
    s3_store: Store,
    s3_server: S3Server,
    fault_proxy: FaultProxyFactory,
    tmp_path: Path,
    rows: int,
    **sizes: int,
) -> tuple[ShardEntry, DatamountFileSystem, str, FaultProxy]:
    """``rows`` PNGs uploaded packed as ``big``, in one shard; a filesystem reading it through a fault proxy, which
    has already read the version's manifest and list; the shard's path in it."""
    from tests.urlfs.versions import write_png_list

    source = write_png_list(tmp_path / "src", rows)
    manifest = upload(source, "big", store=s3_store, packed=True, shard_bytes=64 << 20, **sizes).manifest
    (shard,) = manifest.shards
    versions = Versions(s3_store, source, {"big": manifest}, tmp_path / "cache", s3_server.endpoint_url)
    proxy = fault_proxy(s3_server.endpoint_url)
    fs = versions.filesystem(endpoint_url=proxy.endpoint_url)
    url = versions.shard_urls("big")[0].removeprefix("datamount://")
    fs.info(url)
    return shard, fs, url, proxy


def _shard_bytes_fetched(proxy: FaultProxy, since: int) -> int:
    """Bytes of shards the proxy answered from request ``since`` on."""
    return sum(r.answered or 0 for r in proxy.requests[since:] if "/packs/" in r.target)


@pytest.mark.s3
def test_a_column_subset_fetches_about_its_column_chunks(
    s3_store: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    """4 MB of images in 1 MB row groups: reading two small columns fetches the 256 KiB blocks around their chunks
    and the footer, not the images."""
    shard, fs, url, proxy = _one_shard_behind_a_proxy(
        s3_store, s3_server, fault_proxy, tmp_path, 200, row_group_bytes=1 << 20
    )
    before = len(proxy.requests)
    table = pq.read_table(url, filesystem=fs, columns=["label", "index"])
    assert table.num_rows == 200
    fetched = _shard_bytes_fetched(proxy, before)
    metadata = pq.ParquetFile(io.BytesIO(s3_store.read(layout.shard_path("big", shard)))).metadata
    spans = [(shard.size - (64 << 10), shard.size)]  # the footer, as pyarrow reads it
    for group in range(metadata.num_row_groups):
        for index in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(index)
            if chunk.path_in_schema in ("label", "index"):
                start = min(filter(None, (chunk.dictionary_page_offset, chunk.data_page_offset)))
                spans.append((start, start + chunk.total_compressed_size))
    blocks = {block for start, end in spans for block in range(*shard.block_range(start, end))}
    covering = sum(min(shard.block_bytes, shard.size - block * shard.block_bytes) for block in blocks)
    assert 0 < fetched <= covering < shard.size / 2, (fetched, covering, shard.size)


@pytest.mark.s3
def test_each_block_of_a_shard_is_fetched_once_per_filesystem(
    s3_store: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    """A Parquet reader asks for the same blocks again (its footer, a second read of the table): each is fetched
    and checked once, and served from the filesystem's checked copy after that."""
    shard, fs, url, proxy = _one_shard_behind_a_proxy(s3_store, s3_server, fault_proxy, tmp_path, 400)
    assert shard.size > 24 * shard.block_bytes  # more blocks than a reader keeps at its edges
    before = len(proxy.requests)
    first = pq.read_table(url, filesystem=fs)
    fetched = _shard_bytes_fetched(proxy, before)
    assert fetched == shard.size
    before = len(proxy.requests)
    assert pq.read_table(url, filesystem=fs).equals(first)
    assert fs.cat_file(url, start=shard.block_bytes - 5, end=shard.block_bytes + 5) == s3_store.read_range(
        layout.shard_path("big", shard), shard.block_bytes - 5, shard.block_bytes + 5
    )
    assert [r.target for r in proxy.requests[before:]] == []


@ON_STORES
def test_a_damaged_shard_is_an_error_through_every_tool(versions: Versions) -> None:
    name = "packed"
    shard = versions.manifests[name].shards[0]
    flip_in_store(versions.store, layout.shard_path(name, shard), shard.size // 2)
    fs = versions.filesystem()
    folder = shards_folder(versions, name)
    with pytest.raises(OSError, match="damaged"):
        pd.read_parquet(folder, storage_options=versions.options())
    with pytest.raises(OSError, match="damaged"):
        pq.read_table(folder.removeprefix("datamount://"), filesystem=fs)
    connection = duckdb.connect()
    connection.register_filesystem(fs)
    with pytest.raises(duckdb.Error, match="damaged"):
        connection.sql(f"SELECT count(*), sum(octet_length(file)) FROM read_parquet('{folder}/*.parquet')").fetchall()
