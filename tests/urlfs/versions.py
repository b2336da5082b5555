"""Versions to read through ``datamount://`` and filesystems that read them, on a local store and on moto's S3."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datamount.datasets import pack, upload
from datamount.datasets.manifest import Manifest
from datamount.readers import reader
from datamount.storage import Store
from datamount.urlfs import DatamountFileSystem
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET

#: The versions each test reads: ``packed``, whose files are only in its shards (``upload --pack``), and
#: ``unpacked``, whose files are objects (and which ``pack`` gave shards too, so that Parquet tools have some).
NAMES = ("packed", "unpacked")
ROWS = 48


@dataclass(frozen=True)
class Versions:
    store: Store
    source: Path  # the uploaded list
    manifests: dict[str, Manifest]
    cache: Path
    endpoint_url: str | None = None  # an S3 store's

    def filesystem(self, *, endpoint_url: str | None = None) -> DatamountFileSystem:
        """A new filesystem on the store (through ``endpoint_url`` for an S3 store, when given)."""
        return DatamountFileSystem(**self.options(endpoint_url=endpoint_url), skip_instance_cache=True)

    def options(self, *, endpoint_url: str | None = None) -> dict[str, Any]:
        """The ``storage_options`` of a filesystem on the store."""
        options: dict[str, Any] = {}
        if self.store.local_path() is None:
            endpoint = endpoint_url or self.endpoint_url
            options = {"endpoint_url": endpoint, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
        return {"store": self.store.url, "options": options, "cache": str(self.cache)}

    def url(self, name: str, path: str = "") -> str:
        return f"datamount://_/{name}@1" + (f"/{path}" if path else "")

    def rows(self, name: str) -> list[tuple[bytes, str]]:
        """What ``reader()`` yields for version ``name``."""
        return list(reader(f"{name}@1", self.store)())

    def shard_urls(self, name: str) -> list[str]:
        return [self.url(name, "shards/" + shard.path.rsplit("/", 1)[-1]) for shard in self.manifests[name].shards]


def write_png_list(folder: Path, count: int) -> Path:
    """``count`` PNGs of random pixels (about 20 KB each) under ``folder/data/``, and the list naming them."""
    from PIL import Image

    generator = random.Random(count)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        pixels = bytes(generator.getrandbits(8) for _ in range(80 * 80 * 3))
        Image.frombytes("RGB", (80, 80), pixels).save(folder / "data" / f"img{i:04d}.png")
        rows.append(f"./data/img{i:04d}.png\t{i % 4}\n")
    (folder / "train.list").write_text("".join(rows), encoding="utf-8")
    return folder / "train.list"


def make_versions(store: Store, folder: Path, endpoint_url: str | None = None) -> Versions:
    """Upload the same image list as ``packed`` (in shards of a few row groups) and ``unpacked`` (objects, then
    packed into shards as well)."""
    source = write_png_list(folder / "src", ROWS)
    sizes = {"shard_bytes": 400_000, "row_group_bytes": 100_000}
    manifests = {"packed": upload(source, "packed", store=store, packed=True, **sizes).manifest}
    upload(source, "unpacked", store=store)
    manifests["unpacked"] = pack("unpacked", store=store, **sizes)
    return Versions(store, source, manifests, folder / "cache", endpoint_url)


def table_rows(table: Any) -> list[tuple[bytes, str]]:
    """The ``(file, label)`` of each row of a shards' table, in row order."""
    ordered = table.sort_by("index")
    return list(zip(ordered.column("file").to_pylist(), ordered.column("label").to_pylist(), strict=True))
