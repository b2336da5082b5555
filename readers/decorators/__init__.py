"""Paddle-compatible reader decorators.

A *reader* is a zero-argument callable returning an iterable of samples; each call is one epoch. A *reader
decorator* takes readers and returns a reader. Names, arguments and defaults follow ``paddle.reader`` and
``paddle.batch``, so ported code only changes its import. Where Paddle misbehaves this module does not:

- any sample value is data: ``None``, ``0``, ``""``, ``()`` and numpy arrays are never taken for an end or an
  error;
- an exception in a background thread or process is raised in the consumer, with its original type and the
  worker's traceback chained as the cause, instead of hanging it;
- stopping early (``break``, ``firstn``, ``close()``, dropping the generator) joins every thread and process;
- randomness is per decorator and reproducible, never the global RNG;
- every decorated reader pickles (given picklable inputs), so it can be handed to ``spawn`` worker processes.

Every decorator calls its upstream readers lazily, on the first ``next()`` of its own iterator, and closes the
upstream iterators when it stops, so that their ``finally`` blocks run at once.
"""

from datamount.readers.decorators._background import buffered, multiprocess_reader, xmap_readers
from datamount.readers.decorators._functions import batch, cache, chain, compose, firstn, map_readers, shuffle
from datamount.readers.workers import Reader

__all__ = [
    "Reader",
    "batch",
    "buffered",
    "cache",
    "chain",
    "compose",
    "firstn",
    "map_readers",
    "multiprocess_reader",
    "shuffle",
    "xmap_readers",
]
