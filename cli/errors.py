"""How the command reports failures: one line and a non-zero exit status; tracebacks only with ``--debug``."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from datamount.datasets.errors import DatasetBusyError
from datamount.storage import DatamountError, MountError

#: Exit statuses by error kind, the first match winning. datamount's errors derive from these built-ins.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (MountError, 6),
    (DatasetBusyError, 7),
    (FileNotFoundError, 3),
    (PermissionError, 4),
    (ConnectionError, 5),
    (ValueError, 2),
    (DatamountError, 1),
    (OSError, 1),
]


#: What click (8.2 and later) raises for a group named without a command.
_NO_ARGS_IS_HELP: type[BaseException] | tuple[()] = getattr(click.exceptions, "NoArgsIsHelpError", ())


def exit_code_for(exc: BaseException) -> int:
    """The exit status that reports ``exc``."""
    return next(code for kind, code in EXIT_CODES if isinstance(exc, kind))


class ErrorHandlingGroup(click.Group):
    """A click group that turns datamount and OS errors, and mistakes in the command line itself, into one line
    ``datamount: error: ...`` and an exit status."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:  # an unknown option, a missing argument, a bad value: click's 4 lines
            if exc.ctx is not None and isinstance(exc, _NO_ARGS_IS_HELP):  # a group named alone: its help
                click.echo(exc.ctx.get_help())
                sys.exit(0)
            command = exc.ctx.command_path if exc.ctx is not None else "datamount"
            click.echo(f"datamount: error: {_sentence(exc.format_message())} (see '{command} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"datamount: error: {_sentence(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:  # Ctrl-C or end of input at a prompt
            click.echo("datamount: interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader of our output went away (``datamount head x | head -1``): stop quietly, as Unix tools do.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except (DatamountError, OSError) as exc:
            if (ctx.obj or {}).get("debug") or "--debug" in ctx.args:
                raise
            click.echo(f"datamount: error: {exc}", err=True)
            ctx.exit(exit_code_for(exc))
        except KeyboardInterrupt:
            click.echo("datamount: interrupted", err=True)
            ctx.exit(130)


def _sentence(message: str) -> str:
    """click's message as the rest of our errors read: lower case first, no final full stop."""
    message = message.strip().rstrip(".")
    return message[:1].lower() + message[1:] if message[1:2].islower() else message
