"""The ``datamount`` command: a thin layer over :mod:`datamount.storage`, :mod:`datamount.datasets` and
:mod:`datamount.readers`."""

from __future__ import annotations

import importlib
import logging
import sys
from importlib.metadata import version
from typing import Any

import click

from datamount.cli.errors import ErrorHandlingGroup, show_library_logs, show_waits

#: Each command and the module that defines it: a command imports its module (and what that needs) when it runs, so
#: that ``datamount info`` does not pay for the imports of ``upload``, ``mount`` or ``ui``.
COMMANDS = {
    "cat": "datamount.cli.stream:cat",
    "completion": "datamount.cli.completion:completion",
    "cp": "datamount.cli.datasets:cp",
    "demo": "datamount.cli.demo:demo",
    "diff": "datamount.cli.diff:diff",
    "doctor": "datamount.cli.stores:doctor",
    "export": "datamount.cli.datasets:export",
    "head": "datamount.cli.datasets:head",
    "import": "datamount.cli.stream:import_",
    "info": "datamount.cli.datasets:info",
    "ledger": "datamount.cli.ledger:ledger",
    "ls": "datamount.cli.datasets:list_datasets",
    "master": "datamount.cli.master:master",
    "mount": "datamount.cli.mount:mount",
    "pack": "datamount.cli.datasets:pack",
    "pretty-print": "datamount.cli.stream:pretty_print",
    "public": "datamount.cli.public:public",
    "rm": "datamount.cli.datasets:rm",
    "stores": "datamount.cli.stores:stores",
    "tasks": "datamount.cli.master:tasks",
    "ui": "datamount.cli.ui:ui",
    "unmount": "datamount.cli.mount:unmount",
    "upload": "datamount.cli.datasets:upload",
    "verify": "datamount.cli.datasets:verify",
}


#: What click (8.2 and later) raises for a command it does not know, with the close names it suggests.
_NO_SUCH_COMMAND: Any = getattr(click.exceptions, "NoSuchCommand", None)


class _Commands(ErrorHandlingGroup):
    """The ``datamount`` group, its commands imported by name as they are asked for (click's lazy subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, but a misspelt command gets click's "Did you mean" from :data:`COMMANDS`: click suggests from
        the commands the group holds, and a lazy group holds none until one is asked for."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            if _NO_SUCH_COMMAND is None or not isinstance(exc, _NO_SUCH_COMMAND) or exc.possibilities:
                raise
            raise _NO_SUCH_COMMAND(exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module, name = where.split(":")
        command = getattr(importlib.import_module(module), name)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise RuntimeError(f"datamount {cmd_name}: {where} is not that command")
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="datamount")


if __name__ == "__main__":  # pragma: no cover
    main()
