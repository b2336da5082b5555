"""A local cache of remote files, keyed by their sha256: size-capped, least-recently-used eviction, safe when several
processes share it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import platformdirs

from datamount.storage.checksums import sha256_file
from datamount.storage.errors import IntegrityError

CACHE_DIR_ENV = "DATAMOUNT_CACHE_DIR"
CACHE_SIZE_ENV = "DATAMOUNT_CACHE_SIZE"
DEFAULT_MAX_BYTES = 20 << 30
#: What a cache key must be: a sha256 digest as lowercase hex, so that it can name nothing but a file of the cache.
DIGEST = re.compile(r"[0-9a-f]{64}")


def default_cache_dir() -> Path:
    """``$DATAMOUNT_CACHE_DIR``, else datamount's folder in the XDG cache folder."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    return Path(explicit).expanduser() if explicit else platformdirs.user_cache_path("datamount") / "shards"


class ContentCache:
    """Files by content: ``get(sha256, size, fill)`` returns a local path holding those bytes.

    A miss calls ``fill(file)`` to write the content (once, even when several processes ask at the same time: the
    others wait for it), checks it against ``sha256`` and renames it into place. A hit is re-hashed the first time this
    process uses it, and fetched again when damaged. When the cache holds more than ``max_bytes``, the least recently
    used files go; a file another process is reading stays readable (it is only unlinked).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, max_bytes: int | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        env_size = os.environ.get(CACHE_SIZE_ENV)
        self.max_bytes = max_bytes if max_bytes is not None else int(env_size) if env_size else DEFAULT_MAX_BYTES
        if self.max_bytes < 1:
            raise ValueError(f"the cache size must be positive, got {self.max_bytes}")
        (self.directory / "locks").mkdir(parents=True, exist_ok=True)
        self._verified: set[str] = set()
        self.hits = 0
        self.misses = 0

    def __reduce__(self) -> tuple[type[ContentCache], tuple[Path, int]]:
        return (ContentCache, (self.directory, self.max_bytes))

    def path_for(self, sha256: str, *, name: str = "") -> Path:
        """Where the content ``sha256`` is kept; a key that is not a digest is an :class:`IntegrityError`."""
        if not isinstance(sha256, str) or not DIGEST.fullmatch(sha256):
            raise IntegrityError(
                f"{name or 'a cached file'}: the sha256 recorded for it, {sha256!r}, is not a sha256 digest "
                "(64 lowercase hex characters); the manifest that names it is damaged or was edited by hand"
            )
        return self.directory / sha256[:2] / sha256

    def get(self, sha256: str, size: int, fill: Callable[[BinaryIO], None], *, name: str = "") -> Path:
        """The local path of the content ``sha256`` (``size`` bytes), fetched with ``fill`` when not here."""
        final = self.path_for(sha256, name=name)
        with self._locked(f"locks/{sha256}.lock"):
            if final.exists() and final.stat().st_size == size and self._intact(final, sha256):
                os.utime(final)
                self.hits += 1
                return final
            self.misses += 1
            self._fill(final, sha256, size, fill, name or sha256)
        self._evict(keep=final)
        return final

    def _intact(self, path: Path, sha256: str) -> bool:
        if sha256 in self._verified:
            return True
        if sha256_file(path) != sha256:
            path.unlink(missing_ok=True)
            return False
        self._verified.add(sha256)
        return True

    def _fill(self, final: Path, sha256: str, size: int, fill: Callable[[BinaryIO], None], name: str) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        temporary = final.with_name(f".{final.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            with open(temporary, "wb") as out:
                fill(out)
            got = sha256_file(temporary)
            if got != sha256 or temporary.stat().st_size != size:
                raise IntegrityError(f"{name}: the bytes fetched do not match the sha256 recorded for them")
            os.replace(temporary, final)
            self._verified.add(sha256)
        finally:
            temporary.unlink(missing_ok=True)

    def _evict(self, keep: Path) -> None:
        with self._locked(".evict.lock"):
            entries = [p for p in self.directory.glob("??/*") if not p.name.startswith(".")]
            stats = [(p, p.stat()) for p in entries if p.exists()]
            total = sum(st.st_size for _, st in stats)
            for path, st in sorted(stats, key=lambda item: item[1].st_mtime_ns):
                if total <= self.max_bytes:
                    break
                if path == keep:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    total -= st.st_size

    @contextlib.contextmanager
    def _locked(self, relative: str) -> Iterator[None]:
        with open(self.directory / relative, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def usage(self) -> int:
        """Bytes the cache holds now."""
        return sum(p.stat().st_size for p in self.directory.glob("??/*") if not p.name.startswith("."))
