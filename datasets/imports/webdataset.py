"""WebDataset tar shards as a :class:`~.source.Source`, read as ``webdataset.WebDataset`` reads them, but checked.

The shards: the files a brace pattern names (in its order), the one file SOURCE names, or, for a folder, every
``.tar``, ``.tar.gz`` and ``.tgz`` directly in it, by name. A shard is streamed once (plain or gzip-compressed),
and its members are grouped into samples by WebDataset's rule (``webdataset.tariterators``): a member's key is its
path up to the first dot of its base name and its field the rest, lower-cased (``a/0001.Seg.PNG``: key
``a/0001``, field ``seg.png``); consecutive members with the same key are one sample, so a key that comes back
later in a shard starts a sample of its own (a row, as WebDataset yields it). Members WebDataset leaves out as
metadata (``__*__`` names) are left out here too; directories hold no data and are passed over.

The schema: :data:`~.source.KEY_FIELD` (``string``), then one ``binary`` column per field of the source's first
sample, in its members' order; a field whose last extension names an image format gets
:data:`~.source.IMAGE_EXTENSION`. A later sample lacking one of those fields has a null there; a sample with a
field the first sample lacks is a :class:`~.source.SourceError` (nothing of a sample is ever dropped), so a source
with optional fields must hold them all in its first sample.

Refused, as a :class:`~.source.SourceError` naming the shard, the sample (its number in the shard, from 0) and the
byte of the tar stream where it applies, where WebDataset would silently read less or skip: a shard that ends inside a
member, inside a header or without its end-of-archive block (see the note below); a header whose checksum does not
match; a gzip stream whose CRC or length does not match; a member that is neither a regular file nor a directory
(WebDataset skips links and devices); a member whose name has no field (WebDataset skips it); two members of one
sample for the same field (WebDataset raises too). A tar records no checksum of a member's data: a flipped byte in
a member's data is not seen (in a gzip-compressed shard, its CRC sees it).
"""

from __future__ import annotations

import gzip
import re
import tarfile
import zlib
from collections.abc import Generator, Iterator, Sequence
from contextlib import closing
from typing import IO, Self, cast

import pyarrow as pa

from datamount.datasets.imports.location import Location
from datamount.datasets.imports.source import BATCH_ROWS, IMAGE_EXTENSION, KEY_FIELD, SourceError, SourceShard
from datamount.storage import ObjectNotFoundError

__all__ = ["WebDatasetSource", "open_webdataset"]

#: The names of a folder's files that are shards.
SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
#: Field extensions that are image files (of WebDataset's image decoder's, those PIL opens as plain images).
IMAGE_EXTENSIONS = frozenset(
    ["jpg", "jpeg", "jpe", "jfif", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm", "pbm", "pnm"]
)
#: Bytes of field data in a batch, at most (beyond :data:`~.source.BATCH_ROWS`): a batch of one sample may hold more.
BATCH_BYTES = 64 << 20
#: The largest member a ``binary`` column holds.
_LARGEST_MEMBER = (1 << 31) - 1
#: A member's key and field: WebDataset's ``base_plus_ext``.
_KEY_AND_FIELD = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
#: Members WebDataset skips as metadata: its ``skip_meta``, and a top-level ``__name__``.
_METADATA = re.compile(r"__[^/]*__($|/)")
#: Bytes read at a time past a shard's end-of-archive block.
_TAIL_CHUNK = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"
_OTHER_COMPRESSIONS = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}


def open_webdataset(location: Location, *, batch_bytes: int = BATCH_BYTES) -> WebDatasetSource:
    """The WebDataset shards at ``location`` (see the module's rule); ``batch_bytes`` bounds a batch's field data."""
    if batch_bytes < 1:
        raise ValueError(f"batch_bytes must be at least 1, got {batch_bytes}")
    return WebDatasetSource(location, batch_bytes=batch_bytes)


