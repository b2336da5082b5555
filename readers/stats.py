"""What a reader's consumer waited for, and what the reading cost: ``samples.stats()`` and the reports of
``DATAMOUNT_STATS`` (a log line) and ``DATAMOUNT_STATS_FILE`` (JSON lines).

The rule: a measured pass hands its samples out a chunk at a time. The reader takes the chunk's samples from its source
in one go, which is time its consumer waits for; it then hands them out one by one from C code, and the time until the
consumer asks past them is the consumer's own (compute). That is two clock readings per chunk and none per sample. A
chunk grows (doubling, up to :data:`MAX_CHUNK` samples, and :data:`MAX_CHUNK_BYTES` of them) while one takes under
half of :data:`CHUNK_TARGET_NS` and shrinks (halving) when it takes longer. So a slow consumer or a slow store is timed
sample by sample, and the reader never reads more than about :data:`CHUNK_TARGET_NS` of samples ahead of its consumer.
A sample counts as taken when it is handed out, so the reader's state stays exact.

Every figure is of this process (a worker process reports its own). Counters come from where things happen: the store
counts its requests (and its client its retries and throttling pauses), the row source the bytes it checked, the cache
its hits. A pass's counters are their differences over that pass, so readers that share one ``Store`` object count
each other's requests. The keys of ``stats()`` and the format of the lines (:mod:`~datamount.readers.stats_lines`)
are documented in ``docs/readers.md`` ("Statistics").
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import operator
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from datamount.datasets.manifest import Kind, Manifest
from datamount.readers.errors import StatsConfigError
from datamount.readers.stats_lines import COUNTERS, LINE_FORMAT, LINE_KEYS, encoded_line
from datamount.readers.workers import ClosingChain, close_iterator
from datamount.storage.counters import added

__all__ = [
    "COUNTERS",
    "DEFAULT_INTERVAL_S",
    "KEYS",
    "LINE_FORMAT",
    "LINE_KEYS",
    "STATS_ENV",
    "STATS_FILE_ENV",
    "Figures",
    "HandOut",
    "Meter",
    "MeteredPass",
    "ReportSettings",
    "Timing",
    "Where",
    "combine",
    "measured",
    "report_settings",
    "stats_dict",
    "stored_bytes_per_row",
]

T = TypeVar("T")

STATS_ENV = "DATAMOUNT_STATS"
STATS_FILE_ENV = "DATAMOUNT_STATS_FILE"
#: Seconds between two reports of one reader unless ``DATAMOUNT_STATS`` says otherwise.
DEFAULT_INTERVAL_S = 10.0
#: The keys of ``stats()`` (and of its ``"pass"``).
KEYS = ("passes", "samples", "bytes", "waited_s", "compute_s", "wait_share", "samples_per_s", "bytes_per_s", *COUNTERS)
#: How long a chunk of samples may take (its wait and its compute) before the next one is smaller.
CHUNK_TARGET_NS = 500_000
MAX_CHUNK = 1024
#: Stored bytes of the samples of one chunk at most (but one sample): samples made together take fresh memory from
#: the system each time, where samples taken one by one reuse the memory of those their consumer let go, still in the
#: CPU's caches (4,000 samples of 110 KB: 0.26 s of CPU in chunks of two, 0.41 s in chunks of up to 1,024).
MAX_CHUNK_BYTES = 256 << 10
_NEVER = 1 << 62

log = logging.getLogger(__name__)

#: A pass's reading at one moment: samples taken (counted from the pass's start), their stored bytes, and the
#: counters of what it reads through.
Reading = tuple[int, float, dict[str, float]]


# ----------------------------------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Figures:
    """Additive figures of some reading (a pass, a reader's life, the time between two lines): samples, their stored
    bytes, nanoseconds waited and active (from the pass's first request for a sample to its end), counters."""

    samples: int = 0
    bytes: float = 0.0
    waited_ns: int = 0
    active_ns: int = 0
    counts: Mapping[str, float] = field(default_factory=dict)

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            self.samples + other.samples,
            self.bytes + other.bytes,
            self.waited_ns + other.waited_ns,
            self.active_ns + other.active_ns,
            added([self.counts, other.counts]),
        )

    def __sub__(self, other: Figures) -> Figures:
        return Figures(
            self.samples - other.samples,
            self.bytes - other.bytes,
            self.waited_ns - other.waited_ns,
            self.active_ns - other.active_ns,
            added([self.counts, {name: -amount for name, amount in other.counts.items()}]),
        )

    @property
    def waited_s(self) -> float:
        return self.waited_ns / 1e9

    @property
    def compute_s(self) -> float:
        """The active time not waited: the consumer's own (never below zero)."""
        return max(self.active_ns - self.waited_ns, 0) / 1e9


def stats_dict(
    passes: int, samples: int, size: float, waited_s: float, compute_s: float, counts: Mapping[str, float]
) -> dict[str, Any]:
    """The documented statistics of some reading (the keys of :data:`KEYS`)."""
    seconds = waited_s + compute_s
    found: dict[str, Any] = {
        "passes": passes,
        "samples": samples,
        "bytes": round(size),
        "waited_s": waited_s,
        "compute_s": compute_s,
        "wait_share": waited_s / seconds if seconds > 0 else None,
        "samples_per_s": samples / seconds if seconds > 0 else 0.0,
        "bytes_per_s": size / seconds if seconds > 0 else 0.0,
    }
    for name in COUNTERS:
        amount = counts.get(name, 0)
        found[name] = float(amount) if name == "throttled_s" else round(amount)
    return found


def _figures_dict(passes: int, figures: Figures) -> dict[str, Any]:
    return stats_dict(passes, figures.samples, figures.bytes, figures.waited_s, figures.compute_s, figures.counts)


def combine(stats: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The statistics of readers that read side by side (DataLoader workers, ranks) as one: counts and times added,
    rates added (each reader's rate over its own time), passes the most any of them read, and the ``"pass"`` figures
    combined alike."""
    every = list(stats)

    def one(found: list[Mapping[str, Any]]) -> dict[str, Any]:
        waited = math.fsum(s["waited_s"] for s in found)
        compute = math.fsum(s["compute_s"] for s in found)
        counts = added({name: s[name] for name in COUNTERS} for s in found)
        total = stats_dict(
            max((s["passes"] for s in found), default=0),
            sum(s["samples"] for s in found),
            sum(s["bytes"] for s in found),
            waited,
            compute,
            counts,
        )
        total["samples_per_s"] = math.fsum(s["samples_per_s"] for s in found)
        total["bytes_per_s"] = math.fsum(s["bytes_per_s"] for s in found)
        return total

    combined = one(every)
    combined["pass"] = one([s["pass"] for s in every if "pass" in s])
    return combined


def stored_bytes_per_row(manifest: Manifest, *, packed: bool) -> float:
    """The stored bytes of a row of ``manifest``'s version, on average: its shards' when read packed, else its files'
    (an image version's objects) or its list's (a text version), over their rows."""
    if packed:
        rows = sum(shard.rows for shard in manifest.shards)
        return sum(shard.size for shard in manifest.shards) / rows if rows else 0.0
    if manifest.kind is Kind.IMAGE and manifest.files:
        return manifest.files_size / len(manifest.files)
    rows = sum(manifest.splits.values()) or manifest.rows  # a split's manifest keeps the whole list's size
    return manifest.list_size / rows if rows else 0.0


# -------------------------------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class ReportSettings:
    """What the environment asks reports of: a log line (``DATAMOUNT_STATS``), file lines (``DATAMOUNT_STATS_FILE``)
    and the seconds between two of them."""

    interval_s: float = DEFAULT_INTERVAL_S
    log: bool = False
    file: str | None = None

    @property
    def any(self) -> bool:
        return self.log or self.file is not None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ReportSettings:
        """``DATAMOUNT_STATS``: unset, empty or ``0`` (also ``off``, ``false``, ``no``): no log line; ``1`` (also
        ``on``, ``true``, ``yes``): a log line every :data:`DEFAULT_INTERVAL_S` s; another positive number: a log
        line every that many seconds (``1.0`` for one). ``DATAMOUNT_STATS_FILE``: a path that lines are appended to,
        as often."""
        environ = os.environ if environ is None else environ
        written = environ.get(STATS_ENV, "").strip()
        lowered = written.lower()
        interval, logging_on = DEFAULT_INTERVAL_S, True
        if lowered in ("", "0", "off", "false", "no"):
            logging_on = False
        elif lowered not in ("1", "on", "true", "yes"):
            try:
                interval = float(written)
            except ValueError:
                interval = math.nan
            if not 0 < interval < math.inf:
                raise StatsConfigError(
                    f"${STATS_ENV}={written!r}: give 1 (a report every {DEFAULT_INTERVAL_S:g} s), a number of "
                    "seconds between reports (e.g. 30), or 0 for none"
                )
        path = environ.get(STATS_FILE_ENV, "").strip()
        return cls(interval, logging_on, path or None)


def report_settings() -> ReportSettings:
    """What the environment asks reports of, checked: a stats file that cannot be written is said now (a
    :class:`StatsConfigError`), before the pass begins, not at its first line."""
    settings = ReportSettings.from_environment()
    if settings.file is not None:
        _files.descriptor(settings.file)
    if settings.log:
        _show_log()
    return settings


class _StatsFiles:
    """The stats files this process appends to, each opened once (``O_APPEND``: every line one ``os.write``, so that
    processes sharing a file never mix their lines)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[int, str], int] = {}
        self._failed: set[str] = set()

    def descriptor(self, path: str) -> int:
        key = (os.getpid(), path)  # a forked child opens its own: its parent may close theirs
        with self._lock:
            if key not in self._open:
                try:
                    self._open[key] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except OSError as exc:
                    raise StatsConfigError(
                        f"${STATS_FILE_ENV}: cannot append to {path}: {exc.strerror or exc} (name a file in a folder "
                        "that exists and that this process may write)"
                    ) from exc
            return self._open[key]

    def write(self, path: str, line: dict[str, Any]) -> None:
        data = encoded_line(line)
        try:
            os.write(self.descriptor(path), data)
        except OSError as exc:  # a full disk must not stop the training; said once per file
            if path not in self._failed:
                self._failed.add(path)
                log.warning("cannot append to the stats file %s: %s; its lines are lost", path, exc)

    def after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it


_files = _StatsFiles()
os.register_at_fork(after_in_child=_files.after_fork)


def _show_log() -> None:
    """Let the log lines show: at INFO for this logger unless a level was set for it, and on stderr when logging
    sends them nowhere (a program that configured logging decides where they go)."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    current: logging.Logger | None = log
    while current is not None:
        if any(not isinstance(handler, logging.NullHandler) for handler in current.handlers):
            return
        current = current.parent if current.propagate else None
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    log.addHandler(handler)


def _log_text(line: Mapping[str, Any]) -> str:
    """A line as the log says it: its interval's figures; a pass's last line says the pass's duration first, and
    a pass that reads only local files says so in place of requests, retries and throttling (none are made)."""
    seconds = line["waited_s"] + line["compute_s"]
    share = f"{line['waited_s'] / seconds:.0%}" if seconds > 0 else "-"
    interval = line["interval_s"]
    rate = line["samples"] / interval if interval > 0 else 0.0
    where = f"rank {line['rank']} of {line['world_size']}"
    if line["worker"] is not None:
        where += f", worker {line['worker']}"
    when = f" ended after {line['pass_s']:.1f} s, its last" if line["final"] else ", last"
    if line["local"]:
        reading = "local files"
    else:
        reading = (
            f"{line['requests']:,} requests, {line['retries']:,} retries, {line['throttled_s']:.1f} s throttled, "
            f"{line['cache_hits']:,} cache hits"
        )
    return (
        f"{line['dataset']} pass {line['pass']} ({where}){when} {interval:.1f} s: {line['samples']:,} samples "
        f"({rate:,.0f}/s, {line['bytes'] / interval / 1e6 if interval > 0 else 0:,.1f} MB/s); waited {share} "
        f"({line['waited_s']:.2f} s, compute {line['compute_s']:.2f} s); {reading}, "
        f"{line['bytes_verified'] / 1e6:,.1f} MB verified"
    )


# ---------------------------------------------------------------------------------------------------- passes


@dataclass(frozen=True)
class Where:
    """Who reads: the dataset (or mixture) and the process's rank, world size and worker (None: not a worker);
    ``local``: whether every store it reads is a folder on this machine (file reads, not requests)."""

    dataset: str
    rank: int
    world_size: int
    worker: int | None
    local: bool = False


class Timing:
    """The clock of a pass: when the consumer first asked for a sample, when the pass ended, and the nanoseconds it
    waited. A mixture's parts add their waits to the mixture's pass's timing."""

    __slots__ = ("end_ns", "first_ns", "meter", "waited_ns")

    def __init__(self, meter: Meter) -> None:
        self.meter = meter  # the one that reports (and that a chunk's end asks whether a report is due)
        self.first_ns: int | None = None
        self.end_ns: int | None = None
        self.waited_ns = 0

    def active_ns(self, now: int) -> int:
        if self.first_ns is None:
            return 0
        return (self.end_ns if self.end_ns is not None else now) - self.first_ns

    def mark(self) -> tuple[int, int]:
        """Where a reader's own code (a mixture's, between its parts' samples) starts taking the consumer's time."""
        return time.perf_counter_ns(), self.waited_ns

    def waited_since(self, mark: tuple[int, int] | None) -> None:
        """The consumer waited from ``mark`` until now (what parts added meanwhile is part of it); nothing if None."""
        if mark is not None:
            start, waited = mark
            self.waited_ns = waited + time.perf_counter_ns() - start


class HandOut:
    """The samples of a measured pass handed out: the chunks before the current one, and those of the current one the
    consumer has taken (its iterator's length says how many are left)."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: tuple[int, Iterator[Any], int] = (0, iter(()), 0)

    def count(self) -> int:
        done, current, size = self._state  # one read: another thread may ask while a chunk begins
        return done + size - operator.length_hint(current)

    def begin(self, chunk: list[T]) -> Iterator[T]:
        """The next chunk's iterator, counted from now on."""
        handed = iter(chunk)
        self._state = (self.count(), handed, len(chunk))
        return handed


class MeteredPass:
    """One pass as its meter sees it: where it reads, its epoch, its timing (its own, or its mixture's), and how to
    read its samples, bytes and counters at any moment."""

    def __init__(
        self, meter: Meter, where: Where, epoch: int, reading: Callable[[], Reading], timing: Timing | None
    ) -> None:
        self.meter = meter
        self.where = where
        self.epoch = epoch
        self.owns_timing = timing is None
        self.timing = Timing(meter) if timing is None else timing
        self.handout = HandOut()
        self._reading = reading
        self._start = reading()
        self.ended: Figures | None = None

    def figures(self, now: int) -> Figures:
        """What the pass has done until ``now`` (its figures at its end, once it ended)."""
        if self.ended is not None:
            return self.ended
        samples, size, counts = self._reading()
        first_samples, first_size, first_counts = self._start
        if not self.owns_timing:
            waited = active = 0
        else:
            waited, active = self.timing.waited_ns, self.timing.active_ns(now)
        differences = added([counts, {name: -amount for name, amount in first_counts.items()}])
        return Figures(samples - first_samples, size - first_size, waited, active, differences)

    def started(self, now: int) -> None:
        if self.owns_timing and self.timing.first_ns is None:
            self.timing.first_ns = now

    def end(self, now: int) -> None:
        if self.ended is None:
            if self.owns_timing:
                self.timing.end_ns = now
            self.meter.end(self, now)


class Meter:
    """The statistics of one reader (or mixture) in this process: its passes' figures, and their reports.

    A copy in another process (a worker) starts from nothing: each process measures what it reads.
    """

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.passes = 0
        self._ended = Figures()
        self._live: list[MeteredPass] = []
        self._latest: MeteredPass | None = None
        self._settings: ReportSettings | None = None  # what this meter reports (None: nothing, or not yet asked)
        self._reported = Figures()
        self._reported_ns: int | None = None
        self._listener: tuple[Callable[[Meter, int], None], int] | None = None
        self._line_due = self._listened_due = self.due_ns = _NEVER

    def __reduce__(self) -> tuple[type[Meter], tuple[()]]:
        return (Meter, ())

    def _fresh_in_this_process(self) -> None:
        if self._pid != os.getpid():  # forked: what the parent measured is not this process's
            self.__init__()  # type: ignore[misc]

    def begin(
        self,
        where: Where,
        epoch: int,
        reading: Callable[[], Reading],
        *,
        timing: Timing | None = None,
        reports: ReportSettings | None = None,
    ) -> MeteredPass:
        """A pass begins, reported as ``reports`` say (from :func:`report_settings`; None: not at all). With
        ``timing`` (a mixture's), the pass is a part of another: timed and reported there."""
        self._fresh_in_this_process()
        settings = reports or ReportSettings()
        metered = MeteredPass(self, where, epoch, reading, timing)
        with self._lock:
            self.passes += 1
            self._live.append(metered)
            self._latest = metered
            self._settings = settings if settings.any else None
            now = time.perf_counter_ns()
            if self._settings is not None and self._line_due == _NEVER:
                self._line_due = now + int(self._settings.interval_s * 1e9)
            self._set_due()
        return metered

    def end(self, metered: MeteredPass, now: int) -> None:
        with self._lock:
            figures = metered.figures(now)
            metered.ended = figures
            if metered in self._live:
                self._live.remove(metered)
                self._ended += figures
        if self._settings is not None:
            self._report(now, final=True)
        self._tell_listener(now)

    def figures(self, now: int) -> Figures:
        """Every pass's figures until ``now``."""
        with self._lock:
            total = self._ended
            for metered in self._live:
                total += metered.figures(now)
            return total

    def stats(self) -> dict[str, Any]:
        """The figures of every pass (see ``docs/readers.md``, "Statistics"), with ``"pass"``: the current or last
        pass's."""
        self._fresh_in_this_process()
        now = time.perf_counter_ns()
        found = _figures_dict(self.passes, self.figures(now))
        latest = self._latest
        found["pass"] = _figures_dict(int(latest is not None), latest.figures(now) if latest else Figures())
        return found

    def latest(self, now: int) -> tuple[int | None, Figures]:
        """The current or last pass's epoch and figures (``None`` and nothing before the first)."""
        latest = self._latest
        return (None, Figures()) if latest is None else (latest.epoch, latest.figures(now))

    # -- reports -----------------------------------------------------------------------------------------------

    def listen(self, listener: Callable[[Meter, int], None], every_s: float) -> None:
        """Call ``listener(meter, now)`` every ``every_s`` seconds while passes are read, and at each pass's end."""
        self._fresh_in_this_process()
        with self._lock:
            self._listener = (listener, int(every_s * 1e9))
            self._listened_due = time.perf_counter_ns() + self._listener[1]
            self._set_due()

    def tick(self, now: int) -> None:
        """A chunk ended at ``now`` after :attr:`due_ns`: report what is due."""
        if self._settings is not None and now >= self._line_due:
            self._report(now, final=False)
        if now >= self._listened_due:
            self._tell_listener(now)

    def _set_due(self) -> None:
        self.due_ns = min(self._line_due, self._listened_due)

    def _tell_listener(self, now: int) -> None:
        if self._listener is None:
            return
        listener, every = self._listener
        self._listened_due = now + every
        self._set_due()
        listener(self, now)

    def _report(self, now: int, *, final: bool) -> None:
        settings, latest = self._settings, self._latest
        if settings is None or latest is None:
            return
        figures = self.figures(now)
        interval = figures - self._reported
        # Whole bytes in every line, and the lines' sum that of stats(): the rounded totals' difference.
        interval = dataclasses.replace(interval, bytes=round(figures.bytes) - round(self._reported.bytes))
        first = latest.timing.first_ns or now
        since = max(self._reported_ns or 0, first)
        self._reported, self._reported_ns = figures, now
        self._line_due = now + int(settings.interval_s * 1e9)
        self._set_due()
        line = _line(latest, interval, (now - since) / 1e9, (now - first) / 1e9, final=final)
        if settings.file is not None:
            _files.write(settings.file, line)
        if settings.log:
            log.info("%s", _log_text(line))


def _line(metered: MeteredPass, interval: Figures, seconds: float, pass_s: float, *, final: bool) -> dict[str, Any]:
    """A line of the stats file (the keys of :data:`LINE_KEYS`, in order): ``interval`` over its ``seconds``, in a
    pass of ``pass_s`` seconds so far."""
    counts = interval.counts
    where = metered.where
    return {
        "format": LINE_FORMAT,
        "time": round(time.time(), 6),
        "rank": where.rank,
        "world_size": where.world_size,
        "worker": where.worker,
        "dataset": where.dataset,
        "pass": metered.epoch,
        "interval_s": round(max(seconds, 0.0), 6),
        "samples": interval.samples,
        "bytes": round(interval.bytes),
        "waited_s": round(interval.waited_s, 9),
        "compute_s": round(interval.active_ns / 1e9 - interval.waited_s, 9),
        **{
            name: float(counts.get(name, 0)) if name == "throttled_s" else round(counts.get(name, 0))
            for name in COUNTERS
        },
        "pass_s": round(max(pass_s, 0.0), 6),
        "local": where.local,
        "final": final,
    }


# ------------------------------------------------------------------------------------------- measured passes


def measured(
    samples: Iterator[T],
    metered: MeteredPass,
    explained: Callable[[], AbstractContextManager[None]],
    *,
    bytes_per_sample: float = 0.0,
) -> ClosingChain[T]:
    """``samples`` handed out a chunk at a time, timed into ``metered`` (see the module's rule); a failure of the
    source is raised as ``explained`` explains it, after the samples that came before it are handed out. A chunk
    holds :data:`MAX_CHUNK_BYTES` at most, at ``bytes_per_sample`` (stored bytes, on average)."""
    largest = MAX_CHUNK if bytes_per_sample <= 0 else int(max(1, min(MAX_CHUNK, MAX_CHUNK_BYTES // bytes_per_sample)))
    chunks = _chunks(samples, metered, explained, largest)
    next(chunks)  # inside its ``try``: closing the pass closes the source even before a sample is taken
    return ClosingChain.of(chunks)


def _chunks(
    samples: Iterator[T], metered: MeteredPass, explained: Callable[[], AbstractContextManager[None]], largest: int
) -> Iterator[Iterator[T]]:
    timing, handout, clock = metered.timing, metered.handout, time.perf_counter_ns
    size = 1
    try:
        yield iter(())
        asked = clock()  # the consumer asks for the first sample
        metered.started(asked)
        with explained():
            while True:
                chunk: list[T] = []
                failure: Exception | None = None
                try:
                    chunk.extend(itertools.islice(samples, size))
                except Exception as exc:  # raised once the samples before it are handed out
                    failure = exc
                ready = clock()
                timing.waited_ns += ready - asked
                if chunk:
                    yield handout.begin(chunk)
                if failure is not None:
                    raise failure
                if len(chunk) < size:
                    return
                now = clock()  # the consumer asks past the chunk
                took = now - asked
                size = min(size * 2, largest) if took < CHUNK_TARGET_NS // 2 else size
                size = max(size // 2, 1) if took > CHUNK_TARGET_NS else size
                asked = now
                if now >= timing.meter.due_ns:
                    timing.meter.tick(now)
    finally:
        metered.end(clock())
        close_iterator(samples)
