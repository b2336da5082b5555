"""An indexed image version's path index on every backend (``store``): one path, one folder's children and a walk
answered from the entries' parts (what the mount and ``datamount://`` answer from, :class:`IndexedTree`), each file's
bytes read and checked through the tree's byte layer (:class:`TreeBytes`: an object found through the row index, or
a row group of a shard), and a damaged part of either index named by an ``IntegrityError``. The reader's path through
the row index on every backend, in every process mode: ``tests/readers/test_readers_in_every_process_mode.py`` and
``test_row_index.py``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from datamount.datasets import catalog, file_parts_writer, layout, upload
from datamount.datasets.file_parts import FileParts
from datamount.datasets.manifest import Manifest
from datamount.datasets.tree import FOLDER, Content
from datamount.datasets.tree_bytes import TreeBytes
from datamount.datasets.tree_index import IndexedTree
from datamount.storage import IntegrityError, Store

#: Entries per part here: the 90 files of the version span several parts, so that a folder crosses parts.
ROWS_PER_PART = 16
FOLDERS, FILES_PER_FOLDER = ("cats", "dogs", "owls"), 30


def image_list(folder: Path) -> tuple[Path, dict[str, bytes]]:
    """A list of each file of three folders once, in a shuffled order, and every file's bytes by path."""
    files: dict[str, bytes] = {}
    for name in FOLDERS:
        (folder / name).mkdir(parents=True)
        for i in range(FILES_PER_FOLDER):
            path = f"{name}/{i:03d}.jpg"
            files[path] = f"{path} ".encode() * (1 + i % 7)
            (folder / path).write_bytes(files[path])
    rows = list(files)
    random.Random(4).shuffle(rows)
    list_file = folder / "train.list"
    list_file.write_text("".join(f"{path}\t{path.split('/')[0]}\n" for path in rows), encoding="utf-8")
    return list_file, files


@pytest.fixture(params=["unpacked", "packed"])
def version(
    store: Store, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[Manifest, dict[str, bytes]]:
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", ROWS_PER_PART)
    list_file, files = image_list(tmp_path / "src")
    upload(list_file, "pets", store=store, packed=request.param == "packed")
    manifest = catalog.resolve(store, "pets")
    assert manifest.indexed and isinstance(manifest.files, FileParts) and len(manifest.files.parts) > 4
    return manifest, files


def test_a_path_a_folder_and_a_walk_are_answered_from_the_index(
    store: Store, version: tuple[Manifest, dict[str, bytes]]
) -> None:
    manifest, files = version
    tree, contents = IndexedTree(manifest), TreeBytes(store, manifest)
    found = tree.content_at("dogs/017.jpg")
    assert isinstance(found, Content) and found.size == len(files["dogs/017.jpg"])
    assert contents.read(found, name="dogs/017.jpg") == files["dogs/017.jpg"]
    assert tree.content_at("dogs") == FOLDER and tree.content_at("dogs/999.jpg") is None
    names = [name for name, _ in tree.children("owls")]
    assert names == [f"{i:03d}.jpg" for i in range(FILES_PER_FOLDER)]
    assert [name for name, content in tree.children("") if content is None] == list(FOLDERS)
    walked = {path: content for path, content in tree.walk("") if path in files}
    assert walked.keys() == files.keys()
    assert all(contents.read(content, name=path) == files[path] for path, content in walked.items())


def test_a_damaged_part_of_either_index_is_an_integrity_error_naming_it(
    store: Store, version: tuple[Manifest, dict[str, bytes]]
) -> None:
    manifest, _ = version
    assert isinstance(manifest.files, FileParts) and manifest.row_parts is not None
    damaged = [manifest.files.parts[2], *manifest.row_parts.parts[:1]]  # a packed version has no row index
    for part in damaged:
        path = f"{layout.dataset_folder('pets')}/{part.path}"
        data = bytearray(store.read(path))
        data[len(data) // 2] ^= 0xFF
        store.write(path, bytes(data))
    fresh = catalog.resolve(store, "pets")
    entries = rf"the part of its file entries .*entries/{manifest.files.parts[2].sha256}\.parquet does not match"
    with pytest.raises(IntegrityError, match=entries):
        list(IndexedTree(fresh).walk(""))
    if manifest.row_parts.parts:
        row_part = manifest.row_parts.parts[0].sha256
        with pytest.raises(IntegrityError, match=rf"the part of its row index .*entries/{row_part}\.parquet"):
            fresh.row_parts.file(0)  # type: ignore[union-attr]
