"""How the command reports failures: one line and a non-zero exit status; tracebacks only with ``--debug``."""

from __future__ import annotations

from typing import Any

import click

from datamount.storage.errors import (
    DatamountError,
    MountError,
    ObjectNotFoundError,
    StoreConfigError,
    StorePermissionError,
    StoreUnreachableError,
)

#: Exit statuses by error kind; the first matching entry wins.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (StoreConfigError, 2),
    (ObjectNotFoundError, 3),
    (StorePermissionError, 4),
    (StoreUnreachableError, 5),
    (MountError, 6),
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
        except (DatamountError, OSError) as exc:
            if (ctx.obj or {}).get("debug") or "--debug" in ctx.args:
                raise
            click.echo(f"datamount: error: {exc}", err=True)
            ctx.exit(exit_code_for(exc))
        except KeyboardInterrupt:
            click.echo("datamount: interrupted", err=True)
            ctx.exit(130)
