"""``datamount cat`` and ``datamount pretty-print``: datasets as Arrow IPC streams through Unix pipes."""

from __future__ import annotations

import itertools
import sys

import click

from datamount.cli.datasets import describe, parse_size, store_option
from datamount.cli.options import backend_options, options_dict
from datamount.cli.progress import ProgressBar
from datamount.readers.dataset import reader
from datamount.readers.stream import import_stream, read_from, write_to
from datamount.storage import open_store


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
    samples = reader(name, open_store(store_ref, **options_dict(options)), rank=0, world_size=1)
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
            click.echo(f"{index}: " + ", ".join(f"{column}={describe(value)}" for column, value in entry.items()))


@click.command(name="import")
@click.argument("name")
@click.option("--from", "source", default="-", show_default=True, help="Read the stream from this file, not stdin.")
@click.option("--shard-size", default="256MB", show_default=True, help="Bytes per Parquet shard.")
@store_option
@backend_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def import_(
    name: str, source: str, shard_size: str, store_ref: str | None, options: tuple[str, ...], quiet: bool
) -> None:
    """Store the stream on stdin as a new version of dataset NAME (kept as Parquet shards).

    The version is committed only once the stream has ended properly, so a pipeline that fails part way leaves
    nothing behind: 'datamount cat raw | python clean.py | datamount import clean'.
    """
    if source == "-" and sys.stdin.isatty():
        raise click.UsageError(
            "import reads a stream on stdin; pipe one in, e.g. 'datamount cat NAME | datamount import NEW'"
        )
    shard_bytes = parse_size(shard_size)
    store = open_store(store_ref, **options_dict(options))
    with ProgressBar(quiet=quiet) as bar:
        manifest = import_stream(source, name, store=store, shard_bytes=shard_bytes, progress=bar)
    click.echo(
        f"imported {manifest.ref}: {manifest.rows:,} rows, columns {', '.join(manifest.columns)}, "
        f"{len(manifest.shards)} shard(s) in {store.url}"
    )
