"""What a public dataset is: its published files and their checksums, its splits, and how its rows are built."""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from datamount.datasets.errors import (
    SourceNotFoundError,
)
from datamount.datasets.names import PUBLIC_NAMESPACE
from datamount.datasets.progress import Progress
from datamount.datasets.row_folders import RowFiles

if TYPE_CHECKING:
    from datamount.datasets.public.writer import PublicWriter

#: The column every public dataset ends with: which split (``train``, ``test``, ``val``...) a row belongs to.


@dataclass(frozen=True)
class RemoteFile:
    """A published file: its name, md5 (as its publishers give it), the URLs it is served at (first tried first;
    none when it cannot be downloaded) and, when known, its size."""

    name: str
    md5: str
    urls: tuple[str, ...] = ()
    size: int | None = None

    @property
    def aliases(self) -> tuple[str, ...]:
        """Names a copy of this file may have in a folder: its own, and the last part of each URL (escaped or not:
        Paddle's cache keeps ``imdb%2FaclImdb_v1.tar.gz``)."""
        names = [self.name]
        for url in self.urls:
            last = posixpath.basename(urlsplit(url).path)
            names += [last, posixpath.basename(unquote(last))]
        return tuple(dict.fromkeys(name for name in names if name))


@dataclass(frozen=True)
class Sources:
    """What a build reads: the published files by name (downloaded, or found under ``--from``), the md5 of every
    published file by name (for files checked while they are streamed), and the ``--from`` folder when the dataset
    is built from a folder of the user's (ImageNet)."""

    files: Mapping[str, Path]
    checksums: Mapping[str, str]
    folder: Path | None = None

    def file(self, name: str) -> Path:
        try:
            return self.files[name]
        except KeyError:
            raise SourceNotFoundError(f"the source has no {name}") from None


#: Reads the sources and writes rows, split after split, into the writer (which commits them afterwards).
Builder = Callable[[Sources, "PublicWriter", Progress], None]


@dataclass(frozen=True)
class PublicDataset:
    """One public dataset: stored as ``public/NAME``, rows of ``columns`` plus ``split``, one block of rows per
    split in the order of :attr:`splits`."""

    name: str
    title: str
    kind: str
    columns: tuple[str, ...]
    splits: tuple[str, ...]
    files: tuple[RemoteFile, ...]
    build: Builder
    source_help: str
    #: True when the files cannot be downloaded (ImageNet needs an account): ``--from`` is the only way.
    needs_source: bool = False
    #: The pip extra holding optional packages the build may need (``imagenet``: scipy for the devkit).
    pip_extra: str = ""
    #: How its rows are shown as files (``export``, ``datamount mount``); ``None``: the default form
    #: (:mod:`datamount.datasets.row_folders`).
    row_files: RowFiles | None = None

    @property
    def dataset_name(self) -> str:
        """The dataset's name in the store."""
        return f"{PUBLIC_NAMESPACE}/{self.name}"

    @property
    def downloadable(self) -> bool:
        return not self.needs_source and all(file.urls for file in self.files)

    def with_checksums(self, checksums: Mapping[str, str]) -> PublicDataset:
        """A copy whose files have these md5s (by file name): for a site that serves its own variant of the files,
        and for tests that serve generated ones. Unknown names are an error."""
        unknown = sorted(set(checksums) - {file.name for file in self.files})
        if unknown:
            raise ValueError(f"{self.name} has no file named {', '.join(unknown)}")
        files = tuple(dataclasses.replace(f, md5=checksums.get(f.name, f.md5)) for f in self.files)
        return dataclasses.replace(self, files=files)
