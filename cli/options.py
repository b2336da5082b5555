"""Options shared by the commands that open a store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` to a pair; ``true``/``false`` and integers become bool and int, anything else stays text."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="'-o'")
    value: Any = raw
    if raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    elif raw.lstrip("-").isdigit():
        value = int(raw)
    return key.strip(), value


def backend_options(function: F) -> F:
    """Add ``-o KEY=VALUE`` (repeatable): backend options for the store, over its profile's."""
    return click.option(
        "-o",
        "--option",
        "options",
        multiple=True,
        metavar="KEY=VALUE",
        help="A backend option for the store (e.g. -o endpoint_url=http://127.0.0.1:9000); repeatable.",
    )(function)


def options_dict(options: tuple[str, ...]) -> dict[str, Any]:
    """The ``-o`` options as keyword arguments for :func:`datamount.storage.open_store`."""
    return dict(parse_option(text) for text in options)
