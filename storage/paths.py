"""Validation of store-relative paths: nothing may climb out of a store's root."""

from __future__ import annotations

import re

from datamount.storage.errors import UnsafePathError

_DRIVE = re.compile(r"^[A-Za-z]:")


def clean_relpath(path: str, *, allow_root: bool = False) -> str:
    """Return ``path`` normalised to ``a/b/c`` form, or raise :class:`UnsafePathError`.

    Refused: absolute paths, URLs, drive letters, backslashes, NUL bytes and any ``..`` component (even one that
    would stay inside the root: a path means one thing on every backend). ``.`` components and repeated slashes
    are dropped. The empty path (the root itself) is allowed only with ``allow_root``.
    """
    if not isinstance(path, str):
        raise UnsafePathError(f"store path must be a str, not {type(path).__name__}: {path!r}")
    if "\x00" in path:
        raise UnsafePathError(f"store path contains a NUL byte: {path!r}")
    if "\\" in path:
        raise UnsafePathError(f"store path contains a backslash (use '/'): {path!r}")
    if path.startswith("/") or "://" in path or _DRIVE.match(path) or path.startswith("~"):
        raise UnsafePathError(f"store path must be relative to the store root: {path!r}")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafePathError(f"store path may not contain '..': {path!r}")
    if not parts and not allow_root:
        raise UnsafePathError(f"store path is empty: {path!r}")
    return "/".join(parts)


def join(*parts: str) -> str:
    """Join store-relative path pieces with '/', validating the result."""
    return clean_relpath("/".join(p for p in parts if p), allow_root=True)
