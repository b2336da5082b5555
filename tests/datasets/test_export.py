"""``export``: a version back out as the files uploaded, byte for byte, packed or not, on every backend; a folder
already there is never written; damaged bytes are never written (``test_export_folders.py``: the folder's rules)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from datamount.datasets import catalog, export, layout, upload
from datamount.readers import reader
from datamount.readers.stream import import_stream, write_to
from datamount.storage import IntegrityError, Store
from tests.generated import write_image_list


def source_files(list_file: Path) -> dict[str, bytes]:
    """The files a list names, by their normalised path."""
    found = {}
    for row in list_file.read_text(encoding="utf-8").splitlines():
        path = row.split("\t")[0]
        found[Path(path).as_posix()] = (list_file.parent / path).read_bytes()
    return found


@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_an_image_version_comes_back_as_its_files_and_list(store: Store, tmp_path: Path, packed: bool) -> None:
    list_file = write_image_list(tmp_path / "src", 9, name="train.list")
    (tmp_path / "src" / "data" / "sub").mkdir()
    (tmp_path / "src" / "data" / "sub" / "deep.jpg").write_bytes(b"\xff\xd8\xffdeep")
    with list_file.open("a", encoding="utf-8") as rows:
        rows.write("data/sub/deep.jpg\t9\n./data/img0000.jpg\t7\n")  # a nested file, and one named twice
    manifest = upload(list_file, "cats", store=store, packed=packed).manifest
    assert bool(manifest.shards) is packed

    result = export("cats", tmp_path / "out", store=store)
    expected = source_files(list_file)
    assert result.written == len(expected) + 1 and result.unchanged == 0
    for path, data in expected.items():
        assert (tmp_path / "out" / path).read_bytes() == data
    assert result.list_file == tmp_path / "out" / "train.list"
    assert result.list_file.read_bytes() == store.read(layout.list_path(manifest))
    # The folder reads back as the same dataset.
    again = upload(result.list_file, "cats-again", store=store, packed=packed).manifest
    assert list(reader("cats-again", store)()) == list(reader("cats", store)())
    assert again.list_sha256 == manifest.list_sha256

    # Run again: nothing rewritten; a changed file is an error and stays as it was.
    assert export("cats", tmp_path / "out", store=store).unchanged == len(expected) + 1
    (tmp_path / "out" / "data" / "img0003.jpg").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match=r"its data/img0003\.jpg has other bytes"):
        export("cats", tmp_path / "out", store=store)
    assert (tmp_path / "out" / "data" / "img0003.jpg").read_bytes() == b"mine"


def test_text_and_table_versions(store: Store, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.list"
    pairs.write_text("bonjour\thello\nle chat\tthe cat\n", encoding="utf-8")
    upload(pairs, "fr-en", store=store)
    assert export("fr-en", tmp_path / "text", store=store).list_file.read_text(encoding="utf-8") == pairs.read_text()

    buffer = io.BytesIO()
    with write_to(buffer) as out:
        out.set_columns("grid", "name")
        out.write_many([(np.full((2, 3), i, dtype=np.int16), f"n{i}") for i in range(5)])
    manifest = import_stream(io.BytesIO(buffer.getvalue()), "grids", store=store)
    result = export("grids", tmp_path / "table", store=store)
    assert result.list_file is None and result.written == len(manifest.shards)
    shard = pq.read_table(tmp_path / "table" / Path(manifest.shards[0].path).name)
    assert shard.column("name").to_pylist() == [f"n{i}" for i in range(5)]


def test_a_damaged_object_is_never_written(local_store: Store, tmp_path: Path) -> None:
    list_file = write_image_list(tmp_path / "src", 4)
    manifest = upload(list_file, "cats", store=local_store).manifest
    entry = manifest.files[2]
    local_store.write(layout.object_path("cats", entry.sha256), b"x" * entry.size)  # same size, other bytes
    with pytest.raises(IntegrityError, match="cats@1"):
        export("cats", tmp_path / "out", store=local_store)
    assert not (tmp_path / "out" / entry.path).exists()
    assert catalog.resolve(local_store, "cats").version == 1
