"""How the command reports failures: one line and a non-zero exit status; tracebacks only with ``--debug``."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from datamount.storage import DatamountError, MountError

#: Exit statuses by error kind, the first match winning. datamount's errors derive from these built-ins.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (MountError, 6),
    (FileNotFoundError, 3),
    (PermissionError, 4),
    (ConnectionError, 5),
    (ValueError, 2),
    (DatamountError, 1),
    (OSError, 1),
]


def exit_code_for(exc: BaseException) -> int:
    """The exit status that reports ``exc``."""
    return next(code for kind, code in EXIT_CODES if isinstance(exc, kind))


class ErrorHandlingGroup(click.Group):
    """A click group that turns datamount and OS errors into ``datamount: error: ...`` and an exit status."""

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
