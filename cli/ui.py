"""``datamount ui``: a local, read-only web app over the stores' datasets and a statistics file."""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

import click

from datamount.cli.completion import complete_stores
from datamount.cli.options import backend_options, options_dict
from datamount.datasets.errors import MissingDependencyError

#: What the app needs beyond datamount itself: the ``ui`` extra.
UI_PACKAGES = ("starlette", "uvicorn", "jinja2", "PIL")


@click.command()
@click.option(
    "--store",
    "stores",
    multiple=True,
    metavar="STORE",
    help="A store to show (URL, path or profile); repeatable. Default: the default store and every named store.",
    shell_complete=complete_stores,
)
@backend_options
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    metavar="ADDRESS",
    help="The address to serve on (the default: this machine only).",
)
@click.option(
    "--port", default=8765, show_default=True, metavar="N", type=click.IntRange(0, 65535), help="0: any free port."
)
@click.option(
    "--stats",
    "stats_file",
    type=click.Path(exists=True, dir_okay=False, readable=True),
    help="A statistics file (DATAMOUNT_STATS_FILE) to plot on the training page; read, never written.",
)
def ui(stores: tuple[str, ...], options: tuple[str, ...], host: str, port: int, stats_file: str | None) -> None:
    """Browse the datasets of the stores in a web browser: versions, samples, labels, diffs, and what training
    waited for (--stats). Read-only: it answers GET requests only and writes nothing."""
    _check_installed()
    import warnings

    from PIL.Image import DecompressionBombWarning

    from datamount.ui import StoreShelf, create_app
    from datamount.ui.app import LOOPBACK_NAMES
    from datamount.ui.server import bind, is_loopback, serve, url_of

    # The app reads an image's size from its header and decodes none larger than it allows (ui/values.py): Pillow's
    # warning on opening one of more than its MAX_IMAGE_PIXELS names an attack that is not let through.
    warnings.filterwarnings("ignore", category=DecompressionBombWarning)
    shelf = StoreShelf.from_command(stores, options_dict(options))
    local = is_loopback(host)
    app = create_app(shelf, stats_file=stats_file, allowed_hosts=[*LOOPBACK_NAMES, host] if local else None)
    listening = bind(host, port)
    if not local:
        click.echo(f"datamount ui: serving to {host}: whoever reaches it can read these stores' datasets", err=True)
    click.echo(f"datamount ui: {len(shelf.entries())} store(s) at {url_of(listening)} (Ctrl-C stops it)", err=True)
    serve(app, listening, stopped=_end_now)


def _end_now(signum: int) -> NoReturn:
    """End the process once a signal stopped the server, without waiting for the pages still being made (NOTE
    [ Stopping at once ] in ``ui/server.py``): after SIGINT with status 130 and the line every command prints on
    Ctrl-C, after another signal as that signal ends a process."""
    if signum == signal.SIGINT:
        click.echo("datamount: interrupted", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if signum != signal.SIGINT:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)  # ends the process, as the signal does
    os._exit(128 + signum)  # 130 after SIGINT


def _check_installed() -> None:
    """A one-line error naming the extra when a package the app needs is missing."""
    import importlib

    missing = []
    for name in UI_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingDependencyError(f"datamount ui needs {', '.join(missing)}: pip install 'datamount[ui]'")
