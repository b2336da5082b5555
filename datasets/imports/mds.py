"""MosaicML Streaming's MDS datasets (``streaming.MDSWriter``, mosaicml-streaming 0.13): a folder of shards and their
``index.json``.

The index (streaming's ``base/format/base/writer.py``) is ``{"version": 2, "shards": [...]}``; each shard records
``column_names``, ``column_encodings``, ``column_sizes`` (the bytes of a fixed-size encoding, else null),
``compression`` (null, or ``zstd``, ``gz:9``...), ``hashes`` (algorithm names), ``samples``, ``size_limit`` and
``raw_data`` / ``zip_data``: ``{basename, bytes, hashes}`` of the shard and of its compressed file (null where it is
not compressed). A shard (``mds/writer.py``) is ``uint32 samples``, ``uint32 offsets[samples + 1]``, its config as
JSON (the entry but its samples and files), then the samples as :mod:`.packed_rows` lays rows out: a ``uint32`` size for
each column of no fixed size, then each column's bytes. Splits: the folder's ``index.json``, or where it has none, the
``index.json`` of each of its subfolders, each a split (in name order).

Columns: the shards' own names, in their order. Types: ``bytes`` binary, ``str`` string, ``int`` int64,
``int8``...``uint64`` and ``float16``...``float64`` the Arrow type of that width, ``str_int`` int64 and ``str_float``
float64 (parsed from their text), ``json`` string (the JSON text, checked to parse); ``jpeg`` and ``png`` binary with
:data:`~.source.IMAGE_EXTENSION`; ``str_decimal`` string and any other (``pil``, ``pkl``, ``ndarray...``,
``list[...]``) binary, both holding streaming's bytes with :data:`~.source.SOURCE_ENCODING` (the encoding's name).

What is checked: each file's size against ``bytes``; every hash recorded of it and of what it decompresses to, that
hashlib or xxhash computes (streaming's own algorithm names). An algorithm neither computes is passed over where
another is checked, and refused where it is the only one recorded: the index promises a check nothing here can do.
A shard's checksums are compared when its last byte is read, so rows of a shard whose checksum then fails have been
yielded: the :class:`~.source.SourceError` that follows stops the import, which commits nothing. Also: the header's
sample count and config against the index, the offsets table, each sample's sizes against its bytes and the fixed
sizes, UTF-8 and JSON text. Compressed shards (``zstd``, ``gz``, ``bz2``, ``br``: a stream; ``snappy``: whole) are
decompressed as they are read.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import pyarrow as pa
import xxhash

from datamount.datasets.imports import packed_rows
from datamount.datasets.imports.location import Location
from datamount.datasets.imports.packed_rows import Bytes, Column, Damaged, RowError
from datamount.datasets.imports.source import (
    IMAGE_EXTENSION,
    SOURCE_ENCODING,
    SourceError,
    SourceShard,
)

FORMAT = "mds"
INDEX = "index.json"

#: Encodings whose bytes have a plain Arrow type: the type, and the bytes of every value (None: any).
_PLAIN: dict[str, tuple[pa.DataType, int | None]] = {
    "bytes": (pa.binary(), None),
    "str": (pa.string(), None),
    "json": (pa.string(), None),
    "int": (pa.int64(), 8),
    "str_int": (pa.int64(), None),
    "str_float": (pa.float64(), None),
    "str_decimal": (pa.string(), None),
}
for _kind in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()):
    _PLAIN[str(_kind)] = (_kind, _kind.bit_width // 8)
for _kind, _name in ((pa.float16(), "float16"), (pa.float32(), "float32"), (pa.float64(), "float64")):
    _PLAIN[_name] = (_kind, _kind.bit_width // 8)
_IMAGES = {"jpeg": b"jpg", "png": b"png"}
#: Encodings kept as streaming's bytes, and the bytes of every value where that is fixed (ndarray's by its shape).
_KEPT = frozenset({"pil", "pkl", "jpeg_array", "jpegarray", "list[pil]", "list[jpeg]", "list[png]", "str_decimal"})
#: Compressions read as a stream (Arrow's codec names), by streaming's names; snappy is read whole.
_STREAMED = {"zstd": "zstd", "gz": "gzip", "bz2": "bz2", "br": "brotli"}
#: The keys of a shard's entry that its header repeats.
_CONFIG_KEYS = ("column_encodings", "column_names", "column_sizes", "compression", "format", "hashes", "size_limit")


@dataclass(frozen=True)
class _File:
    """A file an entry records: its path in the store, its bytes and hashes."""

    path: str
    size: int
    hashes: dict[str, str]


@dataclass(frozen=True)
class _Shard:
    """A shard: its name in the source, its split, its samples, its data before compression and the file read
    (the same, where it is not compressed), its compression, and its entry's config."""

    name: str
    split: str
    rows: int
    raw: _File
    file: _File
    compression: str | None
    config: dict[str, Any] = field(repr=False)


