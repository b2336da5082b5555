"""The marker ``upload --pack`` (and ``import --from-format``) leaves beside each shard it finished: the shard's entry
and each of its rows' file size and xxh3-64, so that a run started again after a kill takes the shard as written
without reading its files.

The rule: a marker grows by 16 bytes a row and is written and read in bounded memory, whatever the shard's rows (a shard
of millions of tiny files). Its bytes are :data:`MAGIC`, the length of its header (8 bytes, little-endian), the header
(JSON: ``{"entry": {...}, "rows": N}`` and any fields its writer adds: an import's place in its source), then one record
per row in order: the file's size (8 bytes, little-endian) and its xxh3-64 (8 bytes). A marker of an earlier release
(``DMSHARD1``: each row's sha256) is not read: its shard is written again. While a shard is written its records go to a
local file; once the shard is sent, that file goes to the store whole (:meth:`Store.put_file`: written atomically, never
seen half-written). A run reads a marker's header alone, then the records of one row group at a time.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from datamount.storage import ObjectNotFoundError, Store

MAGIC = b"DMSHARD2"
_LENGTH = struct.Struct("<Q")
_RECORD = struct.Struct("<q8s")
RECORD_BYTES = _RECORD.size
#: Bytes read first from a marker: its header, in one request, for any shard of up to a few thousand row groups.
_HEAD_BYTES = 1 << 16


class MarkerWriter:
    """The records of the shard being written, on local disk until :meth:`send`."""

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="datamount-marker-")
        self._records = open(os.path.join(self._folder.name, "records"), "w+b")  # noqa: SIM115 (kept open: appended to)
        self.rows = 0

    def add(self, files: Iterable[tuple[int, str]]) -> None:
        """Rows' files, in row order: ``(size, xxh3-64 as hex)`` each."""
        data = b"".join(_RECORD.pack(size, bytes.fromhex(xxh3)) for size, xxh3 in files)
        self._records.write(data)
        self.rows += len(data) // RECORD_BYTES

    def send(self, store: Store, path: str, entry: dict[str, Any], extra: dict[str, Any] | None = None) -> None:
        """Write the marker of the shard whose entry is ``entry`` to ``path`` (with ``extra`` fields in its header:
        where an import's source goes on after the shard), then forget its records."""
        header = json.dumps({**(extra or {}), "entry": entry, "rows": self.rows}).encode()
        marker = os.path.join(self._folder.name, "marker")
        with open(marker, "wb") as out:
            out.write(MAGIC + _LENGTH.pack(len(header)) + header)
            self._records.seek(0)
            while block := self._records.read(1 << 20):
                out.write(block)
        store.put_file(marker, path)
        self.close()

    def close(self) -> None:
        self._records.close()
        self._folder.cleanup()


@dataclass(frozen=True)
class Marker:
    """A marker's header: the shard's entry, its rows, and where the records start in the marker."""

    path: str
    entry: dict[str, Any]
    rows: int
    records_at: int
    #: The header's other fields.
    extra: dict[str, Any] = field(default_factory=dict)

    def files(self, store: Store, start: int, stop: int) -> list[tuple[int, str]]:
        """The files of the shard's rows ``[start, stop)`` (counted from its first row): ``(size, xxh3-64)`` each."""
        first, last = self.records_at + start * RECORD_BYTES, self.records_at + stop * RECORD_BYTES
        data = store.read_range(self.path, first, last)
        if len(data) != last - first:
            raise ObjectNotFoundError(f"{store.url_for(self.path)} ends before its records do; upload again")
        return [(size, digest.hex()) for size, digest in _RECORD.iter_unpack(data)]


def read_marker(store: Store, path: str, size: int | None = None) -> Marker | None:
    """The header of the marker at ``path`` (``size``: its size, when known from a listing), or None where it is
    not a whole marker of this format (one of an older release, or one cut short)."""
    try:
        head = store.read_range(path, 0, _HEAD_BYTES)
        if not head.startswith(MAGIC) or len(head) < len(MAGIC) + _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(head, len(MAGIC))
        records_at = len(MAGIC) + _LENGTH.size + length
        header = head[len(MAGIC) + _LENGTH.size : records_at]
        if len(header) < length:
            header = store.read_range(path, len(MAGIC) + _LENGTH.size, records_at)
        fields = json.loads(header)
        entry, rows = fields["entry"], fields["rows"]
    except (ValueError, TypeError, KeyError, ObjectNotFoundError):
        return None
    if not isinstance(entry, dict) or not isinstance(rows, int) or rows < 0:
        return None
    if size is not None and size != records_at + rows * RECORD_BYTES:
        return None
    extra = {key: value for key, value in fields.items() if key not in ("entry", "rows")}
    return Marker(path, entry, rows, records_at, extra)
