"""Where an import's SOURCE is: a local path or any store URL, naming a folder, a file, or files by a brace
pattern (WebDataset's ``shards-{000000..000999}.tar``).

The rule: a SOURCE with a ``{`` names files by pattern; the folder before the pattern's first component is opened as
a store (a profile's options and ``--from-option`` apply) and the pattern is expanded (``braceexpand``, as WebDataset
expands it) into names in that folder, every one of which must exist. Otherwise SOURCE names a file (the store is
its folder) when there is a file of that name, else a folder. Names never climb out of the folder opened.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import braceexpand

from datamount.storage import ObjectNotFoundError, Store, open_store
from datamount.storage.redact import redact_url


@dataclass(frozen=True)
class Location:
    """A source opened: the folder its files are in (a store), how messages print it, and the files SOURCE named
    (relative to the folder, in order), empty when SOURCE named the folder itself."""

    store: Store
    where: str
    names: list[str] = field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        """Each named file's size; an :class:`~datamount.storage.ObjectNotFoundError` naming the first missing."""
        listing = self.store.list(posixpath.dirname(self.names[0])) if self.names else {}
        sizes = {}
        for name in self.names:
            if name not in listing:
                listing.update(self.store.list(posixpath.dirname(name)))
            if name not in listing:
                raise ObjectNotFoundError(f"{self.where}: no file {name!r} (named by the source's pattern)")
            sizes[name] = listing[name]
        return sizes


def locate(source: str | os.PathLike[str], options: Mapping[str, Any] | None = None) -> Location:
    """Open ``source`` (see the module's rule); ``options`` are the store's (``endpoint_url``, ``key``...)."""
    text = os.fspath(source)
    options = dict(options or {})
    if "{" in text:
        folder, _, pattern = _split_at_pattern(text)
        store = open_store(folder, **options)
        names = [_inside(name, text) for name in braceexpand.braceexpand(pattern)]
        return Location(store, redact_url(text), names)
    folder, _, last = text.rstrip("/").rpartition("/")
    if "://" not in text and os.path.isdir(text):
        return Location(open_store(text, **options), redact_url(text))
    if "://" not in text and os.path.isfile(text):
        return Location(open_store(folder or ".", **options), redact_url(text), [last])
    if "://" in text and "://" not in folder:  # a bucket's root, or a URL with nothing after its scheme
        return Location(open_store(text, **options), redact_url(text))
    if "://" in text:
        parent = open_store(folder, **options)
        info = parent.info(last) if parent.exists(last) else None
        if info is not None and not info.is_dir:
            return Location(parent, redact_url(text), [last])
        return Location(open_store(text, **options), redact_url(text))
    raise ObjectNotFoundError(f"{text}: no such file or folder")


def _split_at_pattern(text: str) -> tuple[str, str, str]:
    """``text`` cut before the path component that holds its first ``{``: (folder, ``/``, pattern)."""
    before = text[: text.index("{")]
    folder = before.rpartition("/")[0]
    if not folder or folder.endswith(":/"):  # the pattern is the first component: the current folder, or a bucket's
        folder = folder + "/" if folder.endswith(":/") else "."
    return folder, "/", text[len(folder) :].lstrip("/") if folder != "." else text


def _inside(name: str, source: str) -> str:
    """``name`` (expanded from a pattern), refused where it would leave the folder opened."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{source}: the pattern names {name!r}, which is not a plain path inside its folder")
    return name