def open_mds(location: Location) -> MdsSource:
    """The MDS dataset at ``location`` (its folder, or its ``index.json``)."""
    return MdsSource(location)


class MdsSource:
    """An MDS dataset opened for import (see the module's rule)."""

    format = FORMAT

    def __init__(self, location: Location) -> None:
        self.where = location.where
        self._store = location.store
        prefix = packed_rows.folder_of(location, INDEX, FORMAT)
        self._prefix = prefix
        self._sizes = sizes = location.store.list(prefix.rstrip("/"))
        self._shards: list[_Shard] = []
        self.schema = pa.schema([])
        self._columns: list[Column] = []
        for split in _splits(prefix, sizes, self.where):
            self._add_split(prefix, split, sizes)
        self.shards = [
            SourceShard(shard.name, sizes[shard.file.path], shard.rows, shard.split) for shard in self._shards
        ]

    def batches(self, shard: int, skip: int = 0) -> Iterator[pa.RecordBatch]:
        entry = self._shards[shard]
        if skip < 0:
            raise ValueError(f"skip must be 0 or more, got {skip}")
        try:
            yield from self._batches(entry, skip)
        except RowError as error:
            raise SourceError(self.where, entry.name, error.reason, sample=error.row) from error

    def _batches(self, shard: _Shard, skip: int) -> Iterator[pa.RecordBatch]:
        actual = self._sizes[shard.file.path]
        if shard.compression is None:
            raw_hashers = _hashers(shard.raw.hashes)
            with self._store.open(shard.raw.path) as handle:
                tally = packed_rows.Tally(handle, raw_hashers.values())
                yield from self._rows(shard, packed_rows.Stream(tally), actual, skip)
                self._rest(shard, packed_rows.Stream(tally), tally)
            self._check(shard, shard.raw, tally.count, raw_hashers, "")
            return
        if actual != shard.file.size:
            raise SourceError(self.where, shard.name, f"has {actual} bytes, {INDEX} records {shard.file.size}")
        zip_hashers, raw_hashers = _hashers(shard.file.hashes), _hashers(shard.raw.hashes)
        with self._store.open(shard.file.path) as handle:
            packed = packed_rows.Tally(handle, zip_hashers.values())
            inflated = packed_rows.Tally(self._decompressing(shard, packed), raw_hashers.values())
            stream = packed_rows.Stream(inflated)
            yield from self._rows(shard, stream, shard.raw.size, skip)
            self._rest(shard, stream, inflated)
            self._rest(shard, packed_rows.Stream(packed), packed)
        self._check(shard, shard.file, packed.count, zip_hashers, "compressed ")
        self._check(shard, shard.raw, inflated.count, raw_hashers, "decompressed ")

    def _rows(self, shard: _Shard, source: Bytes, size: int, skip: int) -> Iterator[pa.RecordBatch]:
        """The samples of a shard whose data (decompressed) has ``size`` bytes."""
        header = 4 + 4 * (shard.rows + 1)
        offsets = packed_rows.read_offsets(self._read(source, None, 0, header), shard.rows)
        if not header <= offsets[0] <= size:
            raise RowError(0, f"the offsets table puts sample 0 at byte {offsets[0]}, outside the shard")
        self._check_config(shard, self._read(source, None, header, int(offsets[0])))
        packed_rows.check_offsets(offsets, first=int(offsets[0]), size=size)
        if offsets[-1] != shard.raw.size and shard.rows:
            reason = f"the offsets table ends it at byte {offsets[-1]}, {INDEX} records {shard.raw.size} bytes"
            raise RowError(shard.rows - 1, reason)
        if offsets[-1] != shard.raw.size or size != shard.raw.size:
            reason = f"its samples end at byte {offsets[-1]} of {size}, {INDEX} records {shard.raw.size} bytes"
            raise SourceError(self.where, shard.name, reason)
        for start, stop in packed_rows.spans(offsets, skip):
            block = self._read(source, offsets, int(offsets[start]), int(offsets[stop]))
            bounds = offsets[start : stop + 1] - offsets[start]
            try:
                arrays = packed_rows.split(block, bounds, self._columns)
                _check_json(arrays, self._columns)
            except RowError as error:
                raise RowError(start + error.row, error.reason) from error
            yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._read(source, offsets, int(offsets[-1]), int(offsets[-1]))  # read past the rows skipped, hashing them

    def _read(self, source: Bytes, offsets: np.ndarray | None, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a shard's data; a :class:`RowError` naming the sample where they end early."""
        try:
            block = source.read(start, end)
        except Damaged as error:
            row = packed_rows.row_at(offsets, 0, error.at) if offsets is not None else 0
            raise RowError(row, f"{error.reason} (decompressing)") from error
        if len(block) < end - start:
            at = start + len(block)
            row = packed_rows.row_at(offsets, 0, at) if offsets is not None else 0
            raise RowError(row, f"the shard ends at byte {at}: truncated")
        return block

    def _rest(self, shard: _Shard, stream: packed_rows.Stream, tally: packed_rows.Tally) -> None:
        """Read what is left of a file (hashing it); any byte left past the data is an error."""
        try:
            left = stream.rest()
        except Damaged as error:
            raise SourceError(self.where, shard.name, f"{error.reason} (decompressing)") from error
        if left:
            raise SourceError(self.where, shard.name, f"{left} bytes follow its last sample")

    def _check(self, shard: _Shard, recorded: _File, count: int, hashers: dict[str, Any], which: str) -> None:
        """The bytes read and their hashes against those ``index.json`` records."""
        if count != recorded.size:
            raise SourceError(self.where, shard.name, f"has {count} {which}bytes, {INDEX} records {recorded.size}")
        for algorithm, hasher in hashers.items():
            if hasher.hexdigest() != recorded.hashes[algorithm]:
                reason = f"the {algorithm} of its {which}bytes is {hasher.hexdigest()}, {INDEX} records"
                raise SourceError(self.where, shard.name, f"{reason} {recorded.hashes[algorithm]}: damaged")

    def _check_config(self, shard: _Shard, text: bytes) -> None:
        try:
            config = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise RowError(0, f"its header's config is not JSON: {error}") from error
        if not isinstance(config, dict):
            raise RowError(0, "its header's config is not a JSON object")
        for key in _CONFIG_KEYS:
            if config.get(key) != shard.config.get(key):
                reason = f"its header records {key} {config.get(key)!r}, {INDEX} {shard.config.get(key)!r}"
                raise SourceError(self.where, shard.name, reason)

    def _decompressing(self, shard: _Shard, packed: packed_rows.Tally) -> IO[bytes] | pa.NativeFile:
        codec = str(shard.compression).split(":")[0]
        if codec in _STREAMED:
            return packed_rows.decompressing(packed, _STREAMED[codec])
        data = packed.read()
        try:
            return io.BytesIO(pa.decompress(data, shard.raw.size, codec="snappy", asbytes=True))
        except pa.ArrowException as error:
            raise SourceError(self.where, shard.name, f"its snappy data does not decompress: {error}") from error

    def _add_split(self, prefix: str, split: str, sizes: dict[str, int]) -> None:
        folder = f"{prefix}{split}/" if split else prefix
        index = packed_rows.read_index(self._store, folder + INDEX, self.where)
        entries = index.get("shards")
        if "chunks" in index and entries is None:
            raise SourceError(self.where, INDEX, "this is a litdata index: import it with --from-format litdata")
        if index.get("version") != 2 or not isinstance(entries, list):
            raise SourceError(self.where, INDEX, f"not an MDS index of version 2: version {index.get('version')!r}")
        for entry in entries:
            self._add_shard(folder, split, entry, sizes)

    def _add_shard(self, folder: str, split: str, entry: Any, sizes: dict[str, int]) -> None:
        name = f"{split}/{INDEX}" if split else INDEX
        try:
            raw, packed = entry["raw_data"], entry["zip_data"]
            rows = int(entry["samples"])
            raw_file = self._file(folder, split, raw)
            zip_file = self._file(folder, split, packed) if packed else raw_file
            compression = entry["compression"]
            config = {key: entry[key] for key in _CONFIG_KEYS}
        except (TypeError, KeyError, ValueError) as error:
            raise SourceError(self.where, name, f"a shard's entry does not read ({error}): {entry!r}") from error
        shard = _Shard(zip_file.path[len(self._prefix) :], split, rows, raw_file, zip_file, compression, config)
        if entry.get("format") != "mds" or entry.get("version") != 2:
            raise SourceError(self.where, shard.name, "its entry is not of MDS version 2")
        if bool(compression) != bool(packed):
            raise SourceError(self.where, shard.name, f"compression {compression!r} with zip_data {packed!r}")
        if compression and str(compression).split(":")[0] not in (*_STREAMED, "snappy"):
            raise SourceError(self.where, shard.name, f"compression {compression!r} is not read")
        if zip_file.path not in sizes:
            raise SourceError(self.where, shard.name, f"no such file (named by {INDEX})")
        for recorded in (raw_file, zip_file):
            _hashers(recorded.hashes, where=self.where, shard=shard.name)
        columns = _columns(entry, self.where, shard.name)
        if not self._shards:
            self._columns, self.schema = columns, pa.schema([column.field for column in columns])
        elif columns != self._columns:
            found = [(column.field.name, str(column.field.type)) for column in columns]
            raise SourceError(self.where, shard.name, f"its columns {found} differ from the first shard's")
        self._shards.append(shard)

    def _file(self, folder: str, split: str, info: Any) -> _File:
        path = packed_rows.inside(folder, str(info["basename"]), self.where)
        hashes = info.get("hashes") or {}
        if not isinstance(hashes, dict):
            raise ValueError(f"hashes {hashes!r}")
        return _File(path, int(info["bytes"]), {str(key): str(value) for key, value in hashes.items()})


def _splits(prefix: str, sizes: dict[str, int], where: str) -> list[str]:
    """The splits of the dataset at ``prefix``: ``""`` where it has an index, else its subfolders that have one."""
    if prefix + INDEX in sizes:
        return [""]
    splits = sorted(
        posixpath.dirname(path[len(prefix) :])
        for path in sizes
        if path.startswith(prefix) and path.count("/") == prefix.count("/") + 1 and path.endswith(f"/{INDEX}")
    )
    if not splits:
        raise SourceError(
            where, INDEX, "no such file, in the folder or its subfolders: the folder holds no MDS dataset"
        )
    return splits


def _columns(entry: dict[str, Any], where: str, shard: str) -> list[Column]:
    names, encodings, sizes = entry["column_names"], entry["column_encodings"], entry["column_sizes"]
    if not (isinstance(names, list) and isinstance(encodings, list) and isinstance(sizes, list)):
        raise SourceError(where, shard, "its column_names, column_encodings and column_sizes are not lists")
    if not len(names) == len(encodings) == len(sizes) or len(set(names)) != len(names):
        raise SourceError(where, shard, f"columns {names} with encodings {encodings} and sizes {sizes}")
    columns = []
    for name, encoding, size in zip(names, encodings, sizes, strict=True):
        kind, width, metadata = _encoding(str(encoding), where, shard)
        if size != width:
            raise SourceError(where, shard, f"column {name!r} of encoding {encoding!r} records size {size!r}")
        columns.append(Column(pa.field(str(name), kind, metadata=metadata), width, sized=width is None))
    return columns


def _encoding(encoding: str, where: str, shard: str) -> tuple[pa.DataType, int | None, dict[bytes, bytes] | None]:
    """The Arrow type of an MDS encoding, the bytes of each value (None: any) and the field's metadata."""
    if encoding in _PLAIN:
        kind, width = _PLAIN[encoding]
        metadata = {SOURCE_ENCODING: encoding.encode()} if encoding in ("json", "str_decimal") else None
        return kind, width, metadata
    if encoding in _IMAGES:
        return pa.binary(), None, {IMAGE_EXTENSION: _IMAGES[encoding]}
    if encoding in _KEPT or encoding == "ndarray" or encoding.startswith("ndarray:"):
        return pa.binary(), _ndarray_width(encoding, where, shard), {SOURCE_ENCODING: encoding.encode()}
    raise SourceError(where, shard, f"encoding {encoding!r} is not one of MDS's")


def _ndarray_width(encoding: str, where: str, shard: str) -> int | None:
    """The bytes of every value of ``ndarray:DTYPE:SHAPE`` (streaming's ``NDArray.from_str``), None for others."""
    parts = encoding.split(":")
    if parts[0] != "ndarray" or len(parts) < 3:
        return None
    try:
        shape = [int(dim) for dim in parts[2].split(",")]
        return int(np.prod(shape)) * np.dtype(parts[1]).itemsize
    except (TypeError, ValueError) as error:
        raise SourceError(where, shard, f"encoding {encoding!r} does not read: {error}") from error


def _check_json(arrays: list[pa.Array], columns: list[Column]) -> None:
    """That each value of a ``json`` column parses, as streaming decodes it."""
    for array, column in zip(arrays, columns, strict=True):
        if (column.field.metadata or {}).get(SOURCE_ENCODING) != b"json":
            continue
        for row, text in enumerate(array.to_pylist()):
            try:
                json.loads(text)
            except json.JSONDecodeError as error:
                raise RowError(row, f"field {column.field.name!r} is not JSON: {error}") from error


def _hashers(recorded: dict[str, str], *, where: str = "", shard: str = "") -> dict[str, Any]:
    """A fresh hasher for each algorithm in ``recorded`` that hashlib or xxhash computes (by streaming's names); a
    :class:`SourceError` where some are recorded and none is computed."""
    hashers = {}
    for algorithm in recorded:
        if algorithm in xxhash.algorithms_available:
            hashers[algorithm] = getattr(xxhash, algorithm)()
        elif hasattr(hashlib, algorithm) and not algorithm.startswith("shake_"):
            hashers[algorithm] = getattr(hashlib, algorithm)()
    if recorded and not hashers:
        raise SourceError(where, shard, f"its hashes {sorted(recorded)} are none that hashlib or xxhash computes")
    return hashers
