"""The ``datamount`` command: a thin layer over :mod:`datamount.storage`, :mod:`datamount.datasets` and
:mod:`datamount.readers`."""

from __future__ import annotations

import logging
import sys
from importlib.metadata import version
from typing import Any

import click

from datamount.cli.completion import completion
from datamount.cli.datasets import cp, export, head, info, list_datasets, pack, rm, upload, verify
from datamount.cli.demo import demo
from datamount.cli.diff import diff
from datamount.cli.errors import ErrorHandlingGroup, show_library_logs, show_waits
from datamount.cli.ledger import ledger
from datamount.cli.master import master, tasks
from datamount.cli.mount import mount, unmount
from datamount.cli.public import public
from datamount.cli.stores import doctor, stores
from datamount.cli.stream import cat, import_, pretty_print
from datamount.cli.ui import ui


@click.group(cls=ErrorHandlingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version("datamount"), "--version", "-V", prog_name="datamount")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Store ML training data on any storage and read it back fast."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    # Storage libraries log their retries and failures (gcsfs with whole tracebacks); the one-line error says what
    # matters, so their records are shown only with --debug.
    if debug:
        show_library_logs()
        return
    if not any(isinstance(handler, logging.NullHandler) for handler in logging.getLogger().handlers):
        logging.getLogger().addHandler(logging.NullHandler())
    show_waits()


for command in (
    demo,
    upload,
    pack,
    import_,
    export,
    cp,
    mount,
    unmount,
    list_datasets,
    info,
    head,
    diff,
    verify,
    rm,
    cat,
    pretty_print,
    stores,
    doctor,
    ui,
    completion,
):
    cli.add_command(command)
cli.add_command(public)
cli.add_command(master)
cli.add_command(tasks)
cli.add_command(ledger)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="datamount")


if __name__ == "__main__":  # pragma: no cover
    main()
