"""A reader is called for each pass, never iterated: the rule every reader of this library keeps, in one place.

A reader (Paddle's *reader creator*) is a zero-argument callable that returns a fresh iterator of samples, one pass,
each time it is called: ``for sample in mnist.train()():``, or ``samples = reader("cats")`` and then
``for sample in samples():``. Iterating the reader itself leaves that call out, and Python says no more than
``'MnistReader' object is not iterable``. Every reader class derives from :class:`ReaderCreator` (the public datasets'
in :mod:`datamount.datasets.public`; ``reader()``'s, ``mix()``'s, ``dist_reader()``'s, ``stream_reader()``'s and the
decorators' in :mod:`datamount.readers`), whose ``__iter__`` raises :class:`ReaderNotCalledError` naming the call. It
lives here, in the lowest layer that hands readers out, so that :mod:`datamount.readers` keeps no rule of its own.
"""

from __future__ import annotations

from typing import ClassVar, NoReturn

from datamount.datasets.errors import ReaderNotCalledError

__all__ = ["ReaderCreator"]


class ReaderCreator:
    """A reader: called, it returns one pass; iterated, a :class:`ReaderNotCalledError` that names the call."""

    __slots__ = ()

    #: The call that makes a reader of the class, as the error writes it (``batch(...)``).
    MADE_BY: ClassVar[str] = "reader"

    def made_by(self) -> str:
        """The call that made this reader, as the error writes it (``mnist.train()``): :attr:`MADE_BY` unless the
        reader knows better."""
        return self.MADE_BY

    def __iter__(self) -> NoReturn:
        made = self.made_by()
        raise ReaderNotCalledError(
            f"a {type(self).__name__} is a reader, not its samples: call it for each pass, as in "
            f"`for sample in {made}():` (or `samples = {made}` and then `for sample in samples():`)"
        )
