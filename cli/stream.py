"""``datamount cat`` and ``datamount pretty-print``: datasets as Arrow IPC streams through Unix pipes."""

from __future__ import annotations

import itertools
import sys
from typing import Any

import click
import numpy as np

from datamount.cli.datasets import describe, store_option
from datamount.cli.options import backend_options, options_dict
from datamount.readers.dataset import reader
from datamount.readers.stream import read_from, write_to
from datamount.storage import open_store

_ARRAY_VALUES_SHOWN = 4


@click.command(name="cat")
@click.argument("name")
@store_option
@backend_options
def cat(name: str, store_ref: str | None, options: tuple[str, ...]) -> None:
    """Write dataset NAME (or NAME@N) to stdout as an Arrow IPC stream, one entry per sample.

    Columns are named as in the dataset (e.g. file, label). Read the stream with read_from("-") from
    datamount.readers.stream, with any Arrow library, or with 'datamount pretty-print'.
    """
    if sys.stdout.isatty():
        raise click.UsageError(
            "refusing to write a binary stream to a terminal; pipe it, e.g. "
            f"'datamount cat {name} | datamount pretty-print'"
        )
    samples = reader(name, open_store(store_ref, **options_dict(options)))
    with write_to("-") as stream:
        stream.set_columns(*samples.manifest.columns)
        stream.write_many(samples())


@click.command(name="pretty-print")
@click.option("-n", "count", type=click.IntRange(min=0), help="Stop after N entries.")
def pretty_print(count: int | None) -> None:
    """Print the entries of the stream on stdin, one line each (bytes and arrays summarised)."""
    if sys.stdin.isatty():
        raise click.UsageError(
            "pretty-print reads a stream on stdin; pipe one in, e.g. 'datamount cat NAME | datamount pretty-print'"
        )
    with read_from("-") as stream:
        for index, entry in enumerate(itertools.islice(stream, count)):
            click.echo(f"{index}: " + ", ".join(f"{column}={show(value)}" for column, value in entry.items()))


def show(value: Any) -> str:
    """A stream value as ``pretty-print`` prints it: arrays as dtype, shape and their first values."""
    if not isinstance(value, np.ndarray):
        return describe(value)
    shape = ", ".join(str(size) for size in value.shape)
    values = [str(item) for item in value.reshape(-1)[:_ARRAY_VALUES_SHOWN]]  # numpy scalars: shortest for dtype
    more = ", ..." if value.size > _ARRAY_VALUES_SHOWN else ""
    shown = values[0] if value.ndim == 0 else f"[{', '.join(values)}{more}]"
    return f"{value.dtype}[{shape}] {shown}"
