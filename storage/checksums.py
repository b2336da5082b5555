"""Streaming sha256 of local files (objects in a store: :meth:`datamount.storage.Store.sha256`)."""

from __future__ import annotations

import hashlib
import os

from datamount.storage.errors import IntegrityError

CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of the local file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_checked(path: str | os.PathLike[str], sha256: str) -> bytes:
    """The bytes of the local file ``path``, which must have ``sha256``: :class:`IntegrityError` when they do not
    (the file changed since it was hashed)."""
    with open(path, "rb", buffering=0) as source:
        data = source.readall()
    require_unchanged(path, hashlib.sha256(data).hexdigest(), sha256)
    return data


def require_unchanged(path: str | os.PathLike[str], found: str, sha256: str) -> None:
    """Raise :class:`IntegrityError` unless ``found`` (the sha256 of the bytes just read from ``path``) is
    ``sha256`` (the one it had when it was hashed)."""
    if found != sha256:
        raise IntegrityError(
            f"{os.fspath(path)} changed while it was being uploaded: its sha256 is now {found}, not the {sha256} it "
            "had when it was hashed; nothing was stored for it: upload again"
        )
