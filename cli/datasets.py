"""``datamount upload``, ``ls``, ``info``, ``head``, ``verify`` and ``rm``."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from datamount.cli.completion import complete_datasets
from datamount.cli.formatting import (
    counted,
    describe,
    echo_fields,
    echo_json,
    format_size,
    json_option,
    plain_table,
    print_table,
)
from datamount.cli.options import (
    options_dict,
    shard_size_option,
    size_value,
    source_backend_options,
    store_options,
    target_backend_options,
)
from datamount.cli.progress import ProgressBar
from datamount.cli.removal import confirm_removal, echo_removed, wait_option, yes_option
from datamount.datasets import Manifest, catalog, layout, parse_ref
from datamount.storage import Store, open_store
from datamount.storage.redact import redact_url

if TYPE_CHECKING:
    from datamount.datasets.upload import UploadResult
    from datamount.datasets.verify import Damage


@click.command()
@click.argument("list_file", type=click.Path(dir_okay=True, path_type=str))
@click.argument("name", shell_complete=complete_datasets)
@store_options
@click.option("--kind", type=click.Choice(["image", "text"]), help="Force the list's kind (detected otherwise).")
@click.option("--root", type=click.Path(file_okay=False), help="Folder that image paths are relative to.")
@click.option(
    "--follow-links",
    is_flag=True,
    help="Read image files through links that lead outside the root (refused otherwise).",
)
@click.option(
    "--pack",
    "then_pack",
    is_flag=True,
    help="Store the version as Parquet shards: an image list's files go straight into them (no object per file).",
)
@shard_size_option("With --pack: bytes per shard.")
@click.option(
    "--split",
    "split_text",
    metavar="NAME=FRACTION,...",
    help="Split the rows, e.g. train=0.9,val=0.1: each row's split drawn from its number and --seed.",
)
@click.option("--seed", "split_seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of --split.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@json_option
def upload(
    list_file: str,
    name: str,
    store: Store,
    kind: str | None,
    root: str | None,
    follow_links: bool,
    then_pack: bool,
    shard_bytes: int,
    split_text: str | None,
    split_seed: int,
    quiet: bool,
    as_json: bool,
) -> None:
    """Upload the samples of LIST_FILE as a new version of dataset NAME.

    The list is checked as a whole first (nothing is written if any line is wrong); running the same command again
    after an interruption sends only what is missing. Without --kind, the kind detected and why are printed on
    stderr. With --split, read a split with reader(NAME, split="train").
    """
    from datamount.datasets import upload as upload_list
    from datamount.datasets.rows.split import parse_fractions, row_splits

    try:
        split = parse_fractions(split_text) if split_text is not None else None
        if split is not None:
            row_splits(split, split_seed, 0)  # a wrong split is a usage error, found before the upload
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--split") from None
    if split is None and split_seed:
        raise click.UsageError("--seed goes with --split")
    with ProgressBar(quiet=quiet or as_json) as bar:
        result = upload_list(
            list_file,
            name,
            store=store,
            kind=kind,
            root=root,
            progress=bar,
            packed=then_pack,
            shard_bytes=shard_bytes,
            follow_links=follow_links,
            split=split,
            split_seed=split_seed,
        )
    if as_json:
        echo_json("upload", _upload_json(result, store))
        return
    if result.kind_reason is not None:
        click.echo(f"detected {result.kind_reason}", err=True)
    _echo_uploaded(result, store, then_pack)


def _echo_uploaded(result: UploadResult, store: Store, then_pack: bool) -> None:
    """What an upload did, in lines of text."""
    m = result.manifest
    if m.splits and result.created:
        click.echo("splits: " + ", ".join(f"{split} {counted(rows, 'row')}" for split, rows in m.splits.items()))
    if then_pack:
        stored = "" if m.objects else ", its files stored only there"
        click.echo(f"{m.ref} is packed in {len(m.shards)} shard(s){stored}")
    if not result.created:
        repaired = f"; {result.repaired_files} missing file(s) sent again" if result.repaired_files else ""
        click.echo(f"{m.ref} is up to date: it already holds exactly this list ({counted(m.rows, 'row')}{repaired})")
        return
    if not m.objects:
        resumed = f" ({result.reused_files} found in the shards of an earlier run)" if result.reused_files else ""
        click.echo(
            f"uploaded {m.ref}: {m.kind}, {counted(m.rows, 'row')}, {counted(len(m.files), 'file')} in "
            f"{format_size(result.sent_bytes)} of shards{resumed} to {store.url}"
        )
        return
    click.echo(
        f"uploaded {m.ref}: {m.kind}, {counted(m.rows, 'row')}, {counted(len(m.files), 'file')} "
        f"({result.sent_files} sent, {format_size(result.sent_bytes)}; {result.reused_files} already stored) "
        f"to {store.url}"
    )


def _upload_json(result: UploadResult, store: Store) -> dict[str, Any]:
    m = result.manifest
    return {
        "dataset": m.name,
        "version": m.version,
        "store": store.url,
        "created": result.created,
        "kind": str(m.kind),
        "kind_reason": result.kind_reason,
        "columns": list(m.columns),
        "rows": m.rows,
        "files": len(m.files),
        "sent_files": result.sent_files,
        "sent_bytes": result.sent_bytes,
        "reused_files": result.reused_files,
        "repaired_files": result.repaired_files,
        "shards": len(m.shards),
        "splits": m.splits,
    }


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@shard_size_option("Bytes per shard (e.g. 64MB, 1GiB).")
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
@store_options
@click.option(
    "--map",
    "function",
    metavar="MODULE:FUNCTION",
    help="Write FUNCTION(row) for every row as the new dataset --to (a dict of columns per row); resumable.",
)
@click.option("--to", "target", metavar="NEW", help="With --map: the dataset the mapped rows become.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def pack(
    name: str,
    shard_bytes: int,
    ray_address: str | None,
    store: Store,
    function: str | None,
    target: str | None,
    quiet: bool,
) -> None:
    """Pack dataset NAME (or NAME@N) into Parquet shards for fast sequential and sharded reads.

    With --map MODULE:FUNCTION --to NEW, each row goes through FUNCTION (imported from the current folder or the
    installed packages) and the results become dataset NEW, packed; a run that is killed goes on where it stopped
    when started again.
    """
    from datamount.datasets import pack as pack_version
    from datamount.datasets import pack_ray
    from datamount.datasets.transform import load_function, map_version

    if (function is None) != (target is None):
        raise click.UsageError("--map and --to go together: --map MODULE:FUNCTION --to NEW")
    if function is not None and target is not None:
        try:
            load_function(function)  # a wrong reference is a usage error, found before anything is read
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--map") from None
        with ProgressBar(quiet=quiet) as bar:
            mapped = map_version(
                name,
                function,
                target,
                store=store,
                shard_bytes=shard_bytes,
                use_ray=ray_address is not None,
                ray_address=ray_address or None,
                progress=bar,
            )
        click.echo(
            f"{mapped.ref}: {mapped.rows:,} rows of {', '.join(mapped.columns)} in {len(mapped.shards)} shard(s)"
        )
        return
    packed = catalog.resolve(store, name, public_fallback=False)
    if packed.shards:
        size = sum(shard.size for shard in packed.shards)
        click.echo(f"{packed.ref} is already packed in {len(packed.shards)} shard(s), {format_size(size)}")
        return
    name = packed.ref  # the version resolved here, even if another is uploaded meanwhile
    with ProgressBar(quiet=quiet) as bar:
        if ray_address is None:
            manifest = pack_version(name, store=store, shard_bytes=shard_bytes, progress=bar)
        else:
            manifest = pack_ray(name, store=store, address=ray_address or None, shard_bytes=shard_bytes, progress=bar)
    size = sum(shard.size for shard in manifest.shards)
    click.echo(f"{manifest.ref} is packed in {len(manifest.shards)} shard(s), {format_size(size)}")


@click.command(name="ls")
@store_options
@json_option
def list_datasets(store: Store, as_json: bool) -> None:
    """List the datasets in the store."""
    summaries = list(catalog.summaries(store))
    if as_json:
        echo_json("ls", {"store": store.url, "datasets": [_summary_json(summary) for summary in summaries]})
        return
    if not summaries:
        click.echo(f"no datasets in {catalog.store_named(store)}; add one with 'datamount upload LIST NAME'")
        return
    table = plain_table("name", "kind", "rows", "size", "versions", "latest")
    for summary in summaries:
        latest = summary.latest
        if latest is None:
            table.add_row(escape(summary.name), "-", "-", "-", "-", "(damaged or being uploaded)")
            continue
        table.add_row(
            escape(summary.name),
            latest.kind,
            f"{latest.rows:,}",
            format_size(latest.total_bytes),
            str(len(summary.versions)),
            f"@{latest.version} {latest.created}",
        )
    print_table(table)


def _summary_json(summary: catalog.DatasetSummary) -> dict[str, Any]:
    latest = summary.latest
    found: dict[str, Any] = {"name": summary.name, "versions": list(summary.versions), "latest": None}
    if latest is not None:
        found["latest"] = {
            "version": latest.version,
            "kind": str(latest.kind),
            "rows": latest.rows,
            "bytes": latest.total_bytes,
            "created": latest.created,
        }
    return found


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@store_options
@json_option
def info(name: str, store: Store, as_json: bool) -> None:
    """Describe dataset NAME (or NAME@N): kind, columns, rows, bytes, versions, when."""
    manifest = catalog.resolve(store, name)
    all_versions = catalog.versions(store, manifest.name)
    where = store.url_for(layout.dataset_folder(manifest.name))
    if as_json:
        echo_json(
            "info",
            {
                "dataset": manifest.name,
                "version": manifest.version,
                "store": where,
                "kind": str(manifest.kind),
                "columns": list(manifest.columns),
                "rows": manifest.rows,
                "files": len(manifest.files),
                "bytes": manifest.total_bytes,
                "versions": all_versions,
                "shards": len(manifest.shards),
                "files_only_in_shards": not manifest.objects,
                "splits": manifest.splits,
                "created": manifest.created,
                "source": manifest.source,
            },
        )
        return
    fields = [
        ("dataset", manifest.ref),
        ("store", where),
        ("kind", manifest.kind),
        ("columns", ", ".join(manifest.columns)),
        ("rows", f"{manifest.rows:,}"),
        ("files", f"{len(manifest.files):,} ({format_size(manifest.files_size)})"),
        ("stored", f"{format_size(manifest.total_bytes)} (objects, list and shards)"),
        ("versions", ", ".join(f"@{v}" for v in all_versions) + f" ({len(all_versions)} kept)"),
        ("packed", _packed(manifest)),
        ("created", manifest.created),
        ("source", manifest.source),
    ]
    if manifest.splits:
        fields.append(("splits", ", ".join(f"{split} {rows:,} rows" for split, rows in manifest.splits.items())))
    echo_fields(fields)


def _packed(manifest: Manifest) -> str:
    if not manifest.shards:
        return f"no (datamount pack {manifest.ref})"
    return f"{len(manifest.shards)} shard(s)" + ("" if manifest.objects else ", the files stored only there")


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@click.option("-n", "count", default=5, show_default=True, type=click.IntRange(min=0), help="How many samples.")
@store_options
def head(name: str, count: int, store: Store) -> None:
    """Print the first samples of dataset NAME as tuples (bytes shown as their type and size)."""
    from datamount.readers import reader

    samples = reader(name, store, max_requests=max(1, min(count, 16)), rank=0, world_size=1)
    for sample in itertools.islice(samples(), count):
        click.echo("(" + ", ".join(describe(value) for value in sample) + ")")


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@store_options
@click.option("--repair", is_flag=True, help="Put back every missing or damaged part whose right bytes can be found.")
@click.option(
    "--from",
    "source",
    type=click.Path(dir_okay=False, path_type=str),
    help="With --repair: the .list the version was uploaded from (its files are checked against the manifest).",
)
@click.option("--root", type=click.Path(file_okay=False), help="With --from: folder that image paths are relative to.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@json_option
def verify(
    name: str, store: Store, repair: bool, source: str | None, root: str | None, quiet: bool, as_json: bool
) -> None:
    """Re-hash every object of dataset NAME (or NAME@N) against its manifest; report every problem.

    With --repair, each missing or damaged file comes back from the source list (--from) when the file there still
    has the recorded sha256, or from the version's own shards; the list from --from; a shard pack made, by packing
    again. Exit status 1 while anything stays damaged.
    """
    from datamount.datasets import repair as repair_version
    from datamount.datasets import verify as verify_version

    if (source or root) and not repair:
        raise click.UsageError("--from and --root go with --repair")
    manifest = catalog.resolve(store, name)
    fixed = None
    with ProgressBar(quiet=quiet or as_json) as bar:
        if repair:
            fixed = repair_version(store, manifest, source=source, root=root, progress=bar)
            report = fixed.found
        else:
            bar.start("verify", items=len(manifest.files) + 1, size=manifest.total_bytes)
            report = verify_version(store, manifest, on_checked=lambda size: bar.advance(size=size))
            bar.finish()
    if as_json:
        still_damaged = not report.ok and (fixed is None or not fixed.ok)
        body: dict[str, Any] = {
            "dataset": manifest.name,
            "version": manifest.version,
            "checked": report.checked,
            "ok": not still_damaged,
            "problems": list(report.problems),
        }
        if fixed is not None:
            body["repaired"] = [damage.label for damage in fixed.repaired]
            body["not_repaired"] = [{"part": damage.label, "why": why} for damage, why in fixed.unrepaired]
        echo_json("verify", body)
        if still_damaged:
            raise click.exceptions.Exit(1)
        return
    for problem in report.problems:
        click.echo(problem)
    if report.ok:
        click.echo(f"{manifest.ref}: all {report.checked} objects match the manifest")
        return
    if repair:
        for damage in fixed.repaired:
            click.echo(f"repaired: {damage.label}")
        for damage, why in fixed.unrepaired:
            click.echo(f"not repaired: {damage.label}: {why}", err=True)
        if fixed.ok:
            click.echo(f"{manifest.ref}: repaired {len(fixed.repaired)} of {report.checked} objects; all match now")
            return
        left = [damage for damage, _ in fixed.unrepaired]
        click.echo(f"{manifest.ref}: {_damaged(left, report.checked, still=True)}", err=True)
        raise click.exceptions.Exit(1)
    click.echo(f"{manifest.ref}: {_damaged(report.damaged, report.checked)}", err=True)
    raise click.exceptions.Exit(1)


def _damaged(damaged: list[Damage], checked: int, *, still: bool = False) -> str:
    """``1 of 202 objects is missing and 2 do not match the manifest``: the parts the store lacks and those whose
    bytes are wrong, counted apart (``is still missing``, ``still do not match`` after a repair)."""
    missing = sum(damage.missing for damage in damaged)
    wrong = len(damaged) - missing
    counts = []
    if missing:
        counts.append((missing, ("is" if missing == 1 else "are") + (" still" if still else "") + " missing"))
    if wrong:
        counts.append(
            (wrong, ("still " if still else "") + ("does" if wrong == 1 else "do") + " not match the manifest")
        )
    (count, verb), *rest = counts
    return " and ".join([f"{count:,} of {checked:,} objects {verb}", *(f"{n:,} {more}" for n, more in rest)])


@click.command(name="cp")
@click.argument("name", shell_complete=complete_datasets)
@click.option("--to", "target", required=True, metavar="STORE", help="The store to copy to (URL, path or profile).")
@click.option(
    "--from", "source", metavar="STORE", help="The store to copy from (default: the default store).", default=None
)
@source_backend_options
@target_backend_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def cp(
    name: str, target: str, source: str | None, options: tuple[str, ...], to_options: tuple[str, ...], quiet: bool
) -> None:
    """Copy dataset NAME (or NAME@N) to the store --to: only the parts it lacks travel, each checked against the
    manifest, and the version is committed there last. Running it again after an interruption sends the rest.

    -o options are for the store copied from (--from, or the default store), --to-option options for the store
    copied to.
    """
    from datamount.datasets import copy_version

    origin = open_store(source, **options_dict(options))
    destination = open_store(target, **options_dict(to_options))
    with ProgressBar(quiet=quiet) as bar:
        result = copy_version(name, source=origin, target=destination, progress=bar)
    m, where = result.manifest, redact_url(target)
    if not result.created:
        click.echo(f"{where} already holds {name} as {m.ref}; nothing sent")
        return
    click.echo(
        f"copied {name} to {m.ref} in {where}: {result.sent} part(s), {format_size(result.sent_bytes)} sent; "
        f"{result.present} already there"
    )


@click.command(name="export")
@click.argument("name", shell_complete=complete_datasets)
@click.argument("folder")
@store_options
@click.option(
    "--format",
    "form",
    type=click.Choice(["files", "webdataset"]),
    default="files",
    show_default=True,
    help="files: as uploaded; webdataset: tar shards, one sample per row (FOLDER may then be a store's URL).",
)
@click.option(
    "--shard-size",
    "shard_bytes",
    default="1GB",
    show_default=True,
    callback=size_value,
    help="With --format webdataset: a shard closes before this many bytes.",
)
@click.option("--shard-samples", type=click.IntRange(min=1), help="With --format webdataset: samples a shard at most.")
@target_backend_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def export(
    name: str,
    folder: str,
    store: Store,
    form: str,
    shard_bytes: int,
    shard_samples: int | None,
    to_options: tuple[str, ...],
    quiet: bool,
) -> None:
    """Write dataset NAME (or NAME@N) into FOLDER as it was uploaded: an image version's files at their list paths
    and the list; a text version's list; a table version's Parquet shards; a public dataset's rows as files in its
    dataset's form, as 'datamount mount' shows them. Every byte is checked as it is read.

    FOLDER must not exist yet or be empty; it appears whole or not at all: the files are written into a hidden
    folder beside it (.FOLDER.datamount-export-...), renamed to FOLDER at the end, and removed if the export fails
    (a damaged part, Ctrl-C, SIGTERM). After a kill, the next export of the same version takes over what was
    written. A FOLDER that holds this export already is left as it is (nothing to do); one that holds anything else
    is refused.

    With --format webdataset, the rows go into WebDataset tar shards NAME-000000.tar... (sample keys are row
    numbers; each column a file: the image as KEY.jpg (its list path's extension), a string as KEY.COLUMN.txt), into
    a new or empty FOLDER or to a store's URL (s3://bucket/prefix, its options given with --to-option):
    docs/datasets.md."""
    if form == "webdataset":
        target = open_store(folder, **options_dict(to_options)) if "://" in folder else folder
        _export_webdataset(name, target, store, shard_bytes, shard_samples, quiet)
        return
    if "://" in folder:
        raise click.BadParameter("a URL takes --format webdataset; files are exported into a local folder")
    from datamount.datasets import export as export_version

    with ProgressBar(quiet=quiet) as bar:
        result = export_version(name, folder, store=store, progress=bar)
    listed = f", the list as {result.list_file.name}" if result.list_file is not None else ""
    kept = f"; {result.unchanged} already there" if result.unchanged else ""
    click.echo(
        f"exported {result.manifest.ref} to {folder}: {result.written} file(s) written "
        f"({format_size(result.size)}){listed}{kept}"
    )


def _export_webdataset(
    name: str, target: str | Store, store: Store, shard_bytes: int, shard_samples: int | None, quiet: bool
) -> None:
    from datamount.datasets.webdataset_export import export_webdataset

    with ProgressBar(quiet=quiet) as bar:
        result = export_webdataset(
            name, target, store=store, shard_bytes=shard_bytes, shard_samples=shard_samples, progress=bar
        )
    click.echo(
        f"exported {result.manifest.ref}: {result.samples:,} sample(s) in {len(result.shards)} WebDataset shard(s) "
        f"({format_size(result.size)}): {result.pattern}"
    )


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@yes_option
@wait_option
@store_options
def rm(name: str, yes: bool, wait: float, store: Store) -> None:
    """Remove dataset NAME (every version) or one version NAME@N."""
    ref = parse_ref(name)
    found = catalog.versions(store, ref.name)
    if not found:
        raise catalog.no_dataset(store, ref.name)
    what = f"version {ref.version} of {ref.name}" if ref.version else f"{ref.name} (versions {found})"
    if not yes and not confirm_removal(what, store):
        return
    echo_removed(ref.name, catalog.remove(store, name, wait=wait))
