"""``datamount mount`` and ``datamount unmount``."""

from __future__ import annotations

import click

from datamount.cli.completion import complete_datasets
from datamount.cli.options import store_options
from datamount.storage import DatamountError, Store
from datamount.storage.arguments import parse_size


@click.command()
@click.argument("name", shell_complete=complete_datasets)
@click.argument("mountpoint", type=click.Path(file_okay=False))
@store_options
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), help="Content cache folder (remote stores).")
@click.option("--no-cache", is_flag=True, help="No content cache: files come from the store each time they are read.")
@click.option("--memory", default="256MB", show_default=True, help="Bytes of checked files kept in memory.")
@click.option(
    "--read-ahead",
    help="Bytes fetched ahead of each reader, at most --memory.  [default: 32MB, or a quarter of --memory]",
)
@click.option("--allow-other", is_flag=True, help="Let other users (other containers' users) read the mount.")
@click.option("--foreground", is_flag=True, help="Serve in this process until unmounted (Ctrl-C unmounts).")
@click.option("--log-file", type=click.Path(dir_okay=False), help="Where the serving process logs.")
def mount(
    name: str,
    mountpoint: str,
    store: Store,
    cache_dir: str | None,
    no_cache: bool,
    memory: str,
    read_ahead: str | None,
    allow_other: bool,
    foreground: bool,
    log_file: str | None,
) -> None:
    """Mount dataset NAME (or NAME@N, pinned now) read-only at MOUNTPOINT, an empty folder: each image row's file at
    its list path and the list; a text version's list; a table version's shards; a public dataset's rows as files in
    its dataset's form (mnist: train/7/00015.png). Every byte is checked before it is served (a damaged file reads as
    an I/O error, logged)."""
    from datamount.mount import mount as mount_version

    if cache_dir and no_cache:
        raise click.UsageError("--cache and --no-cache exclude each other")
    cache: str | bool | None = False if no_cache else cache_dir
    if foreground:
        click.echo(f"serving {name} at {mountpoint}; Ctrl-C or 'datamount unmount {mountpoint}' ends it", err=True)
    try:
        mounted = mount_version(
            name,
            mountpoint,
            store=store,
            cache=cache,
            memory=_size(memory, "--memory"),
            read_ahead=None if read_ahead is None else _size(read_ahead, "--read-ahead"),
            allow_other=allow_other,
            foreground=foreground,
            log_file=log_file,
        )
    except ValueError as exc:
        if isinstance(exc, DatamountError):
            raise
        raise click.UsageError(str(exc)) from exc  # --memory and --read-ahead that do not go together
    if not foreground:
        click.echo(f"mounted {mounted.ref} at {mounted.mountpoint} (process {mounted.pid}, log {mounted.log_file})")


@click.command()
@click.argument("mountpoint", type=click.Path(file_okay=False))
def unmount(mountpoint: str) -> None:
    """Unmount the datamount mount at MOUNTPOINT (also one whose serving process was killed)."""
    from datamount.mount import unmount as unmount_folder

    unmount_folder(mountpoint)
    click.echo(f"unmounted {mountpoint}")


def _size(value: str, option: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from exc
