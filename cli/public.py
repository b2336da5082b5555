"""``datamount public ls``, ``public install NAME``, ``public rm NAME``: public datasets in the store's public area."""

from __future__ import annotations

from typing import Any

import click

from datamount.cli.completion import complete_public
from datamount.cli.formatting import echo_json, format_size, json_option, plain_table, print_table
from datamount.cli.options import store_options
from datamount.cli.progress import ProgressBar
from datamount.cli.removal import confirm_removal, echo_removed, wait_option, yes_option
from datamount.datasets import catalog
from datamount.datasets import public as public_datasets
from datamount.datasets.public import PublicDataset, RetryPolicy
from datamount.storage import Store


@click.group(name="public")
def public() -> None:
    """Public datasets (MNIST, IMDB, ImageNet, WMT14) in the store's public area, read with reader(NAME)."""


@public.command(name="ls")
@store_options
@json_option
def list_public(store: Store, as_json: bool) -> None:
    """List the public datasets: those installed in the store, and those that can be installed."""
    found = public_datasets.status(store)
    if as_json:
        echo_json("public ls", {"store": store.url, "datasets": [_status_json(status) for status in found]})
        return
    table = plain_table("name", "installed", "rows", "size", "install from", "what", pad_edge=False)
    for status in found:
        spec, manifest = status.spec, status.manifest
        rows = ", ".join(f"{split} {count:,}" for split, count in status.splits.items())
        if not rows and manifest is not None:
            rows = f"{manifest.rows:,}"
        table.add_row(
            status.name,
            f"@{manifest.version} {manifest.created}" if manifest is not None else "no",
            rows or "-",
            format_size(manifest.total_bytes) if manifest is not None else "-",
            _origin(spec),
            spec.title if spec is not None else f"{manifest.kind.value} dataset put in the public area by a user",
        )
    print_table(table)
    click.echo(f"store: {store.url}; install with 'datamount public install NAME', read with reader(NAME)")


def _status_json(status: public_datasets.PublicStatus) -> dict[str, Any]:
    spec, manifest = status.spec, status.manifest
    sizes = [file.size for file in spec.files] if spec is not None else []
    return {
        "name": status.name,
        "title": spec.title if spec is not None else None,
        "kind": spec.kind if spec is not None else manifest.kind.value if manifest is not None else None,
        "splits": list(spec.splits) if spec is not None else list(status.splits),
        "downloadable": spec is not None and spec.downloadable,
        "download_bytes": sum(sizes) if spec is not None and spec.downloadable and all(sizes) else None,
        "installed": None
        if manifest is None
        else {
            "version": manifest.version,
            "rows": dict(status.splits),
            "bytes": manifest.total_bytes,
            "created": manifest.created,
        },
    }


def _origin(spec: PublicDataset | None) -> str:
    if spec is None:
        return "uploaded"
    if not spec.downloadable:
        return "--from PATH only"
    sizes = [file.size for file in spec.files]
    total = f" ({format_size(sum(s for s in sizes if s))})" if all(sizes) else ""
    return f"download{total}"


@public.command()
@click.argument("name", shell_complete=complete_public)
@click.option("--from", "source", metavar="PATH", help="Build from files you have instead of downloading them.")
@store_options
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
@click.option(
    "--checksums",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="md5s of your site's own copy of the files (md5sum's format), checked instead of the published ones.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def install(
    name: str,
    source: str | None,
    store: Store,
    mirror: str | None,
    retries: int,
    checksums: str | None,
    quiet: bool,
) -> None:
    """Install public dataset NAME (see 'datamount public ls') into the store's public area.

    The published files are downloaded (checked against their md5, resumed after an interruption) into the cache,
    or taken from --from PATH, and converted into the dataset public/NAME. Installing it again does nothing.
    """
    if checksums is not None:
        own = public_datasets.read_checksums(checksums, public_datasets.get(name))
        click.echo(
            f"note: {', '.join(sorted(own))} checked against the md5s in {checksums}, not the published ones: "
            "the dataset is your site's copy",
            err=True,
        )
    with ProgressBar(quiet=quiet) as bar:
        result = public_datasets.install(
            name,
            store=store,
            source=source,
            mirror=mirror,
            retry=RetryPolicy(attempts=retries + 1),
            progress=bar,
            checksums=checksums,
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
@click.argument("name", shell_complete=complete_public)
@yes_option
@wait_option
@store_options
def remove(name: str, yes: bool, wait: float, store: Store) -> None:
    """Remove public dataset NAME from the store's public area (the download cache stays)."""
    dataset_name = public_datasets.dataset_name(name, store)
    if not yes and catalog.versions(store, dataset_name) and not confirm_removal(dataset_name, store):
        return
    echo_removed(dataset_name, public_datasets.remove(name, store=store, wait=wait))
