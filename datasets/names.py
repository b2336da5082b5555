"""Dataset names and references: ``name``, ``team/name``, ``name@3``, ``public/mnist``.

A version number written as text (in a reference, a ``datamount://`` URL, a file of a versions folder) is read by
:func:`version_number` alone: ASCII digits ``0-9``, no sign, space or leading zero, from 1 to 18 digits (below
2**63, what every tool's integers hold). ``str.isdigit`` is not the rule: it takes ``²`` (which ``int`` refuses) and
``١`` (which ``int`` reads as 1). Reserved words are compared without case, as a case-insensitive store (macOS,
Windows, some NAS shares) compares the folders they name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from datamount.datasets.errors import InvalidDatasetNameError
from datamount.storage import arguments

_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAME = re.compile(rf"{_PART}(/{_PART})?")
#: The largest version number (18 digits): below 2**63.
LARGEST_VERSION = 10**18 - 1
PUBLIC_NAMESPACE = "public"
#: Words a name may not end in: the store's areas, the folders of a dataset's own layout (so that no dataset's folder
#: is ever inside another's: ``team/x`` lives beside ``team``'s ``versions``, never in it), and ``latest``.
RESERVED = frozenset({"public", "datasets", "latest", "tmp", "objects", "versions", "lists", "packs", "locks"})


@dataclass(frozen=True)
class DatasetRef:
    """A dataset name and, optionally, a version number (``None`` means the latest committed one)."""

    name: str
    version: int | None = None

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"

    @property
    def is_public(self) -> bool:
        return self.name.startswith(PUBLIC_NAMESPACE + "/")


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid dataset name; raise :class:`InvalidDatasetNameError` naming the rule."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidDatasetNameError(
            f"invalid dataset name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or "
            "digit, at most 128), with at most one '/' after a namespace, e.g. 'cifar-10' or 'team/cifar-10'"
        )
    parts = name.split("/")
    if any(".." in part for part in parts):
        raise InvalidDatasetNameError(f"invalid dataset name {name!r}: '..' is not allowed")
    if name.lower() in RESERVED or parts[-1].lower() in RESERVED:
        raise InvalidDatasetNameError(
            f"dataset name {name!r} is reserved (a name may not end in {', '.join(sorted(RESERVED))}); choose another"
        )
    return name


def version_number(text: str) -> int | None:
    """The version number ``text`` writes (``"12"`` -> 12), or None when it writes none (see the module's rule)."""
    number = arguments.whole_number_text(text)
    return number if number is not None and 0 < number <= LARGEST_VERSION and str(number) == text else None


def parse_ref(text: str) -> DatasetRef:
    """Parse ``name`` or ``name@N`` (``N`` a :func:`version_number`)."""
    name, sep, version = text.partition("@") if isinstance(text, str) else (text, "", "")
    validate_name(name)
    if not sep:
        return DatasetRef(name)
    number = version_number(version)
    if number is None:
        raise InvalidDatasetNameError(
            f"invalid version {version!r} in {text!r}: write NAME@N with N a whole number from 1 in the digits 0-9 "
            "(no sign, space or leading zero; at most 18 digits)"
        )
    return DatasetRef(name, number)
