"""``datamount public ls``, ``public install NAME``, ``public rm NAME``: public datasets in the store's public area."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from datamount.cli.datasets import confirm_removal, format_size, store_option
from datamount.cli.options import backend_options, options_dict
from datamount.cli.progress import ProgressBar
from datamount.datasets import catalog
from datamount.datasets import public as public_datasets
from datamount.datasets.public.download import RetryPolicy
from datamount.datasets.public.spec import PublicDataset
from datamount.storage import Store, open_store


def _open(store_ref: str | None, options: tuple[str, ...]) -> Store:
    return open_store(store_ref, **options_dict(options))


@click.group(name="public")
def public() -> None:
    """Public datasets (MNIST, IMDB, ImageNet, WMT14) in the store's public area, read with reader(NAME)."""


@public.command(name="ls")
@store_option
@backend_options
def list_public(store_ref: str | None, options: tuple[str, ...]) -> None:
    """List the public datasets: those installed in the store, and those that can be installed."""
    store = _open(store_ref, options)
    table = Table(
        "name", "installed", "rows", "size", "install from", "what", box=None, header_style="bold", pad_edge=False
    )
    for found in public_datasets.status(store):
        spec, manifest = found.spec, found.manifest
        rows = ", ".join(f"{split} {count:,}" for split, count in found.splits.items())
        table.add_row(
            spec.name,
            f"@{manifest.version} {manifest.created}" if manifest is not None else "no",
            rows or "-",
            format_size(manifest.total_bytes) if manifest is not None else "-",
            _origin(spec),
            spec.title,
        )
    console = Console(width=200 if not sys.stdout.isatty() else None)
    console.print(table)
    console.print(f"store: {store.url}; install with 'datamount public install NAME', read with reader(NAME)")


def _origin(spec: PublicDataset) -> str:
    if not spec.downloadable:
        return "--from PATH only"
    sizes = [file.size for file in spec.files]
    total = f" ({format_size(sum(s for s in sizes if s))})" if all(sizes) else ""
    return f"download{total}"


@public.command()
@click.argument("name")
@click.option("--from", "source", metavar="PATH", help="Build from files you have instead of downloading them.")
@store_option
@backend_options
@click.option(
    "--mirror",
    metavar="URL",
    help="Download from URL/NAME/FILE instead of the published URLs (default: $DATAMOUNT_PUBLIC_MIRROR).",
)
@click.option(
    "--retries",
    default=4,
    show_default=True,
    type=click.IntRange(min=0, max=100),
    help="Further attempts per file after a failed one (resumed where it stopped).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def install(
    name: str,
    source: str | None,
    store_ref: str | None,
    options: tuple[str, ...],
    mirror: str | None,
    retries: int,
    quiet: bool,
) -> None:
    """Install public dataset NAME (see 'datamount public ls') into the store's public area.

    The published files are downloaded (checked against their md5, resumed after an interruption) into the cache,
    or taken from --from PATH, and converted into the dataset public/NAME. Installing it again does nothing.
    """
    store = _open(store_ref, options)
    with ProgressBar(quiet=quiet) as bar:
        result = public_datasets.install(
            name, store=store, source=source, mirror=mirror, retry=RetryPolicy(attempts=retries + 1), progress=bar
        )
    manifest = result.manifest
    splits = ", ".join(f"{split} {rows:,}" for split, rows in result.splits.items())
    if not result.created:
        click.echo(f"{name} is already installed as {manifest.ref} ({splits} rows); nothing to do")
        return
    click.echo(
        f"installed {name} as {manifest.ref}: {splits} rows, {format_size(manifest.total_bytes)} in "
        f"{len(manifest.shards)} shard(s) in {store.url}; read it with reader({name!r})"
    )


@public.command(name="rm")
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@store_option
@backend_options
def remove(name: str, yes: bool, store_ref: str | None, options: tuple[str, ...]) -> None:
    """Remove installed public dataset NAME from the store (the download cache stays)."""
    store = _open(store_ref, options)
    spec = public_datasets.get(name)
    if not yes and catalog.versions(store, spec.dataset_name):
        confirm_removal(spec.dataset_name, store)
    removed = public_datasets.remove(name, store=store)
    click.echo(f"removed {spec.dataset_name} version(s) {', '.join(str(v) for v in removed)}")
