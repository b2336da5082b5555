"""How long operations report progress: a small protocol the CLI implements with a progress bar."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Receives the phases of a long operation (hashing, uploading, verifying...)."""

    def start(self, phase: str, *, items: int, size: int) -> None:
        """A phase begins with ``items`` things to do, ``size`` bytes in all."""

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        """Some of the phase is done."""

    def finish(self) -> None:
        """The phase is over."""


class Silent:
    """Progress that reports nothing (the default for library calls)."""

    def start(self, phase: str, *, items: int, size: int) -> None:
        pass

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        pass

    def finish(self) -> None:
        pass
