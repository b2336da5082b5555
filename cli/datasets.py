"""``datamount upload``, ``ls``, ``info``, ``head``, ``verify`` and ``rm``."""

from __future__ import annotations

import itertools
import re
import sys
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from datamount.cli.options import backend_options, options_dict
from datamount.cli.progress import ProgressBar
from datamount.datasets import catalog, layout
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.names import parse_ref
from datamount.datasets.pack import pack as pack_version
from datamount.datasets.pack_ray import pack_ray
from datamount.datasets.upload import upload as upload_list
from datamount.datasets.verify import verify as verify_version
from datamount.readers.dataset import reader
from datamount.storage import Store, open_store

store_option = click.option(
    "--store", "store_ref", metavar="STORE", help="Store URL, path or profile (default: the default store)."
)


def _open(store_ref: str | None, options: tuple[str, ...]) -> Store:
    return open_store(store_ref, **options_dict(options))


@click.command()
@click.argument("list_file", type=click.Path(dir_okay=True, path_type=str))
@click.argument("name")
@store_option
@backend_options
@click.option("--kind", type=click.Choice(["image", "text"]), help="Force the list's kind (detected otherwise).")
@click.option("--root", type=click.Path(file_okay=False), help="Folder that image paths are relative to.")
@click.option("--pack", "then_pack", is_flag=True, help="Also pack the new version into Parquet shards.")
@click.option("--shard-size", default="256MB", show_default=True, help="With --pack: bytes per shard.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def upload(
    list_file: str,
    name: str,
    store_ref: str | None,
    options: tuple[str, ...],
    kind: str | None,
    root: str | None,
    then_pack: bool,
    shard_size: str,
    quiet: bool,
) -> None:
    """Upload the samples of LIST_FILE as a new version of dataset NAME.

    The list is checked as a whole first (nothing is written if any line is wrong); running the same command again
    after an interruption sends only what is missing.
    """
    shard_bytes = parse_size(shard_size)
    store = _open(store_ref, options)
    with ProgressBar(quiet=quiet) as bar:
        result = upload_list(list_file, name, store=store, kind=kind, root=root, progress=bar)
        if then_pack:
            packed = pack_version(result.manifest.ref, store=store, shard_bytes=shard_bytes, progress=bar)
    m = result.manifest
    if then_pack:
        click.echo(f"{m.ref} is packed in {len(packed.shards)} shard(s)")
    if not result.created:
        click.echo(f"{m.ref} is up to date: it already holds exactly this list ({m.rows} rows)")
        return
    click.echo(
        f"uploaded {m.ref}: {m.kind}, {m.rows} rows, {len(m.files)} files "
        f"({result.sent_files} sent, {format_size(result.sent_bytes)}; {result.reused_files} already stored) "
        f"to {store.url}"
    )


@click.command()
@click.argument("name")
@click.option("--shard-size", default="256MB", show_default=True, help="Bytes per shard (e.g. 64MB, 1GiB).")
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ADDRESS]",
    help="Write the shards in parallel as Ray tasks, on the cluster at ADDRESS (else $RAY_ADDRESS, else a local "
    "Ray); the result is the same. Needs datamount[ray].",
)
@store_option
@backend_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def pack(
    name: str, shard_size: str, ray_address: str | None, store_ref: str | None, options: tuple[str, ...], quiet: bool
) -> None:
    """Pack dataset NAME (or NAME@N) into Parquet shards for fast sequential and sharded reads."""
    shard_bytes = parse_size(shard_size)
    store = _open(store_ref, options)
    with ProgressBar(quiet=quiet) as bar:
        if ray_address is None:
            manifest = pack_version(name, store=store, shard_bytes=shard_bytes, progress=bar)
        else:
            manifest = pack_ray(name, store=store, address=ray_address or None, shard_bytes=shard_bytes, progress=bar)
    size = sum(shard.size for shard in manifest.shards)
    click.echo(f"{manifest.ref} is packed in {len(manifest.shards)} shard(s), {format_size(size)}")


