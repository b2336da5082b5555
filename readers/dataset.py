"""``reader(name)``: a dataset's samples as tuples in ``.list`` column order, from any store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from datamount.datasets import catalog
from datamount.datasets.manifest import Manifest
from datamount.storage import Store, open_store

DEFAULT_MAX_BYTES_IN_FLIGHT = 256 << 20


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
    ) -> None:
        self.store = open_store(store)
        self.manifest: Manifest = catalog.resolve(self.store, name)
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self._rows = catalog.read_rows(self.store, self.manifest)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"DatasetReader({self.manifest.ref!r}, {self.store.url!r}, rows={len(self._rows)})"

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        if self.manifest.kind == "image":
            return self._image_samples()
        return iter(self._rows)

    def _image_samples(self) -> Iterator[tuple[Any, ...]]:
        folder = catalog.dataset_folder(self.manifest.name)
        objects = {entry.path: (f"{folder}/{entry.object_key}", entry.size) for entry in self.manifest.files}
        located = [objects[row[0]] for row in self._rows]
        blobs = self.store.read_many(
            (key for key, _ in located),
            sizes=(size for _, size in located),
            max_requests=self.max_requests,
            max_bytes=self.max_bytes,
        )
        for row, data in zip(self._rows, blobs, strict=True):
            yield (data, *row[1:])


def reader(name: str, store: Store | str | None = None, **options: Any) -> DatasetReader:
    """A Paddle-style reader creator over dataset ``name`` (``name@N`` for a given version).

    Image datasets yield ``(raw_bytes, label, ...)``: the uploaded file's exact bytes, never decoded; text datasets
    yield their columns as strings. ``store`` defaults to the default store (``$DATAMOUNT_STORE``), so the same
    script reads from a laptop's local folder or a cluster's shared store, as its environment says. A name the
    user has no dataset for is looked up in the store's public area.
    """
    return DatasetReader(name, store, **options)
