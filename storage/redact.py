"""Keep credentials out of reprs, logs and messages."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

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
#: The ``user:password@`` part of a URL (percent-encoded as RFC 3986 wants it: no ``/``, ``?``, ``#`` or ``@`` in it).
USERINFO = re.compile(r"(?<=://)[^/?#@\s]*@")


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with every secret value (at any depth) replaced by ``***``, and the userinfo of every
    URL among the values masked."""
    return {name: _redacted(name, value) for name, value in options.items()}


def _redacted(name: str, value: Any) -> Any:
    if name.lower() in SECRET_OPTION_NAMES and value is not None:
        return MASK
    if isinstance(value, Mapping):
        return redact_options(value)
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted("", item) for item in value)
    return value


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part masked."""
    return redact_urls(url)


def redact_urls(text: str) -> str:
    """``text`` with the ``user:password@`` part of every URL in it masked."""
    return USERINFO.sub(f"{MASK}@", text)


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secret strings found in ``options`` (to scrub them out of third-party messages), the userinfo of URLs
    among them included."""
    found: list[str] = []
    for name, value in options.items():
        if isinstance(value, Mapping):
            found.extend(secret_values(value))
        elif name.lower() in SECRET_OPTION_NAMES and isinstance(value, str) and len(value) >= 4:
            found.append(value)
        elif isinstance(value, str):
            found.extend(_userinfo_secrets(value))
    return found


def _userinfo_secrets(url: str) -> list[str]:
    """The ``user:password`` of each URL in ``url``, and each password on its own (a message may quote it alone)."""
    found: list[str] = []
    for match in USERINFO.finditer(url):
        userinfo = match.group()[:-1]
        found.extend(part for part in (userinfo, userinfo.partition(":")[2]) if len(part) >= 4)
    return found


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with the userinfo of every URL and every occurrence of each secret replaced by ``***``."""
    text = redact_urls(text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
