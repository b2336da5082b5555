"""A store's options checked before any client sees them: an unknown name is refused naming the known ones (and the
closest), an endpoint that is not an http(s) URL is refused, so a typo is one clear line, not a client's TypeError
or a silent default."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from datamount.storage import redact
from datamount.storage.errors import StoreConfigError

#: Options of fsspec's own that every fsspec filesystem takes (its instance and listing caches).
FSSPEC_OPTIONS = frozenset({"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"})


def refuse_unknown(
    options: Mapping[str, Any], known: Iterable[str], *, store: str, shown: Iterable[str] = (), more: str = ""
) -> None:
    """Raise :class:`StoreConfigError` naming the options of ``options`` not in ``known`` (``store``: "S3", "GCS"...)
    with the closest known name, and listing the options (``shown``, else ``known``; ``more`` is added after them,
    e.g. "and s3fs's own")."""
    names = sorted(set(known))
    unknown = sorted(set(options) - set(names))
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], names, n=1)
    guess = f" (did you mean {close[0]}?)" if close else ""
    listed = ", ".join(sorted(set(shown) or names))
    takes = f"the options are {listed}{more}" if listed else f"a {store} store takes no options"
    raise StoreConfigError(f"unknown {store} store option {', '.join(unknown)}{guess}; {takes}")


def parameter_names(*functions: Callable[..., Any]) -> frozenset[str]:
    """The names a caller can pass to ``functions`` by keyword (``self`` and ``*args``/``**kwargs`` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(
        parameter.name
        for function in functions
        for parameter in inspect.signature(function).parameters.values()
        if parameter.kind in kinds and parameter.name != "self"
    )


def check_endpoint_url(value: Any) -> None:
    """Refuse an ``endpoint_url`` that is not ``http(s)://HOST[:PORT]``."""
    if value is None:
        return
    parts = urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = redact.redact_url(str(value))
        raise StoreConfigError(f"endpoint_url must be a URL such as http://HOST:PORT or https://HOST, got {shown!r}")
