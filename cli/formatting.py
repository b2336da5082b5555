"""How the commands write sizes, sample values, tables and ``key: value`` fields, and how they read sizes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import click
import numpy as np
from rich.table import Table

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?)[bB]?\s*")
_ARRAY_VALUES_SHOWN = 4
_MAGIC = [
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF8", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"\x93NUMPY", "NPY"),
]


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


def format_size(size: int) -> str:
    """``12.3 MB``-style sizes (powers of 1000)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:,.1f} TB"


def describe(value: Any) -> str:
    """A sample value as ``head`` prints it: bytes as their type and size, arrays as dtype, shape and first values,
    text as a quoted string."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{_bytes_type(bytes(value[:16]))} {len(value):,} bytes>"
    if isinstance(value, np.ndarray):
        shape = ", ".join(str(size) for size in value.shape)
        values = [str(item) for item in value.reshape(-1)[:_ARRAY_VALUES_SHOWN]]  # numpy scalars print shortest
        more = ", ..." if value.size > _ARRAY_VALUES_SHOWN else ""
        shown = values[0] if value.ndim == 0 else f"[{', '.join(values)}{more}]"
        return f"{value.dtype}[{shape}] {shown}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "...'"


def _bytes_type(head_bytes: bytes) -> str:
    if head_bytes[:4] == b"RIFF" and head_bytes[8:12] == b"WEBP":
        return "WEBP"
    return next((label for magic, label in _MAGIC if head_bytes.startswith(magic)), "bytes")


def plain_table(*headers: str, **options: Any) -> Table:
    """A rich table as every listing prints one: no borders, bold headers."""
    return Table(*headers, box=None, header_style="bold", **options)


def echo_fields(fields: Iterable[tuple[str, object]]) -> None:
    """Print ``key: value`` lines, the keys right-aligned (``datamount info``, ``datamount tasks``)."""
    for key, value in fields:
        click.echo(f"{key:>9}: {value}")
