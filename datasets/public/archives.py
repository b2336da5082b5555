"""Reading source archives in one sequential pass: tar members as they come (nothing extracted to disk), the
bytes read reported as progress, and optionally the whole file's md5 checked at the end of the pass."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from datamount.datasets.errors import SourceFormatError, SourceNotFoundError
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.public.download import CHUNK, SITE_COPY_HINT
from datamount.storage.errors import IntegrityError

#: What a damaged or foreign archive raises while it is read.
ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)


class MeteredReader(io.RawIOBase):
    """A binary file read front to back, whose bytes are counted as progress and, optionally, hashed."""

    def __init__(self, raw: IO[bytes], *, progress: Progress, hashed: bool) -> None:
        self._raw = raw
        self._progress = progress
        self._digest = hashlib.md5(usedforsecurity=False) if hashed else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if count:
            if self._digest is not None:
                self._digest.update(memoryview(buffer)[:count])
            self._progress.advance(items=0, size=count)
        return count or 0

    def drain(self) -> None:
        """Read what is left (a tar's zero padding), so that the hash covers the whole file."""
        while self.read(CHUNK):
            pass

    def hexdigest(self) -> str:
        if self._digest is None:
            raise ValueError("this reader does not hash")
        return self._digest.hexdigest()


@contextlib.contextmanager
def read_tar(
    path: str | os.PathLike[str], *, md5: str | None = None, progress: Progress | None = None
) -> Iterator[tarfile.TarFile]:
    """A tar archive (plain, gzip, bzip2 or xz) open for one pass over its members, in order.

    A damaged archive raises :class:`SourceFormatError` naming it. With ``md5``, the file's md5 is checked once
    the pass is over (:class:`~datamount.storage.IntegrityError` when it differs), with no second read.
    """
    location = Path(path)
    try:
        raw = open(location, "rb")  # noqa: SIM115 - closed by the ExitStack below
    except FileNotFoundError:
        raise SourceNotFoundError(f"{location} does not exist") from None
    with contextlib.ExitStack() as stack:
        stack.enter_context(raw)
        reader = MeteredReader(raw, progress=progress or Silent(), hashed=md5 is not None)
        buffered = stack.enter_context(io.BufferedReader(reader, CHUNK))
        try:
            archive = stack.enter_context(tarfile.open(fileobj=buffered, mode="r|*"))
            yield archive
        except ARCHIVE_ERRORS as exc:
            raise SourceFormatError(f"{location} is not a readable tar archive: {exc or type(exc).__name__}") from exc
        if md5 is not None:
            buffered.read()
            reader.drain()
            found = reader.hexdigest()
            if found != md5:
                raise IntegrityError(
                    f"{location}: its md5 is {found}, the published file's is {md5}: the file is damaged or is not "
                    f"the published one; {SITE_COPY_HINT}"
                )


def member_bytes(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """The bytes of a regular file member of a tar being read in one pass."""
    handle = archive.extractfile(member)
    if handle is None:
        raise SourceFormatError(f"{member.name} in the archive is not a regular file")
    with handle:
        return handle.read()


def file_size(path: str | os.PathLike[str]) -> int:
    """The size of a source file, or :class:`SourceNotFoundError` naming it."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise SourceNotFoundError(f"{os.fspath(path)} does not exist") from None
