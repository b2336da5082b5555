"""The grammar of ``datamount://`` URLs: ``datamount://<store>/<name>@<version>/<path>``.

``<store>`` is a profile's name, or ``_`` for the default store (``$DATAMOUNT_STORE``, else the configuration's
``default``, else the local folder), or for the store a filesystem was given (``storage_options={"store": URL}``);
``<name>`` a dataset's name as everywhere (``pets``, ``team/pets``, ``public/mnist``); ``<version>`` a number or
``latest``; ``<path>`` a file or folder of the version's tree (empty: its root). A filesystem's paths are these URLs
without ``datamount://``.

A path means what it means on a disk, and what fsspec's ``LocalFileSystem`` answers for it there: ``data//cat``,
``./data/cat`` and ``data/cat/`` are ``data/cat`` (:func:`strip` writes each path in that one form, and every name
the filesystem hands out is in it); ``file/.`` is not ``file`` (it names a folder or nothing). ``..`` is refused: a
path never climbs out of its version.
"""

from __future__ import annotations

from typing import NamedTuple

from datamount.datasets.names import parse_ref

PROTOCOL = "datamount"
#: The ``<store>`` of the default store (or of the store given to the filesystem).
DEFAULT_STORE = "_"
LATEST = "latest"


class VersionPath(NamedTuple):
    """A path parsed: ``store`` (a profile or ``_``), the dataset's ``name``, its ``version`` as written (a number
    or ``latest``), and ``inner``, the path in its tree (``""`` for its root)."""

    store: str
    name: str
    version: str
    inner: str
    #: The path ended in ``/.``: it names a folder or nothing.
    folder: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        """The version as written: what a filesystem resolves once and keeps."""
        return self.store, self.name, self.version

    @property
    def root(self) -> str:
        """The path of the version's root folder."""
        return f"{self.store}/{self.name}@{self.version}"

    def joined(self, inner: str) -> str:
        """The path of ``inner`` in the same version, written as this one is."""
        return f"{self.root}/{inner}" if inner else self.root


def strip(url: str) -> str:
    """``url`` without ``datamount://``, in the form POSIX resolves it to: empty and ``.`` parts dropped
    (``data//cat``, ``./data``, ``data/cat/`` are ``data/cat``); a last ``.`` is kept as ``/.``, because ``file/.``
    names nothing (``NotADirectoryError``) where ``file`` names a file. ``..`` is left for :func:`parse` to refuse."""
    if url.startswith(PROTOCOL + "://"):
        url = url[len(PROTOCOL) + 3 :]
    elif url.startswith(PROTOCOL + "::"):
        url = url[len(PROTOCOL) + 2 :]
    parts = [part for part in url.split("/") if part]
    kept = [part for part in parts if part != "."]
    if kept and parts[-1] == ".":
        kept.append(".")
    return "/".join(kept)


def parse(path: str) -> VersionPath:
    """``path`` (a URL, with or without ``datamount://``, in any spelling :func:`strip` resolves) as a
    :class:`VersionPath`; a ``ValueError`` naming the grammar for one that names no version (``pets`` rather than
    ``_/pets@1``), or whose path climbs (``..``)."""
    parts = strip(path).split("/")
    folder = parts[-1] == "."
    if folder:
        parts.pop()
    at = next((index for index, part in enumerate(parts) if "@" in part), None)
    if at is None or at < 1:
        raise ValueError(
            f"datamount://{strip(path)} names no dataset version: write datamount://<store>/<name>@<version>/<path>, "
            f"<store> a profile or {DEFAULT_STORE} for the default store, <version> a number or {LATEST}"
        )
    last, _, version = parts[at].partition("@")
    name = "/".join([*parts[1:at], last])
    parse_ref(name if version == LATEST else f"{name}@{version}")  # a bad name or version is named here
    inner = "/".join(parts[at + 1 :])
    if ".." in parts[at + 1 :]:
        raise ValueError(
            f"datamount://{strip(path)}: a path in a version never climbs out of a folder: write it without '..'"
        )
    return VersionPath(parts[0], name, version, inner, folder)
