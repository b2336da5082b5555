"""Writing a public dataset into a store: rows straight into Parquet shards, split after split, the manifest last."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from datamount.datasets import catalog, layout
from datamount.datasets.errors import InstallConflictError, SourceFormatError
from datamount.datasets.manifest import SPLITS_KEY, FileEntry, Kind, Manifest
from datamount.datasets.public.spec import PublicDataset
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, ShardWriter, list_schema
from datamount.storage import Store
from datamount.storage.checksums import xxh3

#: Where a manifest names the public dataset it was built as.
PUBLIC_KEY = "public"


class PublicWriter:
    """The rows of one public dataset, written straight into Parquet shards of a new version in the store.

    Rows come split after split (:meth:`start_split`); each split's rows are contiguous and in shards of their own,
    so that a reader of one split reads only its shards. Nothing is visible until :meth:`commit` writes the
    manifest; :meth:`abort` removes what was written.

    The shards go to a pack folder of this writer's own, so that two installs of the same dataset into a shared
    store never write the same file: the first to commit wins, the other finds the dataset installed and removes its
    shards (see :func:`datamount.datasets.public.install`). Objects it wrote, and what a killed install left, are
    removed when no install is at work (:func:`datamount.datasets.catalog.remove_unused_parts`).
    """

    def __init__(
        self,
        store: Store,
        spec: PublicDataset,
        *,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    ) -> None:
        self.store = store
        self.spec = spec
        self.name = spec.dataset_name
        self._kind = Kind(spec.kind)
        self._shards = ShardWriter(
            store,
            self.name,
            list_schema(self.name, self._kind, spec.columns),
            shard_bytes=shard_bytes,
            row_group_bytes=row_group_bytes,
        )
        self._split: str | None = None
        self._splits: dict[str, dict[str, Any]] = {}
        self._files: dict[str, FileEntry] = {}
        self._sources: list[str] = []

    @property
    def rows(self) -> int:
        """Rows written so far."""
        return self._shards.rows

    def start_split(self, split: str) -> None:
        """The rows that follow belong to ``split`` (each split once, in any order)."""
        if split not in self.spec.splits:
            raise ValueError(f"{self.spec.name} has no split {split!r}; its splits: {', '.join(self.spec.splits)}")
        if split in self._splits:
            raise ValueError(f"split {split!r} of {self.spec.name} was already written")
        self._end_split()
        self._split = split
        first = len(self._shards.shards)
        self._splits[split] = {"rows": 0, "shards": [first, first]}

    def add(self, *values: Any, path: str | None = None) -> None:
        """One row: the dataset's columns in order (bytes for an image, strings otherwise) and, for image datasets,
        the file's path in the source."""
        self._current_split()
        if len(values) != len(self.spec.columns):
            raise ValueError(f"a row of {self.spec.name} has {len(self.spec.columns)} values, got {len(values)}")
        self._shards.add_row((*values, path or "") if self._kind is Kind.IMAGE else values)
        self._splits[self._current_split()]["rows"] += 1

    def add_columns(self, columns: Sequence[pa.Array], *, paths: pa.Array | None = None) -> None:
        """Many rows at once, as Arrow arrays of the dataset's columns (and, for image datasets, their paths)."""
        self._current_split()
        count = len(columns[0])
        if count == 0:
            return
        arrays = list(columns)
        if self._kind is Kind.IMAGE:
            arrays.append(paths if paths is not None else pa.repeat(pa.scalar(""), count))
        self._shards.add_batch(arrays)
        self._splits[self._current_split()]["rows"] += count

    def attach(self, name: str, data: bytes) -> FileEntry:
        """Keep a small file with the dataset (a dictionary, a class table): stored by its sha256 like any uploaded
        file, listed in the manifest's ``files`` and checked by ``datamount verify``."""
        digest = hashlib.sha256(data).hexdigest()
        self.store.write(layout.object_path(self.name, digest), data)
        entry = FileEntry(name, len(data), digest, xxh3(data))
        self._files[name] = entry
        return entry

    def used(self, source: str) -> None:
        """Record a source file's name (never a full local path) for the manifest's ``source``."""
        if source not in self._sources:
            self._sources.append(source)

    def commit(self, extra: Mapping[str, Any] | None = None) -> Manifest:
        """Write the last shard, then the manifest: from now on the dataset exists."""
        self._end_split()
        shards = self._shards.close()
        if not self._splits:
            raise SourceFormatError(f"the source of {self.spec.name} holds no split to install")
        empty = [split for split, info in self._splits.items() if info["rows"] == 0]
        if empty:
            raise SourceFormatError(f"the source of {self.spec.name} holds no rows for split {', '.join(empty)}")
        draft = Manifest(
            name=self.name,
            kind=self._kind,
            columns=list(self.spec.columns),
            rows=self.rows,
            files=sorted(self._files.values(), key=lambda entry: entry.path),
            shards=shards,
            source=", ".join(self._sources),
            extra={PUBLIC_KEY: self.spec.name, SPLITS_KEY: self._splits, **(extra or {})},
        )
        self._check_still_there(draft)
        return catalog.commit(self.store, draft)

    def abort(self) -> None:
        """Remove the shards this writer wrote (it committed nothing). Its objects may be another install's too
        (they are named by their content): they go with the unused parts once no install is at work."""
        self._shards.abort()

    def _object_paths(self) -> list[str]:
        return [layout.object_path(self.name, entry.sha256) for entry in self._files.values()]

    def _check_still_there(self, draft: Manifest) -> None:
        present = self.store.list(layout.dataset_folder(self.name))
        written = [layout.shard_path(self.name, shard) for shard in draft.shards] + self._object_paths()
        if any(path not in present for path in written):
            raise InstallConflictError(
                f"files written by this install of {self.name} in {self.store.url} were removed while it ran (by "
                "another install of it?); nothing was committed: run it again"
            )

    def _current_split(self) -> str:
        if self._split is None:
            raise ValueError("call start_split(...) before adding rows")
        return self._split

    def _end_split(self) -> None:
        self._shards.end_shard()
        if self._split is not None:
            self._splits[self._split]["shards"][1] = len(self._shards.shards)
