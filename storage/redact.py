"""Keep credentials out of reprs, logs and messages.

The one redaction of the project: URLs lose their ``user:password@`` and their secret query parameters
(:func:`redact_urls`), options their secret values (:func:`redact_options`), and any text the secrets it may quote
(:func:`scrub`: a store's messages with its own secrets, what the command writes with :func:`given_secrets`, which
every store notes as it is opened).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

#: Words that make an option or URL parameter a secret wherever they appear in its name (``key``, ``secret_key``,
#: ``aws_secret_access_key``, ``secretAccessKey``, ``X-Amz-Signature``, ``sig``), so that a misspelt or unknown one is
#: masked too: showing ``***`` for a name that holds no secret costs nothing, printing a secret cannot be undone.
SECRET_WORDS = frozenset(
    {
        "key",
        "secret",
        "token",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "sas",
        "sig",
        "signature",
        "cookie",
    }
)
#: Parts that make a name a secret even glued to other words (``secretkey``, ``apitoken``, ``accesskey``).
SECRET_PARTS = ("secret", "password", "passwd", "token", "credential", "signature")
#: A name's words: runs of letters and digits, split where a lower-case letter meets an upper-case one.
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")
MASK = "***"
#: The ``user:password@`` part of a URL (percent-encoded as RFC 3986 wants it: no ``/``, ``?``, ``#`` or ``@`` in it).
USERINFO = re.compile(r"(?<=://)[^/?#@\s]*@")
#: A ``name=value`` parameter of a URL's query (after ``?`` or ``&``; the value ends at ``&``, ``#`` or a space).
QUERY_PARAMETER = re.compile(r"(?<=[?&])([^=&#\s]+)=([^&#\s]*)")
#: Shorter values are not masked wherever they appear: they would mask common words and numbers, not secrets.
SHORTEST_SECRET = 4
#: The secrets of the stores this process opened (see :func:`note_secrets`).
_GIVEN: set[str] = set()


def is_secret_name(name: str) -> bool:
    """Whether an option or URL parameter called ``name`` holds a secret (see :data:`SECRET_WORDS`)."""
    lowered = name.lower()
    if lowered.endswith("key") or any(part in lowered for part in SECRET_PARTS):
        return True
    return any(word.lower() in SECRET_WORDS for word in _WORDS.findall(name))


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with every secret value (at any depth) replaced by ``***``, and the userinfo of every
    URL among the values masked."""
    return {name: _redacted(name, value) for name, value in options.items()}


def _redacted(name: str, value: Any) -> Any:
    if is_secret_name(name) and value is not None:
        return MASK
    if isinstance(value, Mapping):
        return redact_options(value)
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted("", item) for item in value)
    return value


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part and the value of every secret query parameter masked."""
    return redact_urls(url)


def redact_urls(text: str) -> str:
    """``text`` with the ``user:password@`` part of every URL in it, and the value of every query parameter with a
    secret's name (``?secret=``, ``X-Amz-Signature=``, ``sig=``), masked."""
    text = USERINFO.sub(f"{MASK}@", text)
    if "=" not in text:
        return text
    return QUERY_PARAMETER.sub(_masked_parameter, text)


def _masked_parameter(match: re.Match[str]) -> str:
    name, value = match.groups()
    return f"{name}={MASK}" if value and is_secret_name(name) else match.group()


def note_secrets(url: str | os.PathLike[str] | None, options: Mapping[str, Any]) -> list[str]:
    """Note the secrets of a store opened with ``url`` and ``options`` (the password of the URL, the secret values
    of the options: :func:`secret_values`) among :func:`given_secrets`; return them. Every store notes its own."""
    found = secret_values(options) + ([] if url is None else _userinfo_secrets(os.fspath(url)))
    _GIVEN.update(found)
    return found


def given_secrets() -> list[str]:
    """The secrets noted since :func:`forget_given_secrets`: what output that may quote any store's secrets (a
    traceback, the records of libraries' logs) is scrubbed with."""
    return list(_GIVEN.copy())


def forget_given_secrets() -> None:
    """Start noting secrets afresh (the datamount command does at each run: in a process that runs it several times,
    each run masks its own stores' secrets, not words that an earlier run's secrets happened to be)."""
    _GIVEN.clear()


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secret strings found in ``options`` (to scrub them out of third-party messages), the userinfo of URLs
    among them included."""
    found: list[str] = []
    for name, value in options.items():
        if isinstance(value, Mapping):
            found.extend(secret_values(value))
        elif is_secret_name(name) and isinstance(value, str) and len(value) >= SHORTEST_SECRET:
            found.append(value)
        elif isinstance(value, str):
            found.extend(_userinfo_secrets(value))
    return found


def _userinfo_secrets(url: str) -> list[str]:
    """The ``user:password`` of each URL in ``url``, and each password on its own (a message may quote it alone),
    as written and percent-decoded (as a client sends it)."""
    found: list[str] = []
    for match in USERINFO.finditer(url):
        userinfo = match.group()[:-1]
        password = userinfo.partition(":")[2]
        parts = {userinfo, password, unquote(userinfo), unquote(password)}
        found.extend(part for part in sorted(parts) if len(part) >= SHORTEST_SECRET)
    return found


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the userinfo of every URL, the secret parameters of URL queries, and every occurrence of each
    of ``secrets`` replaced by ``***``."""
    text = redact_urls(text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


class RedactingFormatter(logging.Formatter):
    """A logging formatter that scrubs every record, the traceback it carries included, of URL passwords and of
    :func:`given_secrets`: the datamount command formats libraries' logs with it."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record), given_secrets())
