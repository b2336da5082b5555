"""``datamount cat`` and ``datamount pretty-print``: datasets as Arrow IPC streams through Unix pipes."""

from __future__ import annotations

import itertools
import sys
from typing import TYPE_CHECKING

import click

from datamount.cli.completion import complete_datasets
from datamount.cli.formatting import describe, echo_json, json_option
from datamount.cli.options import options_dict, shard_size_option, store_options
from datamount.cli.progress import ProgressBar
from datamount.readers import import_stream, read_from, reader, write_to
from datamount.storage import Store

if TYPE_CHECKING:
    from datamount.datasets.imports.writer import Imported
    from datamount.datasets.manifest import Manifest


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
    """``import``'s --from, once stdin (``-``) is known to be a pipe: refused before the store is opened (unless
    --from-format, read first, names another source)."""
    if source == "-" and sys.stdin.isatty() and ctx.params.get("form") is None:
        raise click.UsageError(
            "import reads a stream on stdin; pipe one in, e.g. 'datamount cat NAME | datamount import NEW'"
        )
    return source


@click.command(name="import")
@click.argument("arguments", metavar="[SOURCE] NAME", nargs=-1, required=True)
@click.option(
    "--from",
    "source",
    default="-",
    show_default=True,
    callback=_stream_source,
    help="Read the Arrow stream from this file, not stdin (without --from-format).",
)
@click.option(
    "--from-format",
    "form",
    type=click.Choice(["webdataset", "mds", "litdata", "hf", "parquet"]),
    is_eager=True,
    help="SOURCE is a dataset in this tool's format: a folder, a file, or files by a brace pattern, local or a URL.",
)
@click.option("--from-option", "from_options", multiple=True, metavar="KEY=VALUE", help="An option of SOURCE's store.")
@click.option("--split", help="Only this split of a source that has splits (hf); default: every split.")
@click.option("--image-field", help="The field that holds each sample's image (an image version).")
@click.option("--label-field", help="The field that holds each sample's class (an image version).")
@click.option("--columns", help="Keep these fields, in this order, as a table version's columns (comma-separated).")
@shard_size_option("Bytes per Parquet shard.")
@store_options
@json_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def import_(
    arguments: tuple[str, ...],
    source: str,
    form: str | None,
    from_options: tuple[str, ...],
    split: str | None,
    image_field: str | None,
    label_field: str | None,
    columns: str | None,
    shard_bytes: int,
    store: Store,
    as_json: bool,
    quiet: bool,
) -> None:
    """Store the stream on stdin as a new version of dataset NAME (kept as Parquet shards); or, with --from-format,
    the dataset at SOURCE written by another tool.

    The version is committed only once the stream has ended properly, so a pipeline that fails part way leaves
    nothing behind: 'datamount cat raw | python clean.py | datamount import clean'.

    With --from-format (webdataset, mds, litdata, hf, parquet), SOURCE is read once, every byte its format can check
    checked, straight into packed shards: 'datamount import --from-format webdataset "s3://b/shards-{000..099}.tar"
    NAME'. A sample of one image and one class becomes an image version (read as (image bytes, label), shown as
    files by the mount), any other a table version of its fields; --image-field/--label-field or --columns choose.
    Run again after a kill, it goes on from the last shard written: docs/importing.md.
    """
    if form is None:
        if len(arguments) != 1:
            raise click.UsageError("give NAME alone (the stream on stdin), or --from-format FORMAT SOURCE NAME")
        (name,) = arguments
        with ProgressBar(quiet=quiet or as_json) as bar:
            manifest = import_stream(source, name, store=store, shard_bytes=shard_bytes, progress=bar)
        _report(manifest, None, store, as_json)
        return
    if len(arguments) != 2 or source != "-":
        raise click.UsageError("--from-format takes SOURCE and NAME: 'datamount import --from-format hf ./saved NAME'")
    from datamount.datasets.imports import import_dataset

    origin, name = arguments
    with ProgressBar(quiet=quiet or as_json) as bar:
        done = import_dataset(
            origin,
            name,
            format=form,
            store=store,
            options=options_dict(from_options),
            split=split,
            image_field=image_field,
            label_field=label_field,
            columns=[column.strip() for column in columns.split(",")] if columns is not None else None,
            shard_bytes=shard_bytes,
            progress=bar,
        )
    _report(done.manifest, done, store, as_json)


def _report(manifest: Manifest, done: Imported | None, store: Store, as_json: bool) -> None:
    """What ``import`` stored: a line, or its JSON document."""
    resumed = done.resumed_rows if done is not None else 0
    if as_json:
        echo_json(
            "import",
            {
                "dataset": manifest.name,
                "version": manifest.version,
                "store": store.url,
                "kind": str(manifest.kind),
                "columns": manifest.columns,
                "rows": manifest.rows,
                "shards": len(manifest.shards),
                "bytes": sum(shard.size for shard in manifest.shards),
                "splits": manifest.splits,
                "resumed_rows": resumed,
                "source": manifest.source,
            },
        )
        return
    kept = f" ({resumed:,} of them from an earlier run's shards)" if resumed else ""
    click.echo(
        f"imported {manifest.ref}: {manifest.rows:,} rows{kept}, columns {', '.join(manifest.columns)}, "
        f"{len(manifest.shards)} shard(s) in {store.url}"
    )
