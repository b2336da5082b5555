"""How the command reports failures: one line and a non-zero exit status; tracebacks only with ``--debug``.

Whatever it writes about a failure (the line, a traceback, the records of libraries' logs shown with ``--debug``)
is scrubbed first of URL passwords and of the secrets of every store opened in the run
(:func:`datamount.storage.redact.given_secrets`): a backend's message may quote its endpoint URL with the password
in it, or a secret option, and a chained exception in a traceback quotes the backend's message unchanged.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any

import click

from datamount.datasets import locks
from datamount.datasets.errors import DatasetBusyError
from datamount.storage import DatamountError, MountError
from datamount.storage.redact import RedactingFormatter, forget_given_secrets, given_secrets, scrub

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
    """The exit status that reports ``exc`` (1 for an error of no kind in :data:`EXIT_CODES`)."""
    return next((code for kind, code in EXIT_CODES if isinstance(exc, kind)), 1)


def echo_error(message: str) -> None:
    """Write ``datamount: error: MESSAGE`` to stderr, its secrets masked."""
    click.echo(f"datamount: error: {scrub(message, given_secrets())}", err=True)


def echo_traceback(exc: BaseException) -> None:
    """Write ``exc``'s traceback, the exceptions it was raised from included, to stderr, its secrets masked."""
    click.echo(scrub("".join(traceback.format_exception(exc)), given_secrets()).rstrip("\n"), err=True)


class _StderrHandler(logging.Handler):
    """Writes each record to the ``sys.stderr`` of the moment (click's test runner replaces it), secrets masked."""

    def __init__(self, form: str = "%(name)s: %(levelname)s: %(message)s") -> None:
        super().__init__()
        self.setFormatter(RedactingFormatter(form))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def show_library_logs() -> None:
    """Show the warnings and errors that libraries log (``--debug``), each record's secrets masked."""
    root = logging.getLogger()
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        root.addHandler(_StderrHandler())
    root.setLevel(logging.WARNING)


def show_waits() -> None:
    """Say while it lasts that the command waits for another process's hold on a dataset (a removal for an upload
    to finish: :mod:`datamount.datasets.locks`), as ``datamount: waiting to ...`` lines."""
    waits = logging.getLogger(locks.__name__)
    if not any(isinstance(handler, _StderrHandler) for handler in waits.handlers):
        waits.addHandler(_StderrHandler("datamount: %(message)s"))
        waits.propagate = False


class ErrorHandlingGroup(click.Group):
    """A click group that turns datamount and OS errors, and mistakes in the command line itself, into one line
    ``datamount: error: ...`` and an exit status."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        forget_given_secrets()
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:  # an unknown option, a missing argument, a bad value: click's 4 lines
            if exc.ctx is not None and isinstance(exc, _NO_ARGS_IS_HELP):  # a group named alone: its help
                click.echo(exc.ctx.get_help())
                sys.exit(0)
            command = exc.ctx.command_path if exc.ctx is not None else "datamount"
            echo_error(f"{_sentence(exc.format_message())} (see '{command} --help')")
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            echo_error(_sentence(exc.format_message()))
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:  # Ctrl-C or end of input at a prompt
            click.echo("datamount: interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # with --debug, or a failure none of the above: the traceback Python would print
            echo_traceback(exc)
            sys.exit(exit_code_for(exc))
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
            echo_error(str(exc))
            ctx.exit(exit_code_for(exc))
        except KeyboardInterrupt:
            click.echo("datamount: interrupted", err=True)
            ctx.exit(130)


def _sentence(message: str) -> str:
    """click's message as the rest of our errors read: lower case first, no final full stop."""
    message = message.strip().rstrip(".")
    return message[:1].lower() + message[1:] if message[1:2].islower() else message
