"""Options shared by the commands: the store they work on (``--store``, ``-o``) and the size of shards."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from datamount.cli.completion import complete_stores
from datamount.storage import arguments, open_store
from datamount.storage.arguments import parse_size

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` to a pair; ``true``/``false`` and integers become bool and int, anything else stays text."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="'-o'")
    number = arguments.whole_number_text(raw, signed=True)
    value: Any = raw if number is None else number
    if raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    return key.strip(), value


def _backend_option(*declarations: str, dest: str, store: str) -> Callable[[F], F]:
    """A repeatable ``KEY=VALUE`` option, handed to the command as ``dest``: backend options for ``store``."""
    example = f"{declarations[0]} endpoint_url=http://127.0.0.1:9000"
    return click.option(
        *declarations,
        dest,
        multiple=True,
        metavar="KEY=VALUE",
        help=f"A backend option for {store} (e.g. {example}); repeatable.",
    )


#: ``-o KEY=VALUE`` (repeatable): backend options for the command's store, over its profile's.
backend_options = _backend_option("-o", "--option", dest="options", store="the store")
#: ``-o`` of a command that reads one store and writes another (``cp``): for the store read (``--from``).
source_backend_options = _backend_option("-o", "--option", dest="options", store="the --from store")
#: ``--to-option KEY=VALUE`` (repeatable): for the store such a command writes to (``--to``), handed as ``to_options``.
target_backend_options = _backend_option("--to-option", dest="to_options", store="the --to store")


def options_dict(options: tuple[str, ...]) -> dict[str, Any]:
    """The ``-o`` options as keyword arguments for :func:`datamount.storage.open_store`."""
    return dict(parse_option(text) for text in options)


_store_option = click.option(
    "--store",
    "store_ref",
    metavar="STORE",
    help="Store URL, path or profile (default: the default store).",
    shell_complete=complete_stores,
)


def store_options(command: Callable[..., R]) -> Callable[..., R]:
    """Add ``--store STORE`` and ``-o KEY=VALUE`` to a command, and hand it the store they name as its ``store``
    argument: a :class:`~datamount.storage.Store`, opened and checked before the command runs.

    Apply it below ``@click.command()`` where the two options are to appear among the others.
    """

    @functools.wraps(command)
    def with_store(*args: Any, store_ref: str | None, options: tuple[str, ...], **kwargs: Any) -> R:
        return command(*args, store=open_store(store_ref, **options_dict(options)), **kwargs)

    return _store_option(backend_options(with_store))


def shard_size_option(description: str) -> Callable[[F], F]:
    """``--shard-size SIZE`` (default 256MB), handed to the command in bytes as ``shard_bytes``; checked as the
    command line is read against the row groups the commands cut (``DEFAULT_ROW_GROUP_BYTES``)."""
    return click.option(
        "--shard-size", "shard_bytes", default="256MB", show_default=True, callback=_shard_size_value, help=description
    )


def _shard_size_value(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, check_sizes  # pyarrow: only when given

    size = size_value(ctx, param, value)
    try:
        check_sizes(size, DEFAULT_ROW_GROUP_BYTES)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    return size


def size_value(ctx: click.Context, param: click.Parameter, value: str) -> int:
    """A size option's value (``256MB``) in bytes, checked as the command line is read."""
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
