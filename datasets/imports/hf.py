"""Hugging Face ``datasets`` as an import's source (``--from-format hf``): a folder ``Dataset.save_to_disk`` or
``DatasetDict.save_to_disk`` wrote, or the cache folder of a dataset ``load_dataset`` built.

The rule:

- SOURCE is a folder. With a ``dataset_dict.json`` it holds one ``save_to_disk`` folder per split, in the order the
  file names them; with a ``state.json`` it is one ``save_to_disk`` folder (its split: the one ``state.json``
  records, else none), its files those ``state.json`` lists, in that order; with a ``dataset_info.json`` alone it is
  a ``load_dataset`` cache folder, whose files are ``<name>-<split>.arrow`` or ``<name>-<split>-00000-of-0000N.arrow``
  (``<name>``: the dataset's, as ``dataset_info.json`` records it), its splits in the order that file gives them.
- ``split=None`` imports every split, a split's shards together; a split's name imports that split alone (a name
  that is not there is an error listing those that are).
- The shards are the Arrow files (IPC streams), each with its split. The schema is the first file's, with the
  features ``datasets`` recorded in it (else in ``dataset_info.json``) applied (:mod:`.hf_features`); a file whose
  schema or features differ from the first's is a :class:`~.source.SourceError` naming it.
- Checked: every file ``state.json`` lists is there (a file it does not list is not the dataset's, and is left out
  as ``load_from_disk`` leaves it out); a cache folder holds every shard of a split its names count (``-of-0000N``);
  each file is read whole as a stream and ends with the stream's end mark (a file cut short anywhere is an error
  naming it and the samples read); a cache folder's shards hold the rows ``dataset_info.json`` records (a split's
  ``num_examples``, each shard's ``shard_lengths``). A ``save_to_disk`` folder's counts are not checked: see
  NOTE [ Row counts of a saved dataset ].

NOTE [ Row counts of a saved dataset ]: ``save_to_disk`` writes the ``dataset_info.json`` of the dataset it saves,
and ``select``, ``filter`` and ``shard`` carry that over unchanged: ``load_dataset(...)["train"].select(range(3))``
is saved with the three rows and ``"num_examples": 10``. Its counts say nothing of the files beside them (and
``load_from_disk`` does not read them); a cache folder's are written by the builder with its files.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from datamount.datasets.imports.hf_features import FeatureColumns, schema_difference, stored_features
from datamount.datasets.imports.location import Location
from datamount.datasets.imports.source import BATCH_ROWS, SourceError, SourceShard
from datamount.storage import ObjectNotFoundError
from datamount.storage.pools import generator_pool

#: Bytes read from a file's start for its schema: one ranged read for the schema of thousands of columns (a larger
#: one takes a second).
HEAD_GUESS = 64 << 10
#: Files whose schemas are read at once when a source is opened.
HEAD_READERS = 8
#: What begins each message of an Arrow IPC stream, and the mark that ends the stream.
_CONTINUATION = b"\xff\xff\xff\xff"
_END_OF_STREAM = _CONTINUATION + b"\x00\x00\x00\x00"
_SAVED_DICT, _SAVED, _INFO = "dataset_dict.json", "state.json", "dataset_info.json"


@dataclass(frozen=True)
class _Split:
    """A split's files (relative to the source, in order) and the rows each holds where the source records them."""

    name: str
    files: list[str]
    rows: list[int | None]


def open_hf(location: Location, split: str | None = None) -> HfSource:
    """The dataset in the folder at ``location`` (see the module's rule): every split, or ``split`` alone."""
    return HfSource(location, split)


