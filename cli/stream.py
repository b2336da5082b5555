"""``datamount cat`` and ``datamount pretty-print``: datasets as Arrow IPC streams through Unix pipes."""

from __future__ import annotations

import itertools
import sys

import click

from datamount.cli.completion import complete_datasets
from datamount.cli.formatting import describe
from datamount.cli.options import shard_size_option, store_options
from datamount.cli.progress import ProgressBar
from datamount.readers import import_stream, read_from, reader, write_to
from datamount.storage import Store


def _stdout_is_a_pipe(ctx: click.Context, param: click.Parameter, name: str) -> str:
    """``cat``'s NAME, once stdout is known not to be a terminal: refused before the store is opened."""
    if sys.stdout.isatty():
        raise click.UsageError(
            "refusing to write a binary stream to a terminal; pipe it, e.g. "
            f"'datamount cat {name} | datamount pretty-print'"
        )
    return name


@click.command(name="cat")
@click.argument("name", callback=_stdout_is_a_pipe, shell_complete=complete_datasets)
@store_options
def cat(name: str, store: Store) -> None:
    """Write dataset NAME (or NAME@N) to stdout as an Arrow IPC stream, one entry per sample.

    Columns are named as in the dataset (e.g. file, label). Read the stream with read_from("-") from
    datamount.readers.stream, with any Arrow library, or with 'datamount pretty-print'.
    """
    samples = reader(name, store, rank=0, world_size=1)
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


def _stream_source(ctx: click.Context, param: click.Parameter, source: str) -> str:
    """``import``'s --from, once stdin (``-``) is known to be a pipe: refused before the store is opened."""
    if source == "-" and sys.stdin.isatty():
        raise click.UsageError(
            "import reads a stream on stdin; pipe one in, e.g. 'datamount cat NAME | datamount import NEW'"
        )
    return source


@click.command(name="import")
@click.argument("name", shell_complete=complete_datasets)
@click.option(
    "--from",
    "source",
    default="-",
    show_default=True,
    callback=_stream_source,
    help="Read the stream from this file, not stdin.",
)
@shard_size_option("Bytes per Parquet shard.")
@store_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def import_(name: str, source: str, shard_bytes: int, store: Store, quiet: bool) -> None:
    """Store the stream on stdin as a new version of dataset NAME (kept as Parquet shards).

    The version is committed only once the stream has ended properly, so a pipeline that fails part way leaves
    nothing behind: 'datamount cat raw | python clean.py | datamount import clean'.
    """
    with ProgressBar(quiet=quiet) as bar:
        manifest = import_stream(source, name, store=store, shard_bytes=shard_bytes, progress=bar)
    click.echo(
        f"imported {manifest.ref}: {manifest.rows:,} rows, columns {', '.join(manifest.columns)}, "
        f"{len(manifest.shards)} shard(s) in {store.url}"
    )
