"""``reader(name)``: a dataset's samples as tuples in ``.list`` column order, from any store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from datamount.datasets import catalog
from datamount.datasets.manifest import Manifest
from datamount.datasets.shards import ShardSource
from datamount.storage import Store, open_store
from datamount.storage.cache import CACHE_DIR_ENV, ContentCache

DEFAULT_MAX_BYTES_IN_FLIGHT = 256 << 20
#: Rows in one unit of work of an unpacked version (packed versions use their row groups).
DEFAULT_ROWS_PER_SPAN = 1024


class DatasetReader:
    """A reader creator over one dataset version: each call returns a fresh iterator over one pass.

    The version is fixed when the reader is made (``name`` means the latest committed one at that moment), so a
    new upload never changes what a running job reads. Picklable: worker processes can take it.
    """

    def __init__(
        self,
        name: str,
        store: Store | str | None = None,
        *,
        max_requests: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
        use_shards: bool = True,
        cache: ContentCache | str | bool | None = None,
    ) -> None:
        self.store = open_store(store)
        self.manifest: Manifest = catalog.resolve(self.store, name)
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.shards = (
            ShardSource(self.store, self.manifest, cache=_cache(cache)) if use_shards and self.manifest.shards else None
        )
        if self.shards is None and not self.manifest.list_sha256:
            raise ValueError(f"{self.manifest.ref} is stored only as Parquet shards; read it with use_shards=True")
        self._rows = catalog.read_rows(self.store, self.manifest) if self.shards is None else []
        image_objects = self.shards is None and self.manifest.kind == "image"
        self._located = catalog.object_locations(self.manifest, self._rows) if image_objects else []

    def __len__(self) -> int:
        return self.manifest.rows

    def __repr__(self) -> str:
        packed = ", packed" if self.shards is not None else ""
        return f"DatasetReader({self.manifest.ref!r}, {self.store.url!r}, rows={self.manifest.rows}{packed})"

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        if self.shards is not None:
            return self.shards.samples()
        if self.manifest.kind == "image":
            return self._image_samples()
        return iter(self._rows)

    def __getitem__(self, index: int) -> tuple[Any, ...]:
        """Row ``index`` (for samplers): from packed shards, only the row group that holds it is read."""
        if index < 0:
            index += self.manifest.rows
        if self.shards is not None:
            return self.shards.row(index)
        if not 0 <= index < len(self._rows):
            raise IndexError(f"row {index} is out of range: {self.manifest.ref} has {self.manifest.rows} rows")
        row = self._rows[index]
        if self.manifest.kind != "image":
            return row
        return (self.store.read(self._located[index][0]), *row[1:])

    def spans(self, rows_per_span: int = DEFAULT_ROWS_PER_SPAN) -> list[range]:
        """The version cut into consecutive row ranges: the row groups of a packed version (each read with one
        request), else ranges of ``rows_per_span`` list lines. Distributed readers hand these out as units of work."""
        if self.shards is not None:
            return self.shards.row_groups()
        if rows_per_span < 1:
            raise ValueError(f"rows_per_span must be at least 1, not {rows_per_span}")
        total = self.manifest.rows
        return [range(start, min(start + rows_per_span, total)) for start in range(0, total, rows_per_span)]

    def rows(self, start: int, stop: int) -> Iterator[tuple[Any, ...]]:
        """Rows ``start`` to ``stop - 1`` of the version, in order, as :meth:`__call__` yields them."""
        start, stop = max(start, 0), min(stop, self.manifest.rows)
        if self.shards is not None:
            return self.shards.rows(start, stop)
        if self.manifest.kind == "image":
            return self._image_samples(start, stop)
        return iter(self._rows[start:stop])

    def _image_samples(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[Any, ...]]:
        located = self._located[start:stop]
        blobs = self.store.read_many(
            (path for path, _ in located),
            sizes=(size for _, size in located),
            max_requests=self.max_requests,
            max_bytes=self.max_bytes,
        )
        for row, data in zip(self._rows[start:stop], blobs, strict=True):
            yield (data, *row[1:])


def _cache(option: ContentCache | str | bool | None) -> ContentCache | None:
    """The shard cache a reader uses: given, at a path, the default one (``True``), or from the environment."""
    if isinstance(option, ContentCache):
        return option
    if option is True:
        return ContentCache()
    if isinstance(option, str):
        return ContentCache(option)
    if option is None and os.environ.get(CACHE_DIR_ENV):
        return ContentCache()
    return None


def reader(name: str, store: Store | str | None = None, **options: Any) -> DatasetReader:
    """A Paddle-style reader creator over dataset ``name`` (``name@N`` for a given version).

    Image datasets yield ``(raw_bytes, label, ...)``: the uploaded file's exact bytes, never decoded; text datasets
    yield their columns as strings. A packed version is read from its Parquet shards (the same tuples, in the same
    order); ``cache=True`` (or ``$DATAMOUNT_CACHE_DIR``) keeps remote shards in a local cache for the next epoch.
    ``store`` defaults to the default store (``$DATAMOUNT_STORE``), so the same
    script reads from a laptop's local folder or a cluster's shared store, as its environment says. A name the
    user has no dataset for is looked up in the store's public area.
    """
    return DatasetReader(name, store, **options)
