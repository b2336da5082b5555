"""Keep credentials out of reprs, logs and messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Option names (any nesting level) whose values are secrets.
SECRET_OPTION_NAMES = frozenset(
    {
        "key",
        "secret",
        "token",
        "password",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "access_key",
        "secret_key",
        "credentials",
        "client_secret",
        "private_key",
        "sas_token",
        "account_key",
    }
)
MASK = "***"


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with every secret value (at any depth) replaced by ``***``."""
    clean: dict[str, Any] = {}
    for name, value in options.items():
        if name.lower() in SECRET_OPTION_NAMES and value is not None:
            clean[name] = MASK
        elif isinstance(value, Mapping):
            clean[name] = redact_options(value)
        else:
            clean[name] = value
    return clean


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part masked."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{MASK}@{host}"))


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secret strings found in ``options`` (to scrub them out of third-party messages)."""
    found: list[str] = []
    for name, value in options.items():
        if isinstance(value, Mapping):
            found.extend(secret_values(value))
        elif name.lower() in SECRET_OPTION_NAMES and isinstance(value, str) and len(value) >= 4:
            found.append(value)
    return found


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text
