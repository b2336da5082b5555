"""Writing a public dataset into a store: rows straight into Parquet shards, split after split, the manifest last."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from datamount.datasets import catalog
from datamount.datasets.errors import InstallConflictError, SourceFormatError
from datamount.datasets.manifest import FileEntry, Manifest, ShardEntry, now_utc, object_key
from datamount.datasets.pack import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, ShardWriter, schema_for
from datamount.datasets.public_spec import PublicDataset
from datamount.storage import Store

#: Where a manifest says which rows and shards each split holds: ``{"train": {"rows": N, "shards": [a, b]}}``.
SPLITS_KEY = "splits"
#: Where a manifest names the public dataset it was built as.
PUBLIC_KEY = "public"


class PublicWriter:
    """The rows of one public dataset, written straight into Parquet shards of a new version in the store.

    Rows come split after split (:meth:`start_split`); each split's rows are contiguous and in shards of their own,
    so that a reader of one split reads only its shards. Nothing is visible until :meth:`commit` writes the
    manifest; :meth:`abort` removes what was written.

    Shard names carry a token of their own, so that two installs of the same dataset into a shared store never
    write the same file: the first to commit wins, the other finds the dataset installed and removes its shards
    (see :func:`datamount.datasets.public.install`). Shards left by a killed install are removed by the next
    install that commits.
    """

    def __init__(
        self,
        store: Store,
        spec: PublicDataset,
        scratch: str | os.PathLike[str],
        *,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    ) -> None:
        if shard_bytes < 1 or row_group_bytes < 1:
            raise ValueError("shard and row-group sizes must be positive")
        self.store = store
        self.spec = spec
        self.name = spec.dataset_name
        existing = catalog.versions(store, self.name)
        self.version = existing[-1] + 1 if existing else 1
        self._folder = catalog.dataset_folder(self.name)
        self._scratch = Path(scratch)
        self._shard_bytes = shard_bytes
        self._row_group_bytes = row_group_bytes
        provisional = Manifest(self.name, self.version, spec.kind, list(spec.columns), 0, [], "", 0, "", "")
        self._schema = schema_for(provisional)
        self._with_path = spec.kind == "image"
        self._split: str | None = None
        self._splits: dict[str, dict[str, Any]] = {}
        self._shards: list[ShardEntry] = []
        self._writer: ShardWriter | None = None
        self._pending: list[list[Any]] = [[] for _ in self._schema]
        self._pending_bytes = 0
        self._rows = 0
        self._files: dict[str, FileEntry] = {}
        self._sources: list[str] = []
        self._token = secrets.token_hex(4)

    @property
    def rows(self) -> int:
        """Rows written so far."""
        return self._rows

    def start_split(self, split: str) -> None:
        """The rows that follow belong to ``split`` (each split once, in any order)."""
        if split not in self.spec.splits:
            raise ValueError(f"{self.spec.name} has no split {split!r}; its splits: {', '.join(self.spec.splits)}")
        if split in self._splits:
            raise ValueError(f"split {split!r} of {self.spec.name} was already written")
        self._end_split()
        self._split = split
        self._splits[split] = {"rows": 0, "shards": [len(self._shards), len(self._shards)]}

    def add(self, *values: Any, path: str | None = None) -> None:
        """One row: the dataset's columns in order (bytes for an image, strings otherwise) and, for image datasets,
        the file's path in the source."""
        self._current_split()
        if len(values) != len(self.spec.columns):
            raise ValueError(f"a row of {self.spec.name} has {len(self.spec.columns)} values, got {len(values)}")
        row = [*values, self._rows]
        if self._with_path:
            row.append(path or "")
        for column, value in zip(self._pending, row, strict=True):
            column.append(value)
        self._pending_bytes += sum(len(value) for value in values)
        self._count(1)
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def add_columns(self, columns: Sequence[pa.Array], *, paths: pa.Array | None = None) -> None:
        """Many rows at once, as Arrow arrays of the dataset's columns (and, for image datasets, their paths)."""
        self._current_split()
        self._flush()
        count = len(columns[0])
        if count == 0:
            return
        extra = [pa.array(np.arange(self._rows, self._rows + count), pa.int64())]
        if self._with_path:
            extra.append(paths if paths is not None else pa.repeat(pa.scalar(""), count))
        batch = pa.record_batch([*columns, *extra], schema=self._schema)
        per_row = max(1, batch.nbytes // count)
        step = max(1, self._row_group_bytes // per_row)
        self._count(count)
        for start in range(0, count, step):
            self._write(batch.slice(start, step))

    def attach(self, name: str, data: bytes) -> FileEntry:
        """Keep a small file with the dataset (a dictionary, a class table): stored by its sha256 like any uploaded
        file, listed in the manifest's ``files`` and checked by ``datamount verify``."""
        digest = hashlib.sha256(data).hexdigest()
        self.store.write(f"{self._folder}/{object_key(digest)}", data)
        entry = FileEntry(name, len(data), digest)
        self._files[name] = entry
        return entry

    def used(self, source: str) -> None:
        """Record a source file's name (never a full local path) for the manifest's ``source``."""
        if source not in self._sources:
            self._sources.append(source)

    def commit(self, extra: Mapping[str, Any] | None = None) -> Manifest:
        """Write the last shard, then the manifest: from now on the dataset exists."""
        self._end_split()
        if not self._splits:
            raise SourceFormatError(f"the source of {self.spec.name} holds no split to install")
        empty = [split for split, info in self._splits.items() if info["rows"] == 0]
        if empty:
            raise SourceFormatError(f"the source of {self.spec.name} holds no rows for split {', '.join(empty)}")
        manifest = Manifest(
            name=self.name,
            version=self.version,
            kind=self.spec.kind,
            columns=list(self.spec.columns),
            rows=self._rows,
            files=sorted(self._files.values(), key=lambda entry: entry.path),
            list_sha256="",
            list_size=0,
            source=", ".join(self._sources),
            created=now_utc(),
            datamount_version=package_version("datamount"),
            shards=self._shards,
            extra={PUBLIC_KEY: self.spec.name, SPLITS_KEY: self._splits, **(extra or {})},
        )
        self._check_still_there()
        self.store.write(catalog.manifest_path(self.name, self.version), manifest.to_json())
        self._remove_unreferenced_shards()
        return manifest

    def abort(self) -> None:
        """Remove what this writer wrote (it committed nothing)."""
        self._writer = None  # its local file goes with the scratch folder
        self.store.remove_many(self._shard_paths())
        if catalog.versions(self.store, self.name):
            return
        self.store.remove_many(self._object_paths())
        if not self.store.list(self._folder):
            self.store.remove(self._folder, recursive=True, missing_ok=True)

    def _shard_paths(self) -> list[str]:
        return [f"{self._folder}/{shard.path}" for shard in self._shards]

    def _object_paths(self) -> list[str]:
        return [f"{self._folder}/{entry.object_key}" for entry in self._files.values()]

    def _check_still_there(self) -> None:
        present = self.store.list(self._folder)
        if any(path not in present for path in self._shard_paths() + self._object_paths()):
            raise InstallConflictError(
                f"files written by this install of {self.name} in {self.store.url} were removed while it ran (by "
                "another install of it?); nothing was committed: run it again"
            )

    def _remove_unreferenced_shards(self) -> None:
        """Shards of this version that the manifest does not list: left by a killed install, or by a concurrent
        one that will find the dataset installed."""
        kept = set(self._shard_paths())
        folder = f"{self._folder}/packs/{self.version}"
        self.store.remove_many(path for path in self.store.list(folder) if path not in kept)

    def _current_split(self) -> str:
        if self._split is None:
            raise ValueError("call start_split(...) before adding rows")
        return self._split

    def _count(self, rows: int) -> None:
        self._rows += rows
        self._splits[self._current_split()]["rows"] += rows

    def _flush(self) -> None:
        if self._pending[0]:
            self._write(pa.record_batch(self._pending, schema=self._schema))
            self._pending = [[] for _ in self._schema]
            self._pending_bytes = 0

    def _write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            number = len(self._shards)
            self._writer = ShardWriter(str(self._scratch / f"shard-{number:05d}.parquet"), self._schema)
        self._writer.write(batch)
        if self._writer.size >= self._shard_bytes:
            self._close_shard()

    def _close_shard(self) -> None:
        if self._writer is None:
            return
        relative = f"packs/{self.version}/shard-{self._token}-{len(self._shards):05d}.parquet"
        self._shards.append(self._writer.commit(self.store, self._folder, relative))
        self._writer = None
        if self._split is not None:
            self._splits[self._split]["shards"][1] = len(self._shards)

    def _end_split(self) -> None:
        self._flush()
        self._close_shard()
