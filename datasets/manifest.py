"""The manifest: what a committed dataset version holds. Written last; a version without one does not exist."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from datamount.datasets.errors import ManifestError

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
LIST_NAME = "data.list"


@dataclass(frozen=True)
class FileEntry:
    """One stored file: its path relative to the list's root, size, sha256 and object key in the dataset folder."""

    path: str
    size: int
    sha256: str

    @property
    def object_key(self) -> str:
        return object_key(self.sha256)


def object_key(sha256: str) -> str:
    """Where a file's bytes live in the dataset folder: content-addressed, shared by every version."""
    return f"objects/{sha256[:2]}/{sha256}"


@dataclass(frozen=True)
class ShardEntry:
    """One packed Parquet shard of a version: its path in the dataset folder, rows, size, sha256, and the number
    of rows in each of its row groups (so that a row is found without reading any footer)."""

    path: str
    rows: int
    size: int
    sha256: str
    row_groups: list[int]


@dataclass(frozen=True)
class Manifest:
    """A committed dataset version.

    The normalised list (``data.list``) holds one row per sample, TAB-separated; for image datasets its first
    column is the file's path relative to the original list's root, which :attr:`files` maps to stored objects.
    """

    name: str
    version: int
    kind: str
    columns: list[str]
    rows: int
    files: list[FileEntry]
    list_sha256: str
    list_size: int
    source: str
    created: str
    format_version: int = FORMAT_VERSION
    datamount_version: str = ""
    shards: list[ShardEntry] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        """Bytes of all stored files, the list and the shards."""
        return sum(entry.size for entry in self.files) + self.list_size + sum(shard.size for shard in self.shards)

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def to_json(self) -> bytes:
        body = asdict(self)
        body["files"] = [[f.path, f.size, f.sha256] for f in self.files]
        return (json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        try:
            body = json.loads(data)
            if body.get("format_version", 0) > FORMAT_VERSION:
                raise ManifestError(
                    f"{where} was written by a newer datamount (format {body['format_version']}); upgrade datamount"
                )
            body["files"] = [FileEntry(path, int(size), sha) for path, size, sha in body["files"]]
            body["shards"] = [ShardEntry(**shard) for shard in body.get("shards", [])]
            return cls(**body)
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"{where} is damaged: {exc}") from exc


def now_utc() -> str:
    """The current time as ISO 8601 UTC, seconds precision."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