def parse_size(text: str) -> int:
    """``256MB``, ``64MiB``, ``1G``, ``1000`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?)[bB]?\s*", text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a size; write e.g. 256MB, 64MiB or 1G", param_hint="--shard-size")
    number, unit, binary = match.groups()
    base = 1024 if binary else 1000
    size = int(float(number) * base ** "_KMGT".index(unit.upper() or "_"))
    if size < 1:
        raise click.BadParameter("the size must be at least one byte", param_hint="--shard-size")
    return size


@click.command(name="ls")
@store_option
@backend_options
def list_datasets(store_ref: str | None, options: tuple[str, ...]) -> None:
    """List the datasets in the store."""
    store = _open(store_ref, options)
    table = Table("name", "kind", "rows", "size", "versions", "latest", box=None, header_style="bold")
    count = 0
    for summary in catalog.summaries(store):
        latest = summary.latest
        count += 1
        if latest is None:
            table.add_row(summary.name, "-", "-", "-", "-", "(damaged or being uploaded)")
            continue
        table.add_row(
            summary.name,
            latest.kind,
            f"{latest.rows:,}",
            format_size(latest.total_bytes),
            str(len(summary.versions)),
            f"@{latest.version} {latest.created}",
        )
    console = Console()
    if count == 0:
        console.print(f"no datasets in {escape(store.url)}; add one with 'datamount upload LIST NAME'")
        return
    console.print(table)


@click.command()
@click.argument("name")
@store_option
@backend_options
def info(name: str, store_ref: str | None, options: tuple[str, ...]) -> None:
    """Describe dataset NAME (or NAME@N): kind, columns, rows, bytes, versions, when."""
    store = _open(store_ref, options)
    manifest = catalog.resolve(store, name)
    all_versions = catalog.versions(store, manifest.name)
    lines = [
        ("dataset", manifest.ref),
        ("store", store.url_for(layout.dataset_folder(manifest.name))),
        ("kind", manifest.kind),
        ("columns", ", ".join(manifest.columns)),
        ("rows", f"{manifest.rows:,}"),
        ("files", f"{len(manifest.files):,}"),
        ("size", format_size(manifest.total_bytes)),
        ("versions", ", ".join(str(v) for v in all_versions)),
        ("packed", f"{len(manifest.shards)} shard(s)" if manifest.shards else "no (datamount pack NAME)"),
        ("created", manifest.created),
        ("source", manifest.source),
    ]
    for key, value in lines:
        click.echo(f"{key:>9}: {value}")


@click.command()
@click.argument("name")
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(min=0), help="How many samples.")
@store_option
@backend_options
def head(name: str, count: int, store_ref: str | None, options: tuple[str, ...]) -> None:
    """Print the first samples of dataset NAME as tuples (bytes shown as their type and size)."""
    samples = reader(name, _open(store_ref, options), max_requests=max(1, min(count, 16)), rank=0, world_size=1)
    for sample in itertools.islice(samples(), count):
        click.echo("(" + ", ".join(describe(value) for value in sample) + ")")


@click.command()
@click.argument("name")
@store_option
@backend_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def verify(name: str, store_ref: str | None, options: tuple[str, ...], quiet: bool) -> None:
    """Re-hash every object of dataset NAME (or NAME@N) against its manifest; report every problem."""
    store = _open(store_ref, options)
    manifest = catalog.resolve(store, name)
    with ProgressBar(quiet=quiet) as bar:
        bar.start("verify", items=len(manifest.files) + 1, size=manifest.total_bytes)
        report = verify_version(store, manifest, on_checked=lambda size: bar.advance(size=size))
        bar.finish()
    for problem in report.problems:
        click.echo(problem)
    if report.ok:
        click.echo(f"{manifest.ref}: all {report.checked} objects match the manifest")
        return
    click.echo(f"{manifest.ref}: {len(report.problems)} of {report.checked} objects do not match", err=True)
    raise click.exceptions.Exit(1)


@click.command()
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@store_option
@backend_options
def rm(name: str, yes: bool, store_ref: str | None, options: tuple[str, ...]) -> None:
    """Remove dataset NAME (every version) or one version NAME@N."""
    store = _open(store_ref, options)
    ref = parse_ref(name)
    found = catalog.versions(store, ref.name)
    if not found:
        raise DatasetNotFoundError(f"no dataset named {ref.name!r} in {store.url}")
    what = f"version {ref.version} of {ref.name}" if ref.version else f"{ref.name} (versions {found})"
    if not yes:
        confirm_removal(what, store)
    removed = catalog.remove(store, name)
    click.echo(f"removed {ref.name} version(s) {', '.join(str(v) for v in removed)}")


def confirm_removal(what: str, store: Store) -> None:
    """Ask before removing ``what`` from ``store``; with no terminal to ask on, refuse and name ``--yes``."""
    if not sys.stdin.isatty():
        raise click.UsageError(f"refusing to remove {what} without confirmation; pass --yes")
    click.confirm(f"remove {what} from {store.url}?", abort=True)


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


def _bytes_type(head_bytes: bytes) -> str:
    if head_bytes[:4] == b"RIFF" and head_bytes[8:12] == b"WEBP":
        return "WEBP"
    return next((label for magic, label in _MAGIC if head_bytes.startswith(magic)), "bytes")


def format_size(size: int) -> str:
    """``12.3 MB``-style sizes (powers of 1000)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:,.1f} TB"
