"""How the commands write sizes, sample values, tables and ``key: value`` fields, and how they read sizes."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

F = TypeVar("F", bound=Callable[..., Any])

#: The version of the JSON the commands print with ``--json`` (``docs/cli.md``): a key is only ever added within one
#: version; a key removed or changed in meaning makes the next.
JSON_FORMAT = 1

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


def counted(count: int, noun: str) -> str:
    """``1 row``, ``2 rows``, ``4,096 rows``: a count and its noun (plural with an ``s``)."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


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
    numpy = sys.modules.get("numpy")  # not imported here: no value is an array unless numpy was imported
    if numpy is not None and isinstance(value, numpy.ndarray):
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


def console() -> Console:
    """The console a command prints its lines to: fitted to a terminal's width; to a pipe or a file, a line however
    long stays one line and has no colour (rich would wrap it at 80 columns there, splitting a path)."""
    if sys.stdout.isatty():
        return Console()
    return Console(soft_wrap=True, color_system=None, highlight=False)


def print_table(table: Table) -> None:
    """Print ``table``: fitted to a terminal's width; to a pipe or a file, one line per row however long, with no
    trailing spaces (rich would wrap cells at 80 columns there)."""
    if sys.stdout.isatty():
        Console().print(table)
        return
    rendered = io.StringIO()
    Console(file=rendered, width=1 << 16, color_system=None, highlight=False).print(table)
    click.echo("\n".join(line.rstrip() for line in rendered.getvalue().splitlines()))


def json_option(function: F) -> F:
    """Add ``--json``: the command prints one JSON document (``docs/cli.md``) instead of text, as ``as_json``."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of text (see docs/cli.md)."
    )(function)


def echo_json(command: str, body: dict[str, Any]) -> None:
    """Print a command's JSON document: ``{"datamount": COMMAND, "format": N, ...}``."""
    click.echo(json.dumps({"datamount": command, "format": JSON_FORMAT, **body}, indent=2, ensure_ascii=False))


def echo_fields(fields: Iterable[tuple[str, object]]) -> None:
    """Print ``key: value`` lines, the keys right-aligned (``datamount info``, ``datamount tasks``)."""
    for key, value in fields:
        click.echo(f"{key:>9}: {value}")
