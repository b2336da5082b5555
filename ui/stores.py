"""The stores a ``datamount ui`` shows, by the key its URLs name them with.

A URL names a store by a key given here when the server starts (a profile's name, ``default``, ``store-2``): never
by a URL or a path, so that a request can only reach the stores the command was given. Each is opened when first
shown; one that cannot be opened shows why, and the others still work.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datamount.storage import DatamountError, Store, open_store, profiles
from datamount.storage.redact import redact_url

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass
class ShelfEntry:
    """One store: its key in URLs, what names it (shown, credentials removed), and, once opened, the store or why
    it could not be."""

    key: str
    label: str
    target: Store | str | None
    options: dict[str, Any] = field(default_factory=dict)
    opened: Store | None = None
    error: str | None = None


class StoreShelf:
    """The stores a server may read, by key. ``targets`` maps each key to a :class:`Store`, or to what
    :func:`~datamount.storage.open_store` opens (``None``: the default store) with ``options``."""

    def __init__(self, targets: Mapping[str, Store | str | None], options: Mapping[str, Any] | None = None) -> None:
        self._entries: dict[str, ShelfEntry] = {}
        self._lock = threading.Lock()
        for key, target in targets.items():
            if not _KEY.fullmatch(key):
                raise ValueError(f"store key {key!r}: use letters, digits, '_' and '-'")
            label = target.url if isinstance(target, Store) else redact_url(target or "the default store")
            self._entries[key] = ShelfEntry(key, label, target, dict(options or {}))

    @classmethod
    def from_command(cls, targets: Iterable[str], options: Mapping[str, Any] | None = None) -> StoreShelf:
        """The stores ``datamount ui`` was given with ``--store`` (keyed by profile name, else ``store-N``); with
        none, the default store and every profile of the configuration."""
        given = list(targets)
        if given:
            keys = [t if _KEY.fullmatch(t) and t in profiles.load_config().profiles else f"store-{n}" for n, t in
                    enumerate(given, 1)]  # fmt: skip
            return cls(dict(zip(keys, given, strict=True)), options)
        config = profiles.load_config()
        default = profiles.resolve(None, config)
        found: dict[str, Store | str | None] = {default.name or "default": None}
        found.update((name, name) for name in config.profiles if name not in found and _KEY.fullmatch(name))
        return cls(found, options)

    def entries(self) -> list[ShelfEntry]:
        return list(self._entries.values())

    def entry(self, key: str) -> ShelfEntry:
        """The store of ``key`` (:class:`KeyError` when there is none)."""
        return self._entries[key]

    def open(self, key: str) -> Store:
        """The store of ``key``, opened on first use (:class:`KeyError` for an unknown key; the store's error when
        it cannot be opened, said again at each use)."""
        entry = self._entries[key]
        with self._lock:
            if entry.opened is None:
                if isinstance(entry.target, Store):
                    entry.opened = entry.target
                else:
                    try:
                        entry.opened = open_store(entry.target, **entry.options)
                    except DatamountError as exc:
                        entry.error = str(exc)
                        raise
                entry.error = None
                entry.label = entry.opened.url
            return entry.opened
