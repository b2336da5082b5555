"""Reading an installed public dataset: one split's rows, and the small files kept with it."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any, ClassVar

from datamount.datasets import catalog, layout
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.manifest import Manifest
from datamount.datasets.names import PUBLIC_NAMESPACE
from datamount.datasets.reader_creator import ReaderCreator
from datamount.datasets.rows import RowSource, closing, open_rows
from datamount.storage import IntegrityError, Store, open_store


def installed(store: Store, name: str) -> Manifest:
    """The latest committed version of public dataset ``name`` (``mnist``...), or an error saying how to install
    it."""
    try:
        return catalog.resolve(store, f"{PUBLIC_NAMESPACE}/{name}", public_fallback=False)
    except DatasetNotFoundError:
        raise DatasetNotFoundError(
            f"the public dataset {name} is not installed in {store.url}; install it with 'datamount public install "
            f"{name}' (or datamount.datasets.public.install({name!r}))"
        ) from None


def attached_file(store: Store, manifest: Manifest, name: str) -> bytes:
    """A small file kept with the dataset (a dictionary, a class table), checked against its sha256."""
    entry = next((entry for entry in manifest.files if entry.path == name), None)
    if entry is None:
        raise DatasetNotFoundError(f"{manifest.ref} has no file {name!r}; reinstall it ('datamount public rm' first)")
    path = layout.object_path(manifest.name, entry.sha256)
    data = store.read(path)
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise IntegrityError(f"{store.url_for(path)} ({name} of {manifest.ref}) does not match its sha256")
    return data


class SplitReader(ReaderCreator):
    """A reader creator over one split of an installed public dataset; each call is one pass.

    The version is fixed when the reader is made. Picklable, so that worker processes can take it.
    """

    #: What the dataset's ``train()`` and ``test()`` take, as :meth:`made_by` writes the call.
    ARGUMENTS: ClassVar[str] = ""

    def __init__(self, dataset: str, split: str, store: Store | str | None = None) -> None:
        self.store = open_store(store)
        self.dataset = dataset
        self.split = split
        self.manifest = installed(self.store, dataset)
        self.source: RowSource = open_rows(self.store, self.manifest, split=split)

    def __len__(self) -> int:
        return len(self.source)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.manifest.ref!r}, split={self.split!r}, rows={len(self)})"

    def made_by(self) -> str:
        return f"{self.dataset}.{self.split}({self.ARGUMENTS})"

    @contextlib.contextmanager
    def rows(self) -> Iterator[Iterator[tuple[Any, ...]]]:
        """The split's rows as stored, closed when the block ends."""
        with closing(self.source.rows(0, len(self.source))) as rows:
            yield rows

    def attached(self, name: str) -> bytes:
        return attached_file(self.store, self.manifest, name)
