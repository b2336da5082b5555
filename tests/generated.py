"""Small generated datasets: ``.list`` files with real files beside them (the ``make_image_list`` and ``text_list``
fixtures), and packed image datasets built once per session on the shared stores (``shared_datasets``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import Store

#: ``make_image_list(count=12, *, name="train.list", size=300, labels=3)``: the path of a new image list.
MakeImageList = Callable[..., Path]


def write_image_list(
    folder: Path, count: int = 12, *, name: str = "train.list", size: int = 300, labels: int = 3
) -> Path:
    """Write ``count`` files of distinct random bytes under ``folder/data/`` and the list ``folder/name`` naming
    them, each with label ``i % labels``; the list's path."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        path = folder / "data" / f"img{i:04d}.jpg"
        path.write_bytes(b"\xff\xd8\xff" + os.urandom(size + i))
        rows.append(f"./data/{path.name}\t{i % labels}\n")
    list_file = folder / name
    list_file.write_text("".join(rows), encoding="utf-8")
    return list_file


def tree_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, read with plain ``open``."""
    found = {}
    for parent, _, files in os.walk(folder):
        for name in files:
            path = Path(parent, name)
            found[path.relative_to(folder).as_posix()] = path.read_bytes()
    return found


def image_rows(list_file: Path) -> list[tuple[bytes, str]]:
    """What a reader of the image list ``list_file`` must yield: each file's bytes and its label, in list order."""
    rows = []
    for line in list_file.read_text(encoding="utf-8").splitlines():
        path, label = line.split("\t")
        rows.append(((list_file.parent / path).read_bytes(), label))
    return rows


@pytest.fixture
def make_image_list(tmp_path: Path) -> MakeImageList:
    """Write ``count`` files of distinct random bytes under ``data/`` and a list naming them with labels."""

    def make(count: int = 12, *, name: str = "train.list", size: int = 300, labels: int = 3) -> Path:
        return write_image_list(tmp_path / "src", count, name=name, size=size, labels=labels)

    return make


@pytest.fixture
def text_list(tmp_path: Path) -> Path:
    """A two-column text list of three rows (and a blank line)."""
    path = tmp_path / "pairs.list"
    path.write_text("bonjour\thello\nle chat\tthe cat\n\nmerci\tthank you\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class PackedImages:
    """An image dataset to upload and pack: ``count`` files of ``size`` + *i* random bytes (labels 0, 1, 2), then
    Parquet shards of about ``shard_bytes`` in row groups of about ``row_group_bytes``."""

    name: str
    count: int
    size: int
    shard_bytes: int
    row_group_bytes: int


@dataclass(frozen=True)
class PackedDataset:
    """A packed image dataset on a store, and what it holds."""

    store: Store
    name: str
    #: The ``.list`` it was uploaded from (the files are beside it).
    list_file: Path
    #: Its samples, as ``reader(name)`` yields them (read before packing).
    rows: list[tuple[bytes, str]]
    #: How many shards it was packed into.
    shards: int


def upload_and_pack(store: Store, images: PackedImages, folder: Path) -> PackedDataset:
    """Write the files of ``images`` and their list under ``folder``, upload them to ``store``, read them back, and
    pack them."""
    list_file = write_image_list(folder, images.count, size=images.size)
    upload(list_file, images.name, store=store)
    rows = list(reader(images.name, store)())
    manifest = pack(images.name, store=store, shard_bytes=images.shard_bytes, row_group_bytes=images.row_group_bytes)
    return PackedDataset(store, images.name, list_file, rows, len(manifest.shards))


class SharedDatasets:
    """Packed datasets built once per session and shared by the tests that only read them."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._built: dict[tuple[str, PackedImages], PackedDataset] = {}

    def packed(self, store: Store, images: PackedImages) -> PackedDataset:
        """``images`` uploaded and packed on ``store`` (the first time it is asked for).

        ``store`` is a shared store (the ``shared_store`` fixture, or ``<backend>_shared_store``): one whose URL no
        other store of the session has, and whose datasets no test changes.
        """
        key = (store.url, images)
        if key not in self._built:
            self._built[key] = upload_and_pack(store, images, self._tmp_path_factory.mktemp(images.name))
        return self._built[key]


@pytest.fixture(scope="session")
def shared_datasets(tmp_path_factory: pytest.TempPathFactory) -> SharedDatasets:
    """The packed datasets of the session (see :class:`SharedDatasets`)."""
    return SharedDatasets(tmp_path_factory)