class HfSource:
    """A Hugging Face dataset opened for import (a :class:`~.source.Source`)."""

    format = "hf"

    def __init__(self, location: Location, split: str | None = None) -> None:
        self.store = location.store
        self.where = location.where
        if location.names:
            raise ValueError(f"{self.where}: a Hugging Face dataset is a folder (save_to_disk's, or a cache folder)")
        listing = self.store.list("")
        splits = self._splits(listing, split)
        self.shards = [
            SourceShard(name, listing[name], rows, part.name)
            for part in splits
            for name, rows in zip(part.files, part.rows, strict=True)
        ]
        if not self.shards:
            raise SourceError(self.where, splits[0].name if splits else _INFO, "it holds no Arrow file")
        with generator_pool(HEAD_READERS, "hf-schemas") as pool:
            schemas = list(pool.map(self._schema, self.shards))
        self._stored = schemas[0]
        features = self._features(splits[0], listing)
        for shard, schema in zip(self.shards, schemas, strict=True):
            self._check_schema(shard.name, schema)
        self._columns = FeatureColumns.of_source(self.where, self.shards[0].name, self._stored, features)
        self.schema = self._columns.schema

    def batches(self, shard: int, skip: int = 0) -> Iterator[pa.RecordBatch]:
        if skip < 0:
            raise ValueError(f"skip must be >= 0, got {skip}")
        entry = self.shards[shard]
        with self.store.open(entry.name) as file:
            reader = self._guarded(entry, 0, lambda: pa.ipc.open_stream(file))
            self._check_schema(entry.name, reader.schema)
            read = 0
            while (batch := self._guarded(entry, read, lambda: next(reader, None))) is not None:
                before, read = read, read + batch.num_rows
                for start in range(max(skip, before), read, BATCH_ROWS):
                    part = batch.slice(start - before, min(BATCH_ROWS, read - start))
                    yield self._columns.batch(part, self._refuse(entry, start))
            self._check_end(entry, file, read)

    def _guarded(self, entry: SourceShard, read: int, step: Callable[[], Any]) -> Any:
        """``step()``, a read of the stream of ``entry`` after ``read`` samples; an Arrow error as a SourceError."""
        try:
            return step()
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(
                self.where, entry.name, f"its stream is cut short or damaged: {exc}", sample=read
            ) from exc

    def _check_end(self, entry: SourceShard, file: Any, read: int) -> None:
        """The stream ended with its end mark at the file's end, and held the rows recorded for it."""
        ended = file.tell()
        if ended == entry.size and ended >= len(_END_OF_STREAM):
            file.seek(ended - len(_END_OF_STREAM))
            ended = ended if file.read(len(_END_OF_STREAM)) == _END_OF_STREAM else -1
        if ended != entry.size:
            raise SourceError(
                self.where, entry.name, "its stream's end mark is not where the file ends (cut short?)", sample=read
            )
        if entry.rows is not None and read != entry.rows:
            raise SourceError(self.where, entry.name, f"it holds {read} samples, not the {entry.rows} of {_INFO}")

    def _refuse(self, entry: SourceShard, first: int) -> Callable[[int, str], SourceError]:
        """Refusals of rows of a batch whose first row is the shard's row ``first``."""
        return lambda row, reason: SourceError(self.where, entry.name, reason, sample=first + row)

    def _schema(self, shard: SourceShard) -> pa.Schema:
        """The schema that begins file ``shard``'s stream: one ranged read (two for a large schema)."""
        head = self.store.read_range(shard.name, 0, min(shard.size, HEAD_GUESS))
        if len(head) < len(_END_OF_STREAM) or head[: len(_CONTINUATION)] != _CONTINUATION:
            raise SourceError(self.where, shard.name, "it does not begin with an Arrow stream's schema")
        length = len(_END_OF_STREAM) + int.from_bytes(head[len(_CONTINUATION) : len(_END_OF_STREAM)], "little")
        if length > shard.size:
            raise SourceError(self.where, shard.name, "it ends within its stream's schema: cut short")
        if length > len(head):
            head += self.store.read_range(shard.name, len(head), length)
        try:
            return pa.ipc.read_schema(pa.py_buffer(head[:length]))
        except (OSError, pa.ArrowException) as exc:
            raise SourceError(self.where, shard.name, f"its stream's schema cannot be read: {exc}") from exc

    def _check_schema(self, name: str, schema: pa.Schema) -> None:
        """File ``name``'s ``schema`` is the first file's (:func:`.hf_features.schema_difference`)."""
        try:
            difference = schema_difference(schema, self._stored)
        except ValueError as exc:
            raise SourceError(self.where, name, str(exc)) from exc
        if difference is not None:
            raise SourceError(self.where, name, f"its schema is not {self.shards[0].name}'s: {difference}")

    def _features(self, first: _Split, listing: dict[str, int]) -> dict[str, Any] | None:
        """The features recorded in the first file's schema, else in the ``dataset_info.json`` beside it."""
        try:
            recorded = stored_features(self._stored)
        except ValueError as exc:
            raise SourceError(self.where, first.files[0], str(exc)) from exc
        info = posixpath.join(posixpath.dirname(first.files[0]), _INFO)
        if recorded is not None or info not in listing:
            return recorded
        features = self._json(info).get("features")
        return features if isinstance(features, dict) else None

    def _splits(self, listing: dict[str, int], split: str | None) -> list[_Split]:
        """The splits of the folder (see the module's rule), in order: every one, or the one named ``split``."""
        if _SAVED_DICT in listing:
            names = self._json(_SAVED_DICT).get("splits")
            if not isinstance(names, list) or not all(isinstance(name, str) and _plain(name) for name in names):
                raise SourceError(self.where, _SAVED_DICT, f"its splits are not a list of names: {names!r}")
            return [self._saved(listing, f"{name}/", name) for name in _chosen(names, split, self.where)]
        if _SAVED in listing:
            saved = self._saved(listing, "", None)
            _chosen([saved.name] if saved.name else [], split, self.where)
            return [saved]
        if _INFO in listing:
            info = self._json(_INFO)
            splits = info.get("splits")
            if not isinstance(splits, dict) or not splits:
                raise SourceError(self.where, _INFO, "it records no splits")
            prefixes = [p for p in dict.fromkeys((info.get("dataset_name"), info.get("builder_name"))) if p]
            chosen = _chosen(list(splits), split, self.where)
            return [self._built_split(listing, prefixes, name, splits[name]) for name in chosen]
        raise ObjectNotFoundError(
            f"{self.where}: not a Hugging Face dataset: it holds no {_SAVED_DICT}, {_SAVED} or {_INFO}"
        )

    def _saved(self, listing: dict[str, int], folder: str, name: str | None) -> _Split:
        """The split ``save_to_disk`` wrote in ``folder`` (named ``name``, else as its ``state.json`` says)."""
        state = self._json(folder + _SAVED)
        files = state.get("_data_files")
        names = [item.get("filename") for item in files] if isinstance(files, list) else None
        if not names or not all(isinstance(file, str) and _plain(file) for file in names):
            raise SourceError(self.where, folder + _SAVED, f"it lists no data files: {files!r}")
        for file in names:
            if folder + file not in listing:
                raise SourceError(self.where, folder + file, f"{folder + _SAVED} lists it, but it is not there")
        split = name if name is not None else state.get("_split") or ""
        return _Split(str(split), [folder + file for file in names], [None] * len(names))

    def _built_split(self, listing: dict[str, int], prefixes: list[str], name: str, recorded: Any) -> _Split:
        """Split ``name``'s files in a cache folder, with the rows ``recorded`` (its entry in ``dataset_info.json``)."""
        for prefix in prefixes:
            pattern = re.compile(rf"{re.escape(prefix)}-{re.escape(name)}(?:-(\d{{5}})-of-(\d{{5}}))?\.arrow")
            found = {file: match for file in listing if (match := pattern.fullmatch(file))}
            if found:
                break
        else:
            raise SourceError(self.where, _INFO, f"it records split {name!r}, of which no Arrow file is here")
        files = sorted(found)
        counts = {match.group(2) for match in found.values()}
        if len(files) > 1 or None not in counts:
            if None in counts or len(counts) > 1:
                raise SourceError(self.where, files[0], f"split {name!r}'s files do not count the same shards")
            total = int(counts.pop())
            expected = [f"{prefix}-{name}-{index:05d}-of-{total:05d}.arrow" for index in range(total)]
            if missing := next((file for file in expected if file not in found), None):
                raise SourceError(self.where, missing, f"split {name!r} has {total} shards, and this one is not here")
            files = expected
        return _Split(name, files, self._recorded_rows(name, recorded, len(files)))

    def _recorded_rows(self, name: str, recorded: Any, files: int) -> list[int | None]:
        """The rows of each of a cache folder's ``files`` files of split ``name``, where its entry records them."""
        recorded = recorded if isinstance(recorded, dict) else {}
        total, lengths = recorded.get("num_examples"), recorded.get("shard_lengths")
        if isinstance(lengths, list) and len(lengths) == files and all(isinstance(n, int) for n in lengths):
            if isinstance(total, int) and sum(lengths) != total:
                raise SourceError(self.where, _INFO, f"split {name!r}'s shard lengths do not add up to {total}")
            return list(lengths)
        if lengths is not None:
            raise SourceError(self.where, _INFO, f"split {name!r} has {files} files, and shard lengths {lengths!r}")
        return [total if isinstance(total, int) and files == 1 else None] * files

    def _json(self, name: str) -> dict[str, Any]:
        try:
            loaded = json.loads(self.store.read(name))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SourceError(self.where, name, f"it is not JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise SourceError(self.where, name, "it is not a JSON object")
        return loaded


def _chosen(splits: list[str], split: str | None, where: str) -> list[str]:
    """``splits``, or ``split`` alone; a :class:`ValueError` listing the splits where it is not one of them."""
    if split is None:
        return splits
    if split not in splits:
        there = ", ".join(repr(name) for name in splits) or "none"
        raise ValueError(f"{where}: no split {split!r} (the splits there: {there})")
    return [split]


def _plain(name: str) -> bool:
    """Whether ``name`` is a plain file or folder name (no path)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")
