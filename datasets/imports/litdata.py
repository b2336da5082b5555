"""litdata's optimized datasets (``litdata.optimize``, litdata 0.2): a folder of chunk files and their ``index.json``.

The index (litdata's ``streaming/writer.py``) holds ``config`` and ``chunks``: each chunk's ``filename``, its rows
(``chunk_size``) and its bytes (``chunk_bytes``). ``config.data_format`` names litdata's serializer of each leaf of the
sample's pytree (``config.data_spec``); ``config.types`` the JSON types of dict samples. A chunk holds:

- rows as :mod:`.packed_rows` lays them out, each a ``uint32`` size for every leaf, then the leaves' bytes. Under
  ``compression="zstd"`` with ``compression_level="chunk"`` the whole file is one zstd stream (``*.zstd.bin``;
  ``chunk_bytes`` counts the bytes before); under ``"sample"`` each row is a zstd frame of its own;
- or rows in zstd frames (``compression_level="batch"``): ``LDFZ01``, the rows' offsets, a table of frames, the frames.
  A chunk is framed when it starts so, whatever the level says: litdata writes tuple samples unframed under "batch";
- or Arrow rows, what litdata writes for dict samples whose values are plain JSON (``config.types``): the rows' table
  with every row empty (or full), then an Arrow IPC file of the samples, its length and ``LDARW01``.

Columns: a dict sample's keys, in the order of its first sample, then the keys ``config.types`` adds. Otherwise the
path of each leaf in the sample's pytree, keys and positions joined by ``.``: ``0`` and ``1`` for a tuple
``(image, label)``, ``0`` for a sample that is one value. Types: ``bytes`` binary, ``str``/``text`` string, ``int``
int64, ``float`` float64, ``bool``; ``jpeg`` and ``image:EXT``/``file:EXT`` of an image extension binary with
:data:`~.source.IMAGE_EXTENSION`; any other serializer (``pil``, ``numpy``, ``tensor``, ``pickle``, ``json``...) binary
holding litdata's bytes with :data:`~.source.SOURCE_ENCODING` (the serializer's name). Arrow rows keep the types
litdata recorded, lists and structs as Arrow lists and structs.

What is checked: litdata records no checksum (its index holds each chunk's rows and bytes, and its reader checks
neither). So: each chunk's size against ``chunk_bytes`` (before compression), its row count against ``chunk_size``,
its offsets table (from the end of the header, never back, within the file), each row's leaf sizes against its bytes
and the fixed sizes of ``int``, ``float`` and ``bool``, strings' UTF-8, the zstd frames' sizes, the Arrow rows' count,
types and offsets. Encrypted chunks, and item loaders other than litdata's default (``PyTreeLoader``), are refused.
A chunk of Arrow rows, or one compressed whole, is read as one piece (its rows' directory is at its end); any other
is read a batch at a time.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from datamount.datasets.imports import packed_rows
from datamount.datasets.imports.location import Location
from datamount.datasets.imports.packed_rows import Bytes, Column, Damaged, RowError
from datamount.datasets.imports.source import (
    BATCH_ROWS,
    IMAGE_EXTENSION,
    SOURCE_ENCODING,
    SourceError,
    SourceShard,
)

FORMAT = "litdata"
INDEX = "index.json"

_ARROW_MAGIC = b"LDARW01\0"
_FRAMED_MAGIC = b"LDFZ01\0\0"
_FRAMED_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
#: Serializers whose bytes have a plain Arrow type: the type, and the size litdata gives every value (or None).
_PLAIN: dict[str, tuple[pa.DataType, int | None]] = {
    "bytes": (pa.binary(), None),
    "str": (pa.string(), None),
    "text": (pa.string(), None),
    "int": (pa.int64(), 8),
    "float": (pa.float64(), 8),
    "bool": (pa.bool_(), 1),
}
_IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"})
#: Serializers that keep litdata from writing a dict sample as Arrow rows (its writer.py, ``_MEDIA_FORMAT_KEYS``).
_MEDIA = frozenset(
    {"audio", "video", "image", "jpeg", "jpeg_array", "pil", "tiff", "text", "file", "mesh", "pdf", "nifti", "graph"}
    | {"tensor", "no_header_tensor", "no_header_numpy"}
)
_JSON_SCALARS = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
_JSON_SCALARS |= {"bytes": pa.binary(), "null": pa.null()}
_DICTS = frozenset({"builtins.dict", "collections.OrderedDict", "collections.defaultdict"})


@dataclass(frozen=True)
class _Chunk:
    """A chunk: its name in the source, its path in the store, its rows, its bytes in the store and before
    compression (``chunk_bytes``), and whether the whole file is compressed."""

    name: str
    path: str
    rows: int
    size: int
    raw: int
    whole: bool


def open_litdata(location: Location) -> LitdataSource:
    """The litdata dataset at ``location`` (its folder, or its ``index.json``)."""
    return LitdataSource(location)


class LitdataSource:
    """A litdata dataset opened for import (see the module's rule)."""

    format = FORMAT

    def __init__(self, location: Location) -> None:
        self.where = location.where
        self._store = location.store
        prefix = packed_rows.folder_of(location, INDEX, FORMAT)
        index = packed_rows.read_index(location.store, prefix + INDEX, self.where)
        config, chunks = index.get("config"), index.get("chunks")
        if "shards" in index and chunks is None:
            raise SourceError(self.where, INDEX, "this is a MosaicML MDS index: import it with --from-format mds")
        if not isinstance(config, dict) or not isinstance(chunks, list):
            raise SourceError(self.where, INDEX, "not a litdata index: it has no 'config' and 'chunks'")
        self._check_config(config)
        self._arrow = _arrow_rows(config)
        self.schema, self._columns = self._schema(config)
        compression = config.get("compression")
        self._sample_zstd = _rows_compressed(config)
        sizes = location.store.list(prefix.rstrip("/"))
        self._chunks = [self._chunk(entry, prefix, sizes, compression) for entry in chunks]
        self.shards = [SourceShard(chunk.name, chunk.size, chunk.rows) for chunk in self._chunks]

    def batches(self, shard: int, skip: int = 0) -> Iterator[pa.RecordBatch]:
        chunk = self._chunks[shard]
        if skip < 0:
            raise ValueError(f"skip must be 0 or more, got {skip}")
        try:
            yield from self._batches(chunk, skip)
        except RowError as error:
            raise SourceError(self.where, chunk.name, error.reason, sample=error.row) from error

    def _batches(self, chunk: _Chunk, skip: int) -> Iterator[pa.RecordBatch]:
        if chunk.whole:
            with self._store.open(chunk.path) as handle:
                stream = packed_rows.Stream(packed_rows.decompressing(handle, "zstd"))
                yield from self._rows(chunk, stream, chunk.raw, skip)
                try:
                    left = stream.rest()
                except Damaged as error:
                    raise SourceError(self.where, chunk.name, f"zstd: {error.reason}") from error
                if left or stream.position != chunk.raw:
                    found = stream.position
                    raise SourceError(
                        self.where, chunk.name, f"decompresses to {found} bytes, {INDEX} records {chunk.raw}"
                    )
            return
        source = packed_rows.Ranges(self._store, chunk.path)
        if source.read(0, len(_FRAMED_MAGIC)) == _FRAMED_MAGIC:
            yield from self._framed(chunk, source, skip)
        else:
            yield from self._rows(chunk, source, chunk.size, skip)

    def _rows(self, chunk: _Chunk, source: Bytes, size: int, skip: int) -> Iterator[pa.RecordBatch]:
        """The rows of a chunk of rows (or of Arrow rows), ``size`` bytes long."""
        first = 4 + 4 * (chunk.rows + 1)
        offsets = packed_rows.read_offsets(self._read(source, None, 0, first), chunk.rows)
        packed_rows.check_offsets(offsets, first=first, size=size)
        if size != chunk.raw:
            raise SourceError(self.where, chunk.name, f"has {size} bytes, {INDEX} records {chunk.raw}")
        if offsets[-1] < size:
            yield from self._arrow_batches(chunk, self._read(source, offsets, int(offsets[-1]), size), skip)
            return
        if self._arrow:
            raise SourceError(self.where, chunk.name, f"holds no Arrow rows, which {INDEX} records for its samples")
        for start, stop in packed_rows.spans(offsets, skip):
            block = self._read(source, offsets, int(offsets[start]), int(offsets[stop]))
            yield self._batch(block, offsets[start : stop + 1] - offsets[start], start)
        self._read(source, offsets, int(offsets[-1]), int(offsets[-1]))  # a stream: past the rows skipped

    def _read(self, source: Bytes, offsets: np.ndarray | None, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a chunk; a :class:`RowError` naming the row where they end early (row 0
        before the offsets table is read)."""
        try:
            block = source.read(start, end)
        except Damaged as error:
            row = packed_rows.row_at(offsets, 0, error.at) if offsets is not None else 0
            raise RowError(row, f"zstd: {error.reason}") from error
        if len(block) < end - start:
            at = start + len(block)
            row = packed_rows.row_at(offsets, 0, at) if offsets is not None else 0
            raise RowError(row, f"the chunk ends at byte {at}: truncated")
        return block

    def _batch(self, block: bytes, bounds: np.ndarray, first: int) -> pa.RecordBatch:
        """The rows ``block[bounds[i]:bounds[i + 1]]``, row ``first`` of the chunk the first."""
        try:
            if self._sample_zstd:
                block, bounds = _inflate_rows(block, bounds)
            arrays = packed_rows.split(block, bounds, self._columns)
        except RowError as error:
            raise RowError(first + error.row, error.reason) from error
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _framed(self, chunk: _Chunk, source: Bytes, skip: int) -> Iterator[pa.RecordBatch]:
        """The rows of a chunk of zstd frames, a frame decompressed at a time."""
        offsets, frames = self._frame_table(chunk, source)
        for first, rows, start, length, raw in frames:
            if first + rows <= skip:
                continue
            packed = source.read(start, start + length)
            if len(packed) < length:
                raise RowError(first, f"its zstd frame ends at byte {start + len(packed)}: truncated")
            try:
                block = pa.decompress(packed, raw, codec="zstd", asbytes=True)
            except pa.ArrowException as error:
                raise RowError(first, f"its zstd frame does not decompress: {error}") from error
            bounds = offsets[first : first + rows + 1] - offsets[first]
            for begin, end in packed_rows.spans(bounds, max(skip - first, 0)):
                yield self._batch(block, bounds[begin : end + 1], first + begin)

    def _frame_table(self, chunk: _Chunk, source: Bytes) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """The rows' offsets (in the frames decompressed, one after another) and the frames of a framed chunk:
        (first row, rows, start, length, bytes decompressed) each; checked to follow on from each other."""
        prefix = source.read(0, _FRAMED_PREFIX.size)
        if len(prefix) < _FRAMED_PREFIX.size:
            raise RowError(0, f"the chunk has {len(prefix)} bytes: too short for its header")
        _, version, _, rows, _, count = _FRAMED_PREFIX.unpack(prefix)
        if version != 1:
            raise SourceError(self.where, chunk.name, f"its zstd frames are of version {version}; version 1 is read")
        if rows != chunk.rows:
            raise RowError(0, f"the chunk holds {rows} rows, its index records {chunk.rows}")
        end = _FRAMED_PREFIX.size + 4 * (rows + 1) + _FRAME.size * count
        table = source.read(_FRAMED_PREFIX.size, end)
        if len(table) < end - _FRAMED_PREFIX.size:
            raise RowError(0, "the chunk ends inside its table of frames: truncated")
        offsets = np.frombuffer(table, np.dtype("<u4"), count=rows + 1).astype(np.int64)
        packed_rows.check_offsets(offsets, first=0, size=int(offsets[-1]))
        frames = [_FRAME.unpack_from(table, 4 * (rows + 1) + _FRAME.size * at) for at in range(count)]
        row, place = 0, end
        for first, many, start, length, raw in frames:
            if first != row or many <= 0 or start != place or raw != offsets[first + many] - offsets[first]:
                raise RowError(min(first, rows - 1), "the table of frames does not follow on from the rows before")
            if start + length > chunk.size:
                raise RowError(first, f"its zstd frame ends at byte {start + length}, the file has {chunk.size}")
            row, place = first + many, start + length
        if row != rows or place != chunk.size or chunk.size != chunk.raw:
            reason = f"its frames hold {row} rows in {place} bytes, {INDEX} records {rows} in {chunk.raw}"
            raise SourceError(self.where, chunk.name, reason + f" (the file has {chunk.size})")
        return offsets, frames

    def _arrow_batches(self, chunk: _Chunk, tail: bytes, skip: int) -> Iterator[pa.RecordBatch]:
        """The samples of a chunk's Arrow rows (``tail``: what follows its rows), in this source's schema."""
        if not self._arrow:
            reason = f"holds Arrow rows, which litdata writes for dict samples of JSON types; {INDEX}'s types differ"
            raise SourceError(self.where, chunk.name, reason)
        if len(tail) < 12 or tail[-8:] != _ARROW_MAGIC:
            raise SourceError(
                self.where, chunk.name, f"{len(tail)} bytes follow its last row, not litdata's Arrow rows"
            )
        (length,) = struct.unpack_from("<I", tail, len(tail) - 12)
        if length != len(tail) - 12:
            raise SourceError(self.where, chunk.name, f"its Arrow rows say {length} bytes, {len(tail) - 12} are there")
        try:
            table = pa.ipc.open_file(pa.py_buffer(tail).slice(0, length)).read_all()
            table.validate(full=True)
            table = _conform_table(table, self.schema)
        except (pa.ArrowException, ValueError) as error:
            raise SourceError(self.where, chunk.name, f"its Arrow rows do not read: {error}") from error
        if table.num_rows != chunk.rows:
            raise SourceError(self.where, chunk.name, f"holds {table.num_rows} rows, {INDEX} records {chunk.rows}")
        yield from table.slice(skip).to_batches(max_chunksize=BATCH_ROWS)

    def _check_config(self, config: dict[str, Any]) -> None:
        loader = config.get("item_loader") or "PyTreeLoader"
        if loader != "PyTreeLoader":
            raise SourceError(self.where, INDEX, f"chunks of litdata's {loader} are not read (PyTreeLoader's are)")
        if config.get("encryption"):
            raise SourceError(self.where, INDEX, "the chunks are encrypted; decrypt them with litdata first")
        compression = config.get("compression")
        if compression and str(compression).split(":")[0] != "zstd":
            raise SourceError(self.where, INDEX, f"compression {compression!r} is not read (zstd is)")
        if not isinstance(config.get("data_format"), list) or not config.get("data_spec"):
            raise SourceError(self.where, INDEX, "its config records no data_format and data_spec")

    def _schema(self, config: dict[str, Any]) -> tuple[pa.Schema, list[Column]]:
        formats: list[str] = config["data_format"]
        try:
            names = _leaf_names(json.loads(config["data_spec"]))
            if self._arrow:
                return _arrow_schema(names, config["types"]), []
        except (ValueError, TypeError, KeyError) as error:
            raise SourceError(self.where, INDEX, f"its data_spec and types do not read: {error}") from error
        if len(names) != len(formats):
            raise SourceError(self.where, INDEX, f"its data_spec has {len(names)} leaves, data_format {len(formats)}")
        if len(set(names)) != len(names):
            raise SourceError(self.where, INDEX, f"two leaves of its samples have one name: {names}")
        columns = [_column(name, name_format) for name, name_format in zip(names, formats, strict=True)]
        return pa.schema([column.field for column in columns]), columns

    def _chunk(self, entry: Any, prefix: str, sizes: dict[str, int], compression: str | None) -> _Chunk:
        try:
            name, rows, raw = str(entry["filename"]), int(entry["chunk_size"]), int(entry["chunk_bytes"])
        except (TypeError, KeyError, ValueError) as error:
            raise SourceError(self.where, INDEX, f"a chunk's entry does not read: {entry!r}") from error
        path = packed_rows.inside(prefix, name, self.where)
        if path not in sizes:
            raise SourceError(self.where, name, f"no such file (named by {INDEX})")
        whole = bool(compression) and name.endswith(f".{compression}.bin")
        return _Chunk(name, path, rows, sizes[path], raw, whole)


def _column(name: str, data_format: str) -> Column:
    """The column of a leaf that litdata's serializer ``data_format`` wrote."""
    if data_format in _PLAIN:
        kind, width = _PLAIN[data_format]
        return Column(pa.field(name, kind), width, sized=True)
    family, _, extension = data_format.partition(":")
    if data_format == "jpeg":
        extension = "jpg"
    if (data_format == "jpeg" or family in ("image", "file")) and extension.lower() in _IMAGE_EXTENSIONS:
        return Column(pa.field(name, pa.binary(), metadata={IMAGE_EXTENSION: extension.encode()}), None, sized=True)
    return Column(pa.field(name, pa.binary(), metadata={SOURCE_ENCODING: data_format.encode()}), None, sized=True)


def _leaf_names(spec: Any) -> list[str]:
    """The path of each leaf of a pytree spec (litdata's ``treespec_dumps``): keys and positions joined by ``.``."""
    protocol, root = spec
    if protocol != 1:
        raise ValueError(f"data_spec protocol {protocol} (1 is read)")
    names: list[str] = []

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        children = node["children_spec"]
        if node["type"] is None:
            names.append(".".join(path) or "0")
            return
        keys: list[Any] = list(range(len(children)))
        if node["type"] in _DICTS:
            context = json.loads(node["context"]) if isinstance(node["context"], str) else node["context"]
            keys = context["dict_context"] if isinstance(context, dict) else context
        for key, child in zip(keys, children, strict=True):
            walk(child, (*path, str(key)))

    walk(root, ())
    return names


def _arrow_rows(config: dict[str, Any]) -> bool:
    """Whether litdata wrote the samples as Arrow rows: dict samples whose types are all plain JSON, and no media
    serializer (its writer.py: ``is_arrow_footer_type`` and ``_data_format_is_arrow_safe``)."""
    types = config.get("types")
    if not _is_field_map(types) or not types or not _arrow_safe(config):
        return False
    try:
        for spec in types.values():
            _json_type(spec)
    except ValueError:
        return False
    return True


def _rows_compressed(config: dict[str, Any]) -> bool:
    """Whether each row is a zstd frame: ``compression_level="sample"``, where litdata's writer compresses rows,
    which it does not for samples whose types it would write as Arrow rows (tuples among them: their type is
    ``json``), even where it writes none."""
    if not config.get("compression") or config.get("compression_level") != "sample":
        return False
    types = config.get("types")
    footer_type = _arrow_rows(config) if _is_field_map(types) else types is not None and _nested(types)
    return not (footer_type and _arrow_safe(config))


def _is_field_map(types: Any) -> bool:
    """Whether litdata's ``types`` are those of dict samples: a map of their keys' types."""
    return isinstance(types, dict) and "type" not in types and "kind" not in types


def _arrow_safe(config: dict[str, Any]) -> bool:
    return not any(str(name).split(":")[0].lower() in _MEDIA for name in config["data_format"])


def _nested(spec: Any) -> bool:
    """litdata's ``is_nested_type`` over a type as its index records it."""
    kind = spec if isinstance(spec, str) else spec.get("type") if isinstance(spec, dict) else None
    if kind in ("list", "map", "json"):
        return True
    return kind == "struct" and any(_nested(value) for value in (spec.get("fields") or {}).values())


def _arrow_schema(names: list[str], types: dict[str, Any]) -> pa.Schema:
    """Columns of Arrow rows: the first sample's keys (the pytree's top level), then the keys the types add."""
    keys = list(dict.fromkeys(name.split(".")[0] for name in names))
    keys += [key for key in types if key not in keys]
    return pa.schema([pa.field(key, _json_type(types[key])) for key in keys])


def _json_type(spec: Any) -> pa.DataType:
    """The Arrow type of a litdata JSON type (``"int"``, ``{"type": "list", "value": ...}``, ``{"type": "struct",
    "fields": ...}``, ``{"type": "str", "optional": true}``); a ValueError for one that is not plain JSON."""
    kind = spec if isinstance(spec, str) else spec.get("type") if isinstance(spec, dict) else None
    if kind in _JSON_SCALARS:
        return _JSON_SCALARS[kind]
    if kind == "list":
        value = spec.get("value", "json")
        return pa.list_(pa.null() if value == "json" else _json_type(value))  # "json": only empty lists were seen
    if kind == "struct":
        return pa.struct([pa.field(key, _json_type(value)) for key, value in (spec.get("fields") or {}).items()])
    raise ValueError(f"litdata's type {spec!r} is not plain JSON")


def _conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (a chunk's Arrow rows, as Arrow inferred them) in ``schema`` (the types litdata recorded): columns
    and struct fields by name, a missing one all null; a ValueError where the chunk has one the schema lacks."""
    extra = set(table.column_names) - set(schema.names)
    if extra:
        raise ValueError(f"columns {sorted(extra)} are not in the recorded types")
    table = table.combine_chunks()
    arrays = [
        _conform(table.column(field.name).chunk(0), field.type)
        if field.name in table.column_names and table.column(field.name).num_chunks
        else pa.nulls(table.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _conform(values: pa.Array, kind: pa.DataType) -> pa.Array:
    if values.type == kind:
        return values
    if pa.types.is_struct(kind) and pa.types.is_struct(values.type):
        names = [values.type.field(at).name for at in range(values.type.num_fields)]
        extra = set(names) - {field.name for field in kind}
        if extra:
            raise ValueError(f"struct fields {sorted(extra)} are not in the recorded types")
        children = [
            _conform(values.field(field.name), field.type) if field.name in names else pa.nulls(len(values), field.type)
            for field in kind
        ]
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=values.is_null())
    if pa.types.is_list(kind) and pa.types.is_list(values.type):
        inner = _conform(values.values, kind.value_type)
        return pa.ListArray.from_arrays(values.offsets, inner, type=kind, mask=values.is_null())
    return values.cast(kind)


def _inflate_rows(block: bytes, bounds: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Rows that are each a zstd frame (``compression_level="sample"``), decompressed."""
    rows = []
    for row, (start, end) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        try:
            rows.append(pa.CompressedInputStream(pa.BufferReader(block[start:end]), "zstd").read())
        except pa.ArrowException as error:
            raise RowError(row, f"its zstd frame does not decompress: {error}") from error
    inflated = np.concatenate(([0], np.cumsum([len(row) for row in rows], dtype=np.int64)))
    return b"".join(rows), inflated
