"""What ``datamount rm`` and ``datamount public rm`` share: ``--yes``, the confirmation, the report."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import click

from datamount.datasets import locks
from datamount.storage import Store

yes_option = click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
wait_option = click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=locks.WAIT_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the uploads and packs at work on the dataset to finish (then exit status 7).",
)


def confirm_removal(what: str, store: Store) -> bool:
    """Ask before removing ``what`` from ``store``: whether the answer was yes. A no is the user's choice, not a
    failure: it says that nothing was removed, and the command ends with status 0. With no terminal to ask on,
    refuse and name ``--yes`` (a usage error, status 2); end of input or Ctrl-C at the prompt is an interruption
    (status 130)."""
    if not sys.stdin.isatty():
        raise click.UsageError(f"refusing to remove {what} without confirmation; pass --yes")
    if click.confirm(f"remove {what} from {store.url}?"):
        return True
    click.echo(f"nothing removed: {what} is kept")
    return False


def echo_removed(name: str, versions: Iterable[int]) -> None:
    """Say which versions of dataset ``name`` were removed."""
    click.echo(f"removed {name} version(s) {', '.join(str(v) for v in versions)}")
