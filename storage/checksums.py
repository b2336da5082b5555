"""Streaming sha256 of local files (objects in a store: :meth:`datamount.storage.Store.sha256`)."""

from __future__ import annotations

import hashlib
import os

CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex sha256 of the local file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
