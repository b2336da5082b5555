"""Checking the arguments of the public API, one way everywhere: a wrong type is a ``TypeError``, a wrong value a
``ValueError`` (or a domain error that subclasses it, e.g. ``DistributedConfigError``); each message names the
argument, what it got, and what it takes."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Collection
from typing import TypeVar

T = TypeVar("T")

#: A whole number as text: the ASCII digits 0-9, a minus sign first, at most 1,000 digits (``int`` refuses 4,300).
#: ``str.isdigit`` is not this: it takes ``²``, which ``int`` refuses, and ``١``, which ``int`` reads as 1.
_WHOLE = re.compile(r"-?[0-9]{1,1000}")
#: A size as people write one: ``256MB``, ``64MiB``, ``1G``, ``1000``.
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?)[bB]?\s*")


def whole_number(
    value: object,
    name: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[ValueError] = ValueError,
) -> int:
    """``value`` if it is a whole number (not a bool) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    if minimum is not None and value < minimum:
        raise error(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise error(f"{name} must be at most {maximum}, got {value}")
    return int(value)


def positive_number(value: object, name: str, *, error: type[ValueError] = ValueError) -> float:
    """``value`` if it is a finite number above zero (seconds, sizes)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not 0 < value < math.inf:
        raise error(f"{name} must be a positive number, got {value}")
    return float(value)


def boolean(value: object, name: str) -> bool:
    """``value`` if it is True or False (not 0, 1 or None)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def one_of(value: T, name: str, choices: Collection[T], *, error: type[ValueError] = ValueError) -> T:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise error(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def whole_number_text(text: str, *, signed: bool = False) -> int | None:
    """The whole number ``text`` writes in the ASCII digits 0-9 (after a ``-`` where ``signed``), or None."""
    if not _WHOLE.fullmatch(text) or (text.startswith("-") and not signed):
        return None
    return int(text)


def parse_size(text: str) -> int:
    """``256MB``, ``64MiB``, ``1G``, ``1000`` -> bytes; a :class:`ValueError` saying how to write one otherwise."""
    match = _SIZE.fullmatch(text)
    if not match:
        raise ValueError(f"{text!r} is not a size; write e.g. 256MB, 64MiB or 1G")
    number, unit, binary = match.groups()
    base = 1024 if binary else 1000
    size = int(float(number) * base ** "_KMGT".index(unit.upper() or "_"))
    if size < 1:
        raise ValueError("the size must be at least one byte")
    return size
