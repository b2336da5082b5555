"""The manifest: what a committed dataset version holds. Written last; a version without one does not exist.

Its file entries (path, size, sha256, xxh3-64 of each file) are, from format 6, kept out of the JSON document in
Parquet parts it names by sha256 (:mod:`datamount.datasets.file_parts`), so that the document stays small whatever
the number of files.

A file stored as an object keeps the sha256 that names it. A file held only in shards (``upload --pack``, from format
8) records its xxh3-64 and no sha256: the sha256 named nothing, and was 32 of the 35-40 bytes its entry took in its
part. Its bytes are checked, as before, by its shard's sha256 and its row group's xxh3-64; the file's xxh3-64 is what
``diff`` compares its content by, and what finds that an upload of the same list changes nothing
(:func:`~datamount.datasets.file_entry.same_content`). The collision argument: two different contents of one path
have the same xxh3-64 with a chance of about 2^-64 (a 64-bit hash that passes SMHasher's tests), so a diff of 10^9
changed files misses one with a chance under 10^-10 — below the rate at which the disk or memory that holds the
bytes flips one undetected. It is no defence against someone who crafts a collision on purpose (xxh3 is not a
cryptographic hash): a packed file's content is trusted as far as the shard that holds it, whose sha256 the manifest
records, and the manifest's own sha256 is the version's identity.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, overload

import msgspec

from datamount.datasets.errors import ManifestError
from datamount.datasets.file_entry import FileEntry, collector_paused, same_content
from datamount.datasets.file_parts import FILE_PARTS_KEY, FilePart, FileParts
from datamount.datasets.list_blocks import ListBlocks
from datamount.datasets.row_index import ROW_PARTS_KEY, RowIndex
from datamount.storage import Store
from datamount.storage.cache import ContentCache

#: Format 2 keeps a version's list and shards under names that do not depend on its number (the number is given by
#: the commit); format 1 kept them under ``lists/N.list`` and ``packs/N/``, and is still read. Format 3 is format 2
#: for an image version whose files are stored only in its shards (``objects: false``, from ``upload --pack``): an
#: older datamount, which would look for their objects, refuses it. Format 4 adds each file's xxh3-64 to its entry
#: (the check of every read; files without one are checked against their sha256). Format 5 adds to each shard's
#: entry the xxh3-64 of its row groups and footer (what a reader checks before it decodes them; shards without them are
#: checked by their pages' CRCs) and of each of its blocks (a range is checked without reading the rest: what
#: ``datamount://`` serves). Format 6 keeps the file entries out of the JSON document, in Parquet parts named by
#: their sha256 that the manifest lists (:class:`FilePart`, :class:`FileParts`): the document stays a few hundred
#: bytes per 65,536 files, and one file's entry is found reading one part; and it records where each block of 1,024
#: lines of the list starts, with the block's xxh3-64 (:class:`ListBlocks`): a row of a text version is read, checked,
#: without the rest of the list. Format 7 indexes an image version's rows (:mod:`datamount.datasets.row_index`): each
#: file entry records the first list row that names its path, and a version whose files are objects has a row index
#: (``row_parts``): a row's file, or a path's row, is found reading one part. Format 8 lets a file held only in
#: shards record its xxh3-64 and no sha256 (above); an older datamount, which compares and names files by their
#: sha256, refuses it. The newest format this reads:
FORMAT_VERSION = 8
#: The format of a manifest whose files held only in shards record no sha256 (format 8's addition).
PACKED_DIGEST_FORMAT_VERSION = 8
#: The format of a manifest whose entries record their rows, with a row index where its files are objects (format
#: 7's additions).
ROW_INDEX_FORMAT_VERSION = 7
#: The format of a manifest whose file entries are in parts of their own, or whose list's blocks it records (format
#: 6's additions).
FILE_PARTS_FORMAT_VERSION = 6
#: The format of a manifest whose shards carry checksums of their row groups and blocks (format 5's addition).
SHARD_CHECKS_FORMAT_VERSION = 5
#: The format of a manifest whose file entries carry their xxh3-64 (format 4's addition).
FILE_CHECKS_FORMAT_VERSION = 4
#: The format of a manifest that needs nothing format 3 adds.
OBJECTS_FORMAT_VERSION = 2
#: The format of a manifest whose files are stored only in shards (format 3's addition).
SHARDS_ONLY_FORMAT_VERSION = 3
#: Where a manifest says which rows and shards each split holds: ``{"train": {"rows": N, "shards": [a, b]}}``.
SPLITS_KEY = "splits"


class Kind(StrEnum):
    """What a version's rows are.

    ``image``: a file's exact bytes, then label strings (from a ``.list`` of ``path<TAB>label`` rows);
    ``text``: strings only (``source<TAB>target``...); ``table``: any Arrow columns (a stream stored by
    ``datamount import``), kept only as Parquet shards.
    """

    IMAGE = "image"
    TEXT = "text"
    TABLE = "table"


#: The end of an entry in the stored files, searched from after its path (its size and digests hold no ``]``).
_CLOSING = re.compile(rb"\]")


class FileList(Sequence[FileEntry]):
    """A version's files as its manifest stores them, decoded when first used: a packed read never uses them, and
    a manifest of 60,000 files opens in about 1 ms instead of 35. A damaged list is a :class:`ManifestError` then."""

    __slots__ = ("_entries", "_raw", "_where")

    def __init__(self, raw: bytes | msgspec.Raw, where: str) -> None:
        # The manifest's own bytes (a Raw is a view of them): a copy of a million files' JSON costs more than
        # checking it is JSON.
        self._raw: bytes | msgspec.Raw = raw
        self._where = where
        self._entries: list[FileEntry] | None = None

    @property
    def entries(self) -> list[FileEntry]:
        if self._entries is None:
            try:
                with collector_paused():
                    self._entries = msgspec.json.decode(self._raw, type=list[FileEntry])
            except msgspec.DecodeError as exc:
                raise ManifestError(f"{self._where} is damaged: its files: {exc}") from exc
            self._raw = b""
        return self._entries

    def stored_json(self) -> bytes | None:
        """The files as the manifest's JSON holds them (an array of ``[path, size, sha256, xxh3]`` arrays) while they
        are not decoded, for a reader that parses them its own way; ``None`` once they are decoded."""
        if self._entries is not None:
            return None
        if not isinstance(self._raw, bytes):
            self._raw = bytes(self._raw)
        return self._raw

    def stored_entry(self, path: str) -> FileEntry | None:
        """The entry of ``path``, found in the stored JSON and decoded alone while the files are not decoded (one
        search, no pass over the others); ``None`` when they are decoded, or ``path`` is not written there as a
        plain ``["path",``."""
        if self._entries is not None:
            return None
        found = re.search(re.escape(b"[" + msgspec.json.encode(path) + b","), self._raw)
        end = None if found is None else _CLOSING.search(self._raw, found.end())
        if found is None or end is None:
            return None
        try:
            return msgspec.json.decode(memoryview(self._raw)[found.start() : end.end()], type=FileEntry)
        except msgspec.DecodeError as exc:
            raise ManifestError(f"{self._where} is damaged: its entry of {path!r}: {exc}") from exc

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, index: int) -> FileEntry: ...
    @overload
    def __getitem__(self, index: slice) -> list[FileEntry]: ...
    def __getitem__(self, index: int | slice) -> FileEntry | list[FileEntry]:
        return self.entries[index]

    def __iter__(self) -> Iterator[FileEntry]:
        return iter(self.entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return self.entries == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "FileList(not decoded)" if self._entries is None else f"FileList({self._entries!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to a worker process as the manifest's bytes while nobody has used it, else as the decoded list.
        return (FileList, (bytes(self._raw), self._where)) if self._entries is None else (list, (self._entries,))


def same_files(first: Sequence[FileEntry], second: Sequence[FileEntry]) -> bool:
    """Whether two versions' files are the same paths with the same content (:func:`same_content`: which digests
    their entries carry does not matter, as long as they share one)."""
    if isinstance(first, FileParts) and isinstance(second, FileParts) and first.parts == second.parts:
        return True  # the same parts: the same entries, none read
    return len(first) == len(second) and all(
        a.path == b.path and same_content(a, b) for a, b in zip(first, second, strict=True)
    )


#: Bytes of a shard's block whose xxh3-64 its entry records: a range is read in whole blocks, each checked. 256 KiB:
#: reading one small column of 8 MiB row groups fetches at most a 32nd of them, and the checksums add 76 bytes of
#: manifest per MiB of shards.
SHARD_BLOCK_BYTES = 256 << 10


@dataclass(frozen=True)
class ShardEntry:
    """One packed Parquet shard of a version: its path in the dataset folder, rows, size, sha256, the number of
    rows in each of its row groups (so that a row is found without reading any footer), the xxh3-64 of each row
    group's bytes, then of its footer (:mod:`datamount.datasets.shard_checks`: what a reader checks), and the xxh3-64
    of each of its ``block_bytes`` blocks (what a ranged read checks). A shard packed before format 5 has neither:
    its pages' CRCs are checked as it is decoded, and a range of it is checked by reading all of it."""

    path: str
    rows: int
    size: int
    sha256: str
    row_groups: list[int]
    xxh3: list[str] = field(default_factory=list)
    block_bytes: int = 0
    blocks: list[str] = field(default_factory=list)

    def block_range(self, start: int, end: int) -> tuple[int, int]:
        """The blocks holding bytes ``start`` to ``end - 1``: ``(first, stop)``, block indices."""
        return start // self.block_bytes, -(-end // self.block_bytes)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """A dataset version: committed when :attr:`version` is set (see :func:`datamount.datasets.catalog.commit`),
    a draft before.

    Image and text versions have a normalised list (``list_sha256``, ``list_size``): one row per sample,
    TAB-separated; for image versions its first column is the file's path relative to the original list's root,
    which :attr:`files` maps to stored objects (unless :attr:`objects` is false: then the files' bytes are only in
    the shards). Any version may have :attr:`shards` (packed); a ``table`` version has only shards.
    """

    name: str
    kind: Kind
    columns: list[str]
    rows: int
    files: Sequence[FileEntry] = field(default_factory=list)
    list_sha256: str = ""
    list_size: int = 0
    #: Where each block of the list's lines starts, and its xxh3-64 (a list written before format 6 has none).
    list_blocks: ListBlocks | None = None
    shards: list[ShardEntry] = field(default_factory=list)
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: Whether :attr:`files` are stored as objects; false for an image version uploaded straight into shards.
    objects: bool = True
    #: An image version's row index (format 7): empty for one whose files are not objects, ``None`` before format 7
    #: (then neither its rows' files nor its entries' rows are indexed).
    row_parts: RowIndex | None = None
    #: Set by the commit: the version number, when it was committed, and by which datamount.
    version: int = 0
    created: str = ""
    datamount_version: str = ""
    format_version: int = OBJECTS_FORMAT_VERSION
    #: The version's identity: the sha256 of its manifest's JSON as stored (``versions/N.json``), set when it is read
    #: or committed (empty for a draft). Not part of the JSON itself; ``name@N`` names one identity for the life of
    #: a store (:mod:`datamount.datasets.catalog`), and whatever outlives a call keys a version by this.
    manifest_sha256: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))
        if not self.objects:
            if not self.shards:
                raise ManifestError(f"{self.ref}: a version whose files are not stored as objects needs shards")
            object.__setattr__(self, "format_version", max(self.format_version, SHARDS_ONLY_FORMAT_VERSION))
        if isinstance(self.files, list) and any(entry.xxh3 for entry in self.files):
            object.__setattr__(self, "format_version", max(self.format_version, FILE_CHECKS_FORMAT_VERSION))
        if isinstance(self.files, list) and any(not entry.sha256 for entry in self.files):
            object.__setattr__(self, "format_version", max(self.format_version, PACKED_DIGEST_FORMAT_VERSION))
        if any(shard.xxh3 or shard.blocks for shard in self.shards):
            object.__setattr__(self, "format_version", max(self.format_version, SHARD_CHECKS_FORMAT_VERSION))
        if isinstance(self.files, FileParts) or self.list_blocks is not None:
            object.__setattr__(self, "format_version", max(self.format_version, FILE_PARTS_FORMAT_VERSION))
        if self.row_parts is not None:
            object.__setattr__(self, "format_version", max(self.format_version, ROW_INDEX_FORMAT_VERSION))

    @property
    def indexed(self) -> bool:
        """Whether the version's rows are indexed (format 7): its entries record their first rows, and its rows'
        files are in :attr:`row_parts` where they are objects."""
        return self.row_parts is not None and isinstance(self.files, FileParts)

    @property
    def files_size(self) -> int:
        """The total size of the files (from the manifest's JSON alone when its entries are in parts)."""
        if isinstance(self.files, FileParts):
            return self.files.files_size
        return sum(entry.size for entry in self.files)

    @property
    def total_bytes(self) -> int:
        """Bytes of everything stored: the files' objects, the list and the shards."""
        objects = self.files_size if self.objects else 0
        return objects + self.list_size + sum(shard.size for shard in self.shards)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def has_list(self) -> bool:
        """Whether the version has a normalised list (image and text versions; ``table`` versions do not)."""
        return bool(self.list_sha256)

    @property
    def splits(self) -> dict[str, int]:
        """Rows by split, in the splits' order (none for a version not made of splits)."""
        return {split: int(info["rows"]) for split, info in self.extra.get(SPLITS_KEY, {}).items()}

    def with_shards(self, shards: list[ShardEntry]) -> Manifest:
        """This version, packed into ``shards``."""
        return dataclasses.replace(self, shards=shards)

    def to_json(self) -> bytes:
        """The manifest's JSON document: its files' entries in it (a list of files), or the parts that hold them
        (:class:`FileParts`, which :func:`datamount.datasets.catalog.commit` makes of any other sequence)."""
        body = asdict(dataclasses.replace(self, files=[], row_parts=None))
        del body["manifest_sha256"]
        del body["row_parts"]
        if self.row_parts is not None:
            body[ROW_PARTS_KEY] = [dataclasses.asdict(part) for part in self.row_parts.parts]
        body["kind"] = self.kind.value
        if self.list_blocks is None:
            del body["list_blocks"]
        if isinstance(self.files, FileParts):
            # An empty "files": what an older datamount reads before the format, which it then refuses by number
            # (without it, it would call the manifest damaged).
            body["files"] = []
            body[FILE_PARTS_KEY] = [dataclasses.asdict(part) for part in self.files.parts]
        else:
            body["files"] = [list(entry) if entry.xxh3 else list(entry[:3]) for entry in self.files]
        return (json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(
        cls, data: bytes, where: str, *, store: Store | None = None, cache: ContentCache | None = None
    ) -> Manifest:
        """The manifest ``data`` (read from ``where``, named in errors); ``store`` holds the parts of its files'
        entries (format 6), read when they are first used (through ``cache``, when given)."""
        with collector_paused():
            return cls._from_json(data, where, store, cache)

    @classmethod
    def _from_json(cls, data: bytes, where: str, store: Store | None, cache: ContentCache | None) -> Manifest:
        try:
            # Every value is checked to be JSON; all but the files are decoded now (see FileList).
            values = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
            raw_files = values.pop("files", None)
            raw_parts = values.pop(FILE_PARTS_KEY, None)
            raw_rows = values.pop(ROW_PARTS_KEY, None)
            body = {key: msgspec.json.decode(value) for key, value in values.items()}
            if body.get("format_version", 0) > FORMAT_VERSION:
                raise ManifestError(
                    f"{where} was written by a newer datamount (format {body['format_version']}); upgrade datamount"
                )
            body["shards"] = [ShardEntry(**shard) for shard in body.get("shards", [])]
            if body.get("list_blocks") is not None:
                body["list_blocks"] = ListBlocks(**body["list_blocks"])
            files: Sequence[FileEntry]
            if raw_parts is not None:  # its "files" are empty (see to_json)
                parts = [FilePart(**part) for part in msgspec.json.decode(raw_parts)]
                files = FileParts(store, _dataset_folder(body["name"]), parts, where, cache)
            else:
                files = FileList(raw_files if raw_files is not None else b"[]", where)
            if raw_rows is not None:
                row_parts = [FilePart(**part) for part in msgspec.json.decode(raw_rows)]
                body["row_parts"] = RowIndex(store, _dataset_folder(body["name"]), row_parts, where, cache)
            body.pop("manifest_sha256", None)  # never written: what the bytes are is computed from them
            return cls(files=files, manifest_sha256=hashlib.sha256(data).hexdigest(), **body)
        except ManifestError:
            raise
        except (msgspec.DecodeError, ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"{where} is damaged: {exc}") from exc


def now_utc() -> str:
    """The current time as ISO 8601 UTC, seconds precision."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _dataset_folder(name: str) -> str:
    from datamount.datasets import layout  # layout names its parts after a manifest's fields: it imports this module

    return layout.dataset_folder(name)