class WebDatasetSource:
    """WebDataset tar shards (see the module's rule)."""

    format = "webdataset"

    def __init__(self, location: Location, *, batch_bytes: int = BATCH_BYTES) -> None:
        self.where = location.where
        self._store = location.store
        self._batch_bytes = batch_bytes
        self.shards: Sequence[SourceShard] = _shards(location)
        self.schema = _schema(self._first_fields())
        self._fields = self.schema.names[1:]

    def _first_fields(self) -> list[str]:
        """The fields of the source's first sample (of the first shard that has one), in its members' order."""
        for number in range(len(self.shards)):
            with closing(self._samples(number, 0)) as samples:
                for _, _, fields in samples:
                    return list(fields)
        return []

    def batches(self, shard: int, skip: int = 0) -> Iterator[pa.RecordBatch]:
        if not 0 <= shard < len(self.shards):
            raise IndexError(f"{self.where}: no shard {shard} (the source has {len(self.shards)})")
        if skip < 0:
            raise ValueError(f"skip must be at least 0, got {skip}")
        name = self.shards[shard].name
        known = frozenset(self._fields)
        keys: list[str] = []
        columns: list[list[bytes | None]] = [[] for _ in self._fields]
        size = 0
        for number, key, fields in self._samples(shard, skip):
            if not known.issuperset(fields):
                extra = ", ".join(repr(field) for field in fields if field not in known)
                reason = (
                    f"sample {key!r} has field(s) {extra}, which the source's first sample lacks "
                    f"(its fields, the schema: {', '.join(self._fields) or 'none'})"
                )
                raise SourceError(self.where, name, reason, sample=number)
            sample_size = sum(len(value) for value in fields.values())
            if keys and (len(keys) == BATCH_ROWS or size + sample_size > self._batch_bytes):
                yield self._batch(keys, columns)
                keys, columns, size = [], [[] for _ in self._fields], 0
            keys.append(key)
            for column, field in zip(columns, self._fields, strict=True):
                column.append(fields.get(field))
            size += sample_size
        if keys:
            yield self._batch(keys, columns)

    def _batch(self, keys: list[str], columns: list[list[bytes | None]]) -> pa.RecordBatch:
        arrays = [pa.array(keys, pa.string()), *(pa.array(column, pa.binary()) for column in columns)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _samples(self, shard: int, skip: int) -> Generator[tuple[int, str, dict[str, bytes]]]:
        name = self.shards[shard].name
        with self._store.open(name) as raw:
            yield from _shard_samples(self.where, name, raw, skip=skip)


def _shards(location: Location) -> list[SourceShard]:
    """The shards SOURCE names: the Location's files, or a folder's tar files (see the module's rule)."""
    if location.names:
        sizes = location.sizes()
        return [SourceShard(name, sizes[name]) for name in location.names]  # a name twice is read twice, as WebDataset
    listing = location.store.list("", recursive=False)
    shards = [SourceShard(name, size) for name, size in listing.items() if name.endswith(SHARD_SUFFIXES)]
    if not shards:
        raise ObjectNotFoundError(f"{location.where}: no shards (no file named *{', *'.join(SHARD_SUFFIXES)} in it)")
    return shards


def _schema(fields: list[str]) -> pa.Schema:
    columns = [pa.field(KEY_FIELD, pa.string(), nullable=False)]
    for field in fields:
        extension = field.rpartition(".")[2]
        metadata = {IMAGE_EXTENSION: extension.encode()} if extension in IMAGE_EXTENSIONS else None
        columns.append(pa.field(field, pa.binary(), metadata=metadata))
    return pa.schema(columns)


def _shard_samples(where: str, shard: str, raw: IO[bytes], *, skip: int) -> Iterator[tuple[int, str, dict[str, bytes]]]:
    """The samples of a shard streamed from ``raw``, from sample ``skip`` on: (number, key, {field: bytes}); the
    members of the samples before ``skip`` are checked but not read."""
    number, key, fields = -1, None, dict[str, bytes]()
    member = None
    try:
        stream = _tar_stream(raw)
        with tarfile.open(fileobj=stream, mode="r:", tarinfo=_CheckedTarInfo) as tar:
            while (member := tar.next()) is not None:
                tar.members.clear()  # type: ignore[attr-defined]  # not looked up again: memory stays bounded
                if (named := _key_and_field(member)) is None:
                    continue
                if named[0] != key:
                    if number >= skip:
                        yield number, key, fields  # type: ignore[misc]  # number >= 0: key is set
                    number, key, fields = number + 1, named[0], {}
                _check_member(member, named[1], fields)
                fields[named[1]] = _member_data(stream, member) if number >= skip else b""
            _check_end(tar)
        if key is not None and number >= skip:
            yield number, key, fields
    except (_Damaged, tarfile.TarError, EOFError, zlib.error) as error:
        sample = max(number, 0) if not isinstance(error, _Damaged) or error.in_sample else None
        raise SourceError(where, shard, _reason(error, member), sample=sample) from error


def _key_and_field(member: tarfile.TarInfo) -> tuple[str, str] | None:
    """A member's sample key and field (WebDataset's rule), ``None`` for a member WebDataset passes over that holds
    no sample's data (a directory, metadata)."""
    path = member.name
    if member.isdir() or ("/" not in path and path.startswith("__") and path.endswith("__")) or _METADATA.match(path):
        return None
    if not path.isascii() and not _utf8(path):
        raise _Damaged(f"member {path!r}: its name is not UTF-8")
    if (parts := _KEY_AND_FIELD.match(path)) is None:
        raise _Damaged(f"member {path!r} has no field after its key (WebDataset skips it)")
    return parts.group(1), parts.group(2).lower()


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # tarfile keeps a name's bytes that are not UTF-8 as surrogates
        return False
    return True


def _check_member(member: tarfile.TarInfo, field: str, fields: dict[str, bytes]) -> None:
    """That ``member`` is a regular file of a size a column holds, for a new field of its sample (``fields``)."""
    if not member.isreg():
        raise _Damaged(f"member {member.name!r} is {_kind(member)}, not a regular file (WebDataset skips it)")
    if member.size > _LARGEST_MEMBER:
        raise _Damaged(f"member {member.name!r} holds {member.size} bytes, more than a binary column holds")
    if field == KEY_FIELD:
        raise _Damaged(f"member {member.name!r} has the field {KEY_FIELD!r}, the name of the key's column")
    if field in fields:
        raise _Damaged(f"member {member.name!r} is a second file for field {field!r} of its sample")


def _member_data(stream: IO[bytes], member: tarfile.TarInfo) -> bytes:
    """A member's bytes, read from the tar stream itself (tarfile's file objects on a member add copies)."""
    if stream.tell() != member.offset_data:
        stream.seek(member.offset_data)
    data = stream.read(member.size)
    if len(data) != member.size:
        raise _Damaged(f"truncated: the shard ends inside the data of member {member.name!r}")
    return data


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link to {member.linkname!r}"
    if member.islnk():
        return f"a hard link to {member.linkname!r}"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return f"of tar type {member.type!r}"


def _reason(error: BaseException, member: tarfile.TarInfo | None) -> str:
    """What a failure while streaming a shard, after ``member`` (the last read), says of the shard."""
    if isinstance(error, _Damaged):
        return str(error)
    if isinstance(error, EOFError):
        return f"truncated: the gzip stream ends early ({error})"
    if isinstance(error, gzip.BadGzipFile | zlib.error):
        return f"damaged gzip stream: {error}"
    if isinstance(error, tarfile.ReadError) and "unexpected end of data" in str(error) and member is not None:
        return f"truncated: the shard ends inside the data of member {member.name!r}"
    return f"not a readable tar stream: {error}"


def _check_end(tar: tarfile.TarFile) -> None:
    """Read a tar stream to its end past its end-of-archive block (so that gzip checks its CRC): zeros only."""
    offset, stream = tar.offset, tar.fileobj
    try:
        while chunk := stream.read(_TAIL_CHUNK):
            if chunk.count(0) != len(chunk):
                reason = (
                    f"bytes that are not zeros after its end-of-archive block at byte {offset} (WebDataset reads none)"
                )
                raise _Damaged(reason, in_sample=False)
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:  # the whole stream's CRC: no sample is to blame
        raise _Damaged(_reason(error, None), in_sample=False) from error


class _Damaged(Exception):
    """A shard's stream is not a whole, sound tar (the reason); raised past tarfile's own handling of headers.
    ``in_sample``: whether the sample being read is the one at fault (else the shard as a whole)."""

    def __init__(self, reason: str, *, in_sample: bool = True) -> None:
        super().__init__(reason)
        self.in_sample = in_sample


# NOTE [ How a tar's end is checked ]
# tarfile ends an archive quietly at the first header it cannot read once a member was read
# (``TarFile.next``): a header whose checksum fails, a stream cut inside a header, or one cut right after a member.
# WebDataset then yields the samples before it and nothing says the rest is missing. ``_CheckedTarInfo`` reads
# each header as tarfile does and lets only the end-of-archive block (512 zero bytes) end the archive; every other
# unreadable header becomes a ``_Damaged``, which tarfile does not catch. One zero block is enough: what a tar
# holds ends before it, so a stream cut after it has lost nothing.
class _CheckedTarInfo(tarfile.TarInfo):
    """A tar header read as tarfile reads it, where only an end-of-archive block ends the archive."""

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> Self:
        offset = tarfile_.fileobj.tell()
        try:
            return super().fromtarfile(tarfile_)
        except tarfile.HeaderError as error:
            if isinstance(error, tarfile.EOFHeaderError):  # type: ignore[attr-defined]  # not in typeshed's stub
                raise  # the end-of-archive block
            read = tarfile_.fileobj.tell() - offset
            if read == 0 and offset == 0:
                raise _Damaged("empty: not a tar file") from None
            if read == 0:
                raise _Damaged(f"truncated: the shard ends at byte {offset} without the end-of-archive block") from None
            if read < tarfile.BLOCKSIZE:
                raise _Damaged(f"truncated: the shard ends inside the header at byte {offset}") from None
            raise _Damaged(f"damaged header at byte {offset}: {error}") from None


def _tar_stream(raw: IO[bytes]) -> IO[bytes]:
    """The tar stream in ``raw`` (read forward only): gzip's decompressed (its CRC and length checked), else
    ``raw``'s bytes."""
    head = raw.read(6)
    raw.seek(0)
    if head.startswith(_GZIP_MAGIC):
        return cast("IO[bytes]", gzip.GzipFile(fileobj=raw, mode="rb"))
    for magic, compression in _OTHER_COMPRESSIONS.items():
        if head.startswith(magic):
            raise _Damaged(f"compressed with {compression}: the import reads plain and gzip-compressed tar shards")
    return raw
