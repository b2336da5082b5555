"""Checksums: sha256 (an object's name, and the full check) and xxh3-64 (the check of every read).

sha256 costs ~0.5 CPU-seconds per GB even with the CPU's SHA instructions: more than reading the bytes from the
page cache. xxh3-64 costs ~0.01 (two orders of magnitude less) and misses a damaged copy with a chance of 2^-64, as
Parquet's page CRCs guard packed rows. Objects in a store: :meth:`datamount.storage.Store.sha256`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import xxhash

from datamount.storage.errors import IntegrityError

CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of the local file at ``path``, read in 1 MiB chunks."""
    (digest,) = _hash_file(path, hashlib.sha256())
    return digest


def xxh3(data: bytes | bytearray | memoryview) -> str:
    """The xxh3-64 of ``data``, as 16 hex digits."""
    return xxhash.xxh3_64_hexdigest(data)


def matches(data: bytes | bytearray | memoryview, sha256: str, fast: str = "", *, digest: str | None = None) -> bool:
    """Whether ``data`` has the xxh3-64 ``fast`` (when given) or else the sha256 ``sha256`` (``digest`` when it was
    computed already)."""
    if fast:
        return xxh3(data) == fast
    return (digest or hashlib.sha256(data).hexdigest()) == sha256


def checked_by(fast: str) -> str:
    """The name of the checksum :func:`matches` checks for an entry whose xxh3-64 is ``fast`` (``""``: none), for
    errors."""
    return "xxh3-64" if fast else "sha256"


def file_digests(path: str | os.PathLike[str]) -> tuple[str, str]:
    """The hex sha256 and xxh3-64 of the local file at ``path``, from one read in 1 MiB chunks."""
    sha256, fast = _hash_file(path, hashlib.sha256(), xxhash.xxh3_64())
    return sha256, fast


def _hash_file(path: str | os.PathLike[str], *hashers: Any) -> list[str]:
    """The hex digests of the local file at ``path`` by each of ``hashers``, from one read in 1 MiB chunks."""
    with open(path, "rb", buffering=0) as source:
        while chunk := source.read(CHUNK):
            for hasher in hashers:
                hasher.update(chunk)
    return [hasher.hexdigest() for hasher in hashers]


def block_digests(path: str | os.PathLike[str], block_bytes: int) -> tuple[str, list[str]]:
    """The hex sha256 of the local file at ``path`` and the xxh3-64 of each of its ``block_bytes`` blocks (the last one
    shorter), from one read: what lets a range of the file be checked without reading all of it."""
    whole = hashlib.sha256()
    blocks: list[str] = []
    with open(path, "rb", buffering=0) as source:
        while block := source.read(block_bytes):
            whole.update(block)
            blocks.append(xxh3(block))
    return whole.hexdigest(), blocks


def copy_check(sha256: str, fast: str = "") -> tuple[Any, str, str]:
    """How the bytes of a file being sent are checked: a hasher, the digest it must give, and the checksum's name
    (the xxh3-64 ``fast`` when given, as cheap as the read; else ``sha256``). See :func:`require_unchanged`."""
    return (xxhash.xxh3_64(), fast, "xxh3-64") if fast else (hashlib.sha256(), sha256, "sha256")


def read_checked(path: str | os.PathLike[str], sha256: str, fast: str = "") -> bytes:
    """The bytes of the local file ``path``, which must have the xxh3-64 ``fast`` (when given) or else ``sha256``:
    :class:`IntegrityError` when they do not (the file changed since it was hashed)."""
    with open(path, "rb", buffering=0) as source:
        data = source.readall()
    hasher, expected, checksum = copy_check(sha256, fast)
    hasher.update(data)
    require_unchanged(path, hasher.hexdigest(), expected, checksum=checksum)
    return data


def require_unchanged(path: str | os.PathLike[str], found: str, expected: str, *, checksum: str = "sha256") -> None:
    """Raise :class:`IntegrityError` unless ``found`` (the ``checksum`` of the bytes just read from ``path``) is
    ``expected`` (the one it had when it was hashed)."""
    if found != expected:
        raise IntegrityError(
            f"{os.fspath(path)} changed while it was being uploaded: its {checksum} is now {found}, not the "
            f"{expected} it had when it was hashed; nothing was stored for it: upload again"
        )
