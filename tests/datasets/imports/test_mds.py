"""``open_mds``: MDS written by MosaicML Streaming's own ``MDSWriter`` reads, sample for sample, as its own reader
(``StreamingDataset``) yields it, from a folder and from moto's S3; ``skip`` resumes exactly; a flipped byte, a broken
offsets table, a truncated shard and shards that disagree are refused, naming the shard (and the sample, where known).

``mds_fixture/`` was written once by ``mds_writer.py`` with mosaicml-streaming 0.13, together with what its reader
returned (``expected.json``): ``streaming`` imports torchvision, which cannot be installed beside this project's CPU
torch, so the fixture lets every run check against the tool's own output. ``test_the_tool_writes_and_reads_it_again``
runs ``mds_writer.py`` again where a Python with ``streaming`` is found (``DATAMOUNT_STREAMING_PYTHON``, else this one)
and skips, saying so, where none is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from datamount.datasets import catalog
from datamount.datasets.imports import import_dataset
from datamount.datasets.imports.location import locate
from datamount.datasets.imports.mds import MdsSource, open_mds
from datamount.datasets.imports.source import IMAGE_EXTENSION, SOURCE_ENCODING, SourceError
from datamount.datasets.manifest import Kind
from datamount.readers import reader
from datamount.storage import Store
from tests.datasets.imports.killing import killed_then_resumed
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

FIXTURE = Path(__file__).parent / "mds_fixture"
WRITER = Path(__file__).parent / "mds_writer.py"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def recorded(value: Any, field: pa.Field) -> Any:
    """A value of ours as ``mds_writer.py`` records what streaming's reader gave: decoded where its field's
    metadata names an encoding, as streaming decodes it."""
    metadata = field.metadata or {}
    encoding = metadata.get(SOURCE_ENCODING, b"").decode()
    if IMAGE_EXTENSION in metadata or encoding == "pil":
        image = Image.open(io.BytesIO(value)) if IMAGE_EXTENSION in metadata else pil(value)
        return {"image": [image.mode, list(image.size), hashlib.sha256(image.tobytes()).hexdigest()]}
    if encoding.startswith("ndarray:"):
        _, dtype, shape = encoding.split(":")
        array = np.frombuffer(value, dtype).reshape([int(dim) for dim in shape.split(",")])
        return {"ndarray": [str(array.dtype), list(array.shape), array.tolist()]}
    if encoding == "pkl":
        return {"tuple": list(pickle.loads(value))}
    if encoding == "json":
        return {"json": json.loads(value)}
    if encoding == "str_decimal":
        return {"decimal": value}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    return value


def pil(data: bytes) -> Image.Image:
    """streaming's ``pil`` encoding: width, height and the mode's length (uint32 each), the mode, the pixels."""
    width, height, length = struct.unpack_from("<III", data)
    return Image.frombytes(data[12 : 12 + length].decode(), (width, height), data[12 + length :])


def rows(source: MdsSource, shards: range | None = None) -> list[dict[str, Any]]:
    out = []
    for shard in shards if shards is not None else range(len(source.shards)):
        for batch in source.batches(shard):
            assert batch.schema == source.schema and batch.num_rows <= 1024
            out += [
                {field.name: recorded(row[field.name], field) for field in source.schema} for row in batch.to_pylist()
            ]
    return out


def by_split(source: MdsSource) -> dict[str, list[dict[str, Any]]]:
    splits: dict[str, list[dict[str, Any]]] = {}
    for at, shard in enumerate(source.shards):
        splits.setdefault(shard.split, []).extend(rows(source, range(at, at + 1)))
    return splits


def test_the_fixture_reads_as_streaming_reads_it() -> None:
    source = open_mds(locate(FIXTURE / "plain"))
    assert rows(source) == EXPECTED["plain"]
    assert [shard.rows for shard in source.shards][:2] == [0, 1]  # streaming writes an empty first shard here
    assert source.schema.names == sorted(EXPECTED["plain"][0])  # MDSWriter sorts the columns
    assert source.schema.field("jpeg").metadata == {IMAGE_EXTENSION: b"jpg"}
    assert source.schema.field("ndarray").metadata == {SOURCE_ENCODING: b"ndarray:int16:2,3"}
    types = {name: str(source.schema.field(name).type) for name in ("int", "uint64", "float16", "str_int", "json")}
    assert types == {"int": "int64", "uint64": "uint64", "float16": "halffloat", "str_int": "int64", "json": "string"}


def test_splits_of_every_compression_read_as_streaming_reads_them() -> None:
    source = open_mds(locate(FIXTURE / "compressed"))
    assert by_split(source) == EXPECTED["compressed"]
    assert source.shards[0].name == "br/shard.00000.mds.br" and source.shards[0].split == "br"
    assert open_mds(locate(FIXTURE / "compressed" / "zstd" / "index.json")).shards[0].name == "shard.00000.mds.zstd"


@pytest.mark.s3
def test_the_same_source_on_s3(s3_server: S3Server, s3_store: Store) -> None:
    for path in FIXTURE.rglob("*"):
        if path.is_file():
            s3_store.write(f"mds/{path.relative_to(FIXTURE).as_posix()}", path.read_bytes())
    options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    assert rows(open_mds(locate(s3_store.url_for("mds/plain"), options))) == EXPECTED["plain"]
    assert by_split(open_mds(locate(s3_store.url_for("mds/compressed"), options))) == EXPECTED["compressed"]


@pytest.mark.slow
def test_the_tool_writes_and_reads_it_again(tmp_path: Path) -> None:
    python = os.environ.get("DATAMOUNT_STREAMING_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import streaming"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(
            f"no Python with mosaicml-streaming ({python}; set DATAMOUNT_STREAMING_PYTHON): {probe.stderr[-200:]}"
        )
    subprocess.run([python, str(WRITER), str(tmp_path)], check=True, capture_output=True)
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert rows(open_mds(locate(tmp_path / "plain"))) == expected["plain"]
    assert by_split(open_mds(locate(tmp_path / "compressed"))) == expected["compressed"]


SKIPPED = open_mds(locate(FIXTURE / "compressed"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_skip_resumes_exactly(data: st.DataObject) -> None:
    shard = data.draw(st.integers(0, len(SKIPPED.shards) - 1))
    total = SKIPPED.shards[shard].rows
    skip = data.draw(st.integers(0, (total or 0) + 1))
    every = [row for batch in SKIPPED.batches(shard) for row in batch.to_pylist()]
    assert [row for batch in SKIPPED.batches(shard, skip) for row in batch.to_pylist()] == every[skip:]


def copy_of(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURE / name, tmp_path / name))


def offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data)
    return list(struct.unpack_from(f"<{count + 1}I", data, 4))


def refusal(folder: Path) -> SourceError:
    source = open_mds(locate(folder))
    with pytest.raises(SourceError) as raised:
        for shard in range(len(source.shards)):
            for _ in source.batches(shard):
                pass
    return raised.value


def test_a_flipped_byte_fails_the_recorded_hashes(tmp_path: Path) -> None:
    shard = copy_of(tmp_path, "plain") / "shard.00003.mds"
    data = bytearray(shard.read_bytes())
    data[offsets(shard)[0] + 40] ^= 0x01  # inside the first sample's bytes: only a hash can tell
    shard.write_bytes(bytes(data))
    error = refusal(shard.parent)
    assert error.shard == "shard.00003.mds" and error.sample is None
    assert "md5" in error.reason and "damaged" in error.reason


def test_a_broken_offsets_table_names_the_sample(tmp_path: Path) -> None:
    shard = copy_of(tmp_path, "plain") / "shard.00004.mds"
    data = bytearray(shard.read_bytes())
    struct.pack_into("<I", data, 4 + 4 * 1, offsets(shard)[1] - 5)  # sample 0 ends 5 bytes early, sample 1 starts so
    shard.write_bytes(bytes(data))
    error = refusal(shard.parent)
    assert (error.shard, error.sample) == ("shard.00004.mds", 0)


def test_a_truncated_shard_names_the_sample(tmp_path: Path) -> None:
    shard = copy_of(tmp_path, "plain") / "shard.00005.mds"
    ends = offsets(shard)
    shard.write_bytes(shard.read_bytes()[: ends[-2] + 3])
    error = refusal(shard.parent)
    assert (error.shard, error.sample) == ("shard.00005.mds", len(ends) - 2) and "truncated" in error.reason


@pytest.mark.parametrize("cut", [True, False], ids=["truncated", "flipped"])
def test_a_damaged_compressed_shard_is_refused(tmp_path: Path, cut: bool) -> None:
    shard = copy_of(tmp_path, "compressed") / "zstd" / "shard.00001.mds.zstd"
    data = bytearray(shard.read_bytes())
    data[-6] ^= 0x40
    shard.write_bytes(bytes(data[:-6]) if cut else bytes(data))
    error = refusal(shard.parent)
    assert error.shard == "shard.00001.mds.zstd"
    assert ("records" in error.reason) if cut else ("sha256" in error.reason or "decompress" in error.reason)


def edit_index(folder: Path, change: Any) -> None:
    index = json.loads((folder / "index.json").read_text())
    change(index["shards"])
    (folder / "index.json").write_text(json.dumps(index))


def test_shards_whose_columns_differ_are_refused(tmp_path: Path) -> None:
    folder = copy_of(tmp_path, "plain")
    edit_index(folder, lambda shards: shards[2]["column_encodings"].__setitem__(0, "str"))
    with pytest.raises(SourceError, match="differ from the first shard's") as raised:
        open_mds(locate(folder))
    assert raised.value.shard == "shard.00002.mds"


def test_a_shard_whose_header_disagrees_with_the_index_is_refused(tmp_path: Path) -> None:
    folder = copy_of(tmp_path, "plain")
    edit_index(folder, lambda shards: shards[1].__setitem__("size_limit", 999))
    error = refusal(folder)
    assert error.shard == "shard.00001.mds" and "size_limit" in error.reason


def test_hashes_nothing_here_computes(tmp_path: Path) -> None:
    folder = copy_of(tmp_path, "plain")

    def unknown(only: bool) -> Any:
        def change(shards: list[dict[str, Any]]) -> None:
            hashes = shards[1]["raw_data"]["hashes"]
            hashes.update({"crc64": "0" * 16} if not only else {"crc64": "0" * 16, "md5": None, "sha1": None})
            if only:
                del hashes["md5"], hashes["sha1"], hashes["xxh64"]

        return change

    edit_index(folder, unknown(only=False))
    assert len(rows(open_mds(locate(folder)))) == 8  # md5, sha1 and xxh64 still checked
    edit_index(folder, unknown(only=True))
    with pytest.raises(SourceError, match="none that hashlib or xxhash computes"):
        open_mds(locate(folder))


def test_a_folder_without_an_index_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no MDS dataset"):
        open_mds(locate(tmp_path / "empty"))


def imported_splits(store: Store, name: str, source: MdsSource) -> dict[str, list[dict[str, Any]]]:
    """What ``reader()`` yields of each split of version ``name``, recorded as :func:`rows` records it."""
    splits = catalog.resolve(store, name).splits
    fields = [source.schema.field(column) for column in catalog.resolve(store, name).columns]
    return {
        split: [
            {f.name: recorded(value, f) for f, value in zip(fields, row, strict=True)}
            for row in reader(name, store, split=split)()
        ]
        for split in splits
    }


def test_an_import_reads_back_as_streaming_reads_it_split_by_split(local_store: Store, tmp_path: Path) -> None:
    source = open_mds(locate(FIXTURE / "compressed"))
    done = import_dataset(FIXTURE / "compressed", "mds", format="mds", store=local_store)
    assert done.manifest.kind is Kind.TABLE and list(done.manifest.splits) == ["br", "bz2", "gz", "snappy", "zstd"]
    assert imported_splits(local_store, "mds", source) == EXPECTED["compressed"]
    plain = import_dataset(FIXTURE / "plain", "plain", format="mds", store=local_store)
    fields = [open_mds(locate(FIXTURE / "plain")).schema.field(column) for column in plain.manifest.columns]
    got = [{f.name: recorded(v, f) for f, v in zip(fields, row, strict=True)} for row in reader("plain", local_store)()]
    assert got == EXPECTED["plain"]


def test_an_import_killed_part_way_goes_on_from_its_last_shard(local_store: Store, tmp_path: Path) -> None:
    killed_then_resumed(FIXTURE / "compressed", local_store, tmp_path, 20, format="mds")
    assert imported_splits(local_store, "killed", open_mds(locate(FIXTURE / "compressed"))) == EXPECTED["compressed"]
