"""Per-request limits of the network backends: the options that bound how long a failing endpoint can hold a call."""

from __future__ import annotations

import math
from typing import Any

from datamount.storage.errors import StoreConfigError

#: Seconds to open a connection.
DEFAULT_CONNECT_TIMEOUT = 5.0
#: Seconds of silence while waiting for an answer or reading one; a whole transfer may take longer.
DEFAULT_READ_TIMEOUT = 30.0
#: New attempts after a failed request (connection error, timeout, 5xx, throttling).
DEFAULT_RETRIES = 2


def seconds_option(value: Any, name: str) -> float:
    """The value of timeout option ``name`` in seconds (``-o read_timeout=2.5`` arrives as text)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not 0 < seconds < math.inf:
        raise StoreConfigError(f"{name} must be a number of seconds > 0, got {value!r}")
    return seconds


def retries_option(value: Any) -> int:
    """The value of the ``retries`` option: a whole number >= 0."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise StoreConfigError(f"retries must be a whole number >= 0 (new attempts after a failure), got {value!r}")
    return int(text)
