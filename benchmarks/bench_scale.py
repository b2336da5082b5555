"""Scale: a version of 10^5 to 10^8 rows uploaded, described, opened, read at random and listed, each step in a
fresh process under a memory guard.

    python benchmarks/bench_scale.py [--quick] [--rows 100000,1000000] [--layouts packed,unpacked,text]
                                     [--pool N] [--synthetic ROWS] [--ext4-image SIZE|auto]
                                     [--max-rss 6GB] [--timeout 1800] [--folder DIR] [--json FILE]

Data is generated in a temporary folder (``--folder``, default the system's): for the image layouts, one file of 32
bytes per row (``img/00012/000012345.bin``, label ``i % 1000``; the rows are what is measured, not bytes), for
``text`` a text list (``s000012345<TAB>t345``), which fits 10^8 rows in 1.6 GB of disk. A layout whose files do not
fit the folder's free disk is left out with the reason (a row's file takes a 4 KiB block and an inode, once in the
source folder and once more as an object of an unpacked upload). ``--pool N``: the image list's row ``i`` names file
``i % N``, so that 10^7 rows take the disk of N files (an unpacked upload stores each distinct file once). Each layout
goes to a local store of its own:

- ``packed``: ``datamount upload LIST NAME --pack`` of the image list (its files straight into shards);
- ``unpacked``: ``datamount upload LIST NAME`` of the image list (one object per file);
- ``text``: ``datamount upload LIST NAME --kind text`` (the list is the data); ``text-packed`` adds ``--pack``;
- ``--synthetic ROWS``: a packed image version of ``ROWS`` rows (10^8) generated straight into the store's format in
  a process of its own, no files (:func:`synthesize`): one real shard of ``--synthetic-shard-rows`` rows written by
  datamount's ``ShardWriter``, named by the manifest once per that many rows (row ``i``'s file holds the bytes of
  ``i % shard_rows``, so its entry's xxh3-64 is that of the bytes the shard holds for it); the normalised list written
  as a stream with its blocks (``ListBlocksWriter``); the entries, given lazily, and every index made by
  ``catalog.commit`` under ``locks.writing``, as an upload's are. Then every step below that reads.

Then, each in a process of its own, through the public command line and API:

- ``upload``: its wall time, rows per second and peak RSS;
- the manifest's bytes per row: the dataset's folder but its objects, lists, shards and locks (the manifests, pack
  records and whatever they name), and what is left per row once each row's own path and label bytes are taken off
  (the issue's goal: at most 20 bytes);
- ``datamount info NAME --json`` and ``datamount ls --json``: wall time and peak RSS, beside that of
  ``datamount --version`` ("command start": the interpreter and the command's imports, which every command pays);
- ``reader(NAME, store=...)``: its import, the open, the first sample of a pass, and ``reader[i]`` for a random ``i``
  (seeded by ``--seed``), and the process's peak RSS;
- ``datamount://``: ``fs.info`` of row ``i``'s path in a fresh filesystem (one path looked up), then ``fs.find`` of
  the version (every file listed): times, entries and peak RSS, with the part of it that is the find's result (the
  list and its strings, as ``sys.getsizeof`` counts them);
- ``datamount diff NAME@1 NAME@1 --json`` (the whole comparison, every row matched) and ``datamount verify NAME
  --json``: wall time, CPU and peak RSS;
- the mount: ``datamount mount NAME MNT --foreground`` until it answers, ``os.stat`` of row ``i``'s path through it,
  ``os.listdir`` of its folder (1,000 files), then ``find MNT -type f | wc -l``: times, entries, and the peak RSS of
  the serving process (where FUSE can run).

Above :data:`WHOLE_FIND_ROWS` rows the ``find`` of the version (``datamount://`` and mount) is left out: its result
alone, 10^8 paths as Python strings, is gigabytes; ``datamount://`` then finds the folder of row ``i``'s path.

``--ext4-image SIZE`` (root; ``auto``: half the free disk, the most it may be) makes an ext4 image in the system's
temporary folder (``mkfs.ext4 -O inline_data``: a file of 32 bytes takes an inode and no block), mounts it
``nodiscard`` (files removed do not wait for the device), generates everything there (``--folder`` and the steps'
``TMPDIR``), and unmounts and deletes it at the end, also when the run fails or is stopped (SIGTERM, SIGHUP, Ctrl-C).

Every process runs under a guard that adds up the resident memory of its session every 0.5 s and kills it above
``--max-rss`` (default 6 GB: the machine is shared), or past ``--timeout`` seconds: the table says "over 6 GB" or
"timed out" in place of the figure, and the run goes on with the next step. Peak RSS is the process's own
(``ru_maxrss`` from ``wait4``, the largest of it and the children it waited for), as a small launcher process that
started it reads it: Linux keeps ``ru_maxrss`` across ``exec``, so the benchmark's own size would be its floor. The
1-minute load average at the start of each layout and size is printed beside its figures (the machine may be
shared). Exit status 1 when a step failed for any other reason (an error, not a limit).

What the figures were before issue 39's streaming upload and columnar manifest, and how to read them: docs/scale.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: F401  (bytecode cached for the fresh processes, as in every benchmark)

if TYPE_CHECKING:
    from datamount.datasets.manifest import FileEntry

DATASET = "scale"
FILE_BYTES = 32
LABELS = 1000
#: A file of the image layouts on disk: its 4 KiB block, its inode and its share of its folder's entries.
FILE_DISK_BYTES = 4096 + 512
#: Disk left free beyond what a layout needs (other processes share the disk).
DISK_MARGIN = 2 * 1024**3
LAYOUTS = ("packed", "unpacked", "text", "text-packed", "synthetic")
IMAGE_LAYOUTS = ("packed", "unpacked")
DEFAULT_LAYOUTS = ("packed", "unpacked", "text")
#: The dataset folder's parts that are not its manifest: file bytes, lists, shards, writers' locks.
NOT_MANIFEST = ("objects", "lists", "packs", "locks")
#: Seconds between two looks at a step's memory (each reads every /proc/PID/stat: 0.1 s took 8% of a core).
POLL_SECONDS = 0.5
#: Rows of the one real shard of a synthetic version (a multiple of LABELS: the shard's labels are its rows').
SYNTHETIC_SHARD_ROWS = 1_000_000
#: Rows above which the whole version is not found (``datamount://`` finds one folder; the mount is not walked).
WHOLE_FIND_ROWS = 10**7
DATAMOUNT = [sys.executable, "-m", "datamount.cli.main"]
THIS = [sys.executable, str(Path(__file__).resolve())]
#: A small process that starts a command and writes the command's own peak RSS (KiB, from ``wait4``) to a file. Linux
#: keeps ``ru_maxrss`` across ``exec``: a process the benchmark started itself would report at least the benchmark's
#: size, one the launcher starts at least the launcher's (about 10 MB).
LAUNCHER = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


# ----------------------------------------------------------------------------------------------- the guard


@dataclass
class Outcome:
    """What one guarded process did: wall seconds, CPU seconds (user and system, its waited-for children's
    included: less sensitive than wall time to a machine shared with other work), peak RSS in MB, its output, and
    why it failed (None: it did not). ``limit`` says the failure was the guard's (memory or time), a figure rather
    than an error."""

    seconds: float
    cpu_seconds: float
    peak_mb: float
    stdout: str
    failure: str | None = None
    limit: bool = False

    def shown(self, figure: str) -> str:
        if self.failure is None:
            return figure
        return f"{self.failure} after {self.seconds:.0f} s" if self.limit and self.seconds else self.failure


@dataclass(frozen=True)
class Guard:
    """Runs processes, each in a session of its own, killing a session that goes over ``max_rss`` bytes (all its
    processes together, and those of the sessions in ``also``) or runs past ``timeout`` seconds."""

    max_rss: int
    timeout: float

    def run(self, command: Sequence[str], *, also: Sequence[int] = (), cwd: Path | None = None) -> Outcome:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, PeakFile() as peak:
            started = time.perf_counter()
            process = subprocess.Popen(peak.launched(command), stdout=out, stderr=err, start_new_session=True, cwd=cwd)
            failure, usage = self.wait(process, also)
            seconds = time.perf_counter() - started
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
            peak_mb = peak.mb(usage)
        if failure is None and process.returncode != 0:
            last = stderr.strip().splitlines()[-1:] or ["(no message)"]
            failure = f"exit {process.returncode}: {last[0][:160]}"
            return Outcome(seconds, cpu_seconds(usage), peak_mb, stdout, failure)
        return Outcome(seconds, cpu_seconds(usage), peak_mb, stdout, failure, limit=failure is not None)

    def wait(
        self, process: subprocess.Popen[bytes], also: Sequence[int] = ()
    ) -> tuple[str | None, resource.struct_rusage]:
        """Wait for ``process`` under the guard: the guard's reason if it killed it (None otherwise), and its
        resource usage (``ru_maxrss`` in KiB). Its exit status is set on ``process``."""
        deadline = time.monotonic() + self.timeout
        failure = None
        # Woken at once when the process ends (its pidfd turns readable), so that the wall time is not rounded up
        # to the polling interval; the memory is looked at between.
        ended = os.pidfd_open(process.pid)
        try:
            while True:
                pid, status, usage = os.wait4(process.pid, os.WNOHANG)
                if pid:
                    process.returncode = os.waitstatus_to_exitcode(status)
                    return failure, usage
                if failure is None:
                    failure = self._over(process.pid, also, deadline)
                    if failure is not None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(process.pid, signal.SIGKILL)
                select.select([ended], [], [], POLL_SECONDS)
        finally:
            os.close(ended)

    def _over(self, session: int, also: Sequence[int], deadline: float) -> str | None:
        if time.monotonic() > deadline:
            return f"timed out ({self.timeout:.0f} s)"
        if sessions_rss([session, *also]) > self.max_rss:
            return over(self.max_rss)
        return None


class PeakFile:
    """Where :data:`LAUNCHER` writes the peak RSS of the command it started (a context manager: removed after)."""

    def __enter__(self) -> PeakFile:
        handle, self.path = tempfile.mkstemp(prefix="datamount-bench-peak-")
        os.close(handle)
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def launched(self, command: Sequence[str]) -> list[str]:
        """``command``, started by the launcher."""
        return [sys.executable, "-c", LAUNCHER, self.path, *command]

    def mb(self, usage: resource.struct_rusage) -> float:
        """The command's peak RSS in MB; the launcher's ``usage`` (a floor: see :data:`LAUNCHER`) when the launcher
        was killed before it wrote it."""
        written = Path(self.path).read_text().strip()
        return (int(written) if written else usage.ru_maxrss) / 1024


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def over(limit: int) -> str:
    return f"over {limit / 1e9:g} GB" if limit >= 10**9 else f"over {limit / 1e6:g} MB"


def sessions_rss(sessions: Sequence[int]) -> int:
    """Resident bytes of every process in ``sessions`` (a process's session id: field 6 of ``/proc/PID/stat``)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = Path(entry.path, "stat").read_bytes().rsplit(b")", 1)[1].split()
            if int(fields[3]) in sessions:
                total += int(fields[21]) * page
    return total


# ---------------------------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Source:
    """A generated list: its path, rows, kind, the bytes of each row's own path and label (on average), and the
    distinct files its rows name (row ``i`` names file ``i % files``; 0 for a text list)."""

    list_file: Path
    rows: int
    kind: str
    path_and_label_bytes: float
    files: int = 0

    def path_of(self, row: int) -> str:
        """Row ``row``'s path in the version (a text version's only file is its list)."""
        return image_path(row % self.files) if self.kind == "image" else self.list_file.name


def image_path(i: int) -> str:
    return f"img/{i // 1000:05d}/{i:09d}.bin"


def text_row(i: int) -> tuple[str, str]:
    return f"s{i:09d}", f"t{i % LABELS}"


def make_images(folder: Path, rows: int, pool: int = 0) -> Source:
    """``min(rows, pool)`` files of 32 bytes (each its own bytes; every row's when ``pool`` is 0) under ``folder``
    and the ``.list`` of ``rows`` rows naming them, row ``i`` file ``i % files``."""
    files = min(rows, pool) if pool else rows
    for start in range(0, files, 1000):
        (folder / image_path(start)).parent.mkdir(parents=True)
        for i in range(start, min(start + 1000, files)):
            fd = os.open(folder / image_path(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, file_bytes(i))
            os.close(fd)
    list_file = folder / "images.list"
    path_bytes = 0
    with open(list_file, "w", encoding="ascii") as listing:
        for start in range(0, rows, 1000):
            lines = [f"{image_path(i % files)}\t{i % LABELS}\n" for i in range(start, min(start + 1000, rows))]
            path_bytes += sum(len(line) - 2 for line in lines)  # the line less its tab and newline
            listing.writelines(lines)
    return Source(list_file, rows, "image", path_bytes / rows, files)


def file_bytes(i: int) -> bytes:
    """The 32 bytes of file ``i``."""
    return f"{i:0{FILE_BYTES - 1}d}\n".encode()


def make_text(folder: Path, rows: int) -> Source:
    """A text list of ``rows`` lines (source and target) in ``folder``."""
    list_file = folder / "text.list"
    own_bytes = 0
    with open(list_file, "w", encoding="ascii") as listing:
        for start in range(0, rows, 100_000):
            pairs = [text_row(i) for i in range(start, min(start + 100_000, rows))]
            own_bytes += sum(len(a) + len(b) for a, b in pairs)
            listing.writelines(f"{a}\t{b}\n" for a, b in pairs)
    return Source(list_file, rows, "text", own_bytes / rows)


def disk_needed(layout: str, rows: int, pool: int = 0) -> int:
    """Bytes of disk a layout's data takes at ``rows`` rows (source and store), beyond the margin."""
    if layout in IMAGE_LAYOUTS:
        files = min(rows, pool) if pool else rows
        return files * FILE_DISK_BYTES * (2 if layout == "unpacked" else 1) + rows * 40 * 3
    if layout == "synthetic":  # the list, the entries' parts and the sort's spill
        return rows * 150
    return rows * 25 * 3  # the list, its normalised copy in the store, shards or spare


# ---------------------------------------------------------------------------------------------- the steps


@dataclass
class Figures:
    """One layout at one size: what each step measured (shown as text where a step failed or hit a limit)."""

    layout: str
    rows: int
    load: float
    cells: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def record(self, name: str, outcome: Outcome, figure: str, value: float | None = None) -> None:
        self.cells[name] = outcome.shown(figure)
        self.values[name] = value if outcome.failure is None else None
        if outcome.failure is not None and not outcome.limit:
            self.errors.append(f"{self.layout} {self.rows}: {name}: {outcome.failure}")


def upload_command(source: Source, layout: str, store: Path) -> list[str]:
    command = [*DATAMOUNT, "upload", str(source.list_file), DATASET, "--store", str(store), "--quiet"]
    if source.kind == "text":
        command += ["--kind", "text"]
    if layout in ("packed", "text-packed"):
        command.append("--pack")
    return command


def manifest_bytes(store: Path) -> int:
    """Bytes of the dataset's folder that are neither file bytes, lists, shards nor locks: its manifests."""
    folder = store / "datasets" / DATASET
    total = 0
    for part in folder.iterdir():
        if part.name in NOT_MANIFEST:
            continue
        for parent, _, names in os.walk(part):
            total += sum(os.path.getsize(os.path.join(parent, name)) for name in names)
    return total


def index_column_bytes(store: Path) -> dict[str, int]:
    """Bytes of each column of the version's index parts (``versions/entries/``), compressed as stored, by index
    (``entries``: by path; ``rows``: the row index) and column, from the parts' Parquet footers; ``footers`` the rest
    of each part."""
    import pyarrow.parquet as pq

    found: dict[str, int] = {}
    for part in (store / "datasets" / DATASET / "versions" / "entries").glob("*.parquet"):
        metadata = pq.ParquetFile(part).metadata
        index = "entries" if "path" in metadata.schema.names else "rows"
        columns = 0
        for group in range(metadata.num_row_groups):
            for column in range(metadata.num_columns):
                chunk = metadata.row_group(group).column(column)
                name = f"{index} {chunk.path_in_schema}"
                found[name] = found.get(name, 0) + chunk.total_compressed_size
                columns += chunk.total_compressed_size
        found["footers"] = found.get("footers", 0) + part.stat().st_size - columns
    return found


def measure(layout: str, source: Source, store: Path, guard: Guard, seed: int) -> Figures:
    figures = Figures(layout, source.rows, os.getloadavg()[0])
    start = guard.run([*DATAMOUNT, "--version"])
    figures.record("command start", start, f"{start.seconds:.2f} s (CPU {start.cpu_seconds:.2f})", start.seconds)
    uploaded = guard.run(upload_command(source, layout, store))
    record_upload(figures, uploaded)
    if uploaded.failure is not None:
        return figures
    record_manifest(figures, store, source.path_and_label_bytes if source.kind == "image" else None)
    row = random.Random(seed).randrange(source.rows)
    measure_reading(figures, guard, store, row, source.path_of(row))
    return figures


def measure_synthetic(rows: int, shard_rows: int, store: Path, guard: Guard, seed: int) -> Figures:
    """A packed image version of ``rows`` rows generated in a process of its own (:func:`synthesize`), then read."""
    figures = Figures("synthetic", rows, os.getloadavg()[0])
    start = guard.run([*DATAMOUNT, "--version"])
    figures.record("command start", start, f"{start.seconds:.2f} s (CPU {start.cpu_seconds:.2f})", start.seconds)
    made = guard.run(
        [*THIS, "--step", "synthesize", "--store", str(store), "--row", str(rows), "--path", str(shard_rows)]
    )
    record_upload(figures, made)
    if made.failure is not None:
        return figures
    own = sum(len(synthetic_line(i)) - 2 for i in range(0, rows, max(1, rows // 10_000))) / len(
        range(0, rows, max(1, rows // 10_000))
    )
    record_manifest(figures, store, own)
    row = random.Random(seed).randrange(rows)
    measure_reading(figures, guard, store, row, image_path(row))
    return figures


def record_upload(figures: Figures, uploaded: Outcome) -> None:
    rate = figures.rows / uploaded.seconds if uploaded.seconds else 0.0
    shown = f"{uploaded.seconds:.1f} s (CPU {uploaded.cpu_seconds:.1f} s), {rate:,.0f}/s"
    figures.record("upload", uploaded, shown, uploaded.seconds)
    figures.values["upload CPU"] = uploaded.cpu_seconds if uploaded.failure is None else None
    figures.record("upload RSS", uploaded, f"{uploaded.peak_mb:,.0f} MB", uploaded.peak_mb)


def record_manifest(figures: Figures, store: Path, path_and_label_bytes: float | None) -> None:
    """The manifest's bytes per row, and (an image version: ``path_and_label_bytes`` given) what is left per row
    beyond each row's own path and label."""
    per_row = manifest_bytes(store) / figures.rows
    figures.cells["manifest B/row"] = f"{per_row:.2f}"
    figures.values["manifest B/row"] = per_row
    if path_and_label_bytes is not None:  # a text version's rows are in its list, none in its manifest
        beyond = per_row - path_and_label_bytes
        figures.cells["manifest B/row"] += f" ({beyond:.1f} beyond path+label)"
        figures.values["beyond path+label"] = beyond
    columns = {name: size / figures.rows for name, size in sorted(index_column_bytes(store).items())}
    if columns:
        figures.cells["index B/row"] = ", ".join(f"{name} {size:.2f}" for name, size in columns.items())
        figures.values["index B/row"] = columns


def measure_reading(figures: Figures, guard: Guard, store: Path, row: int, path: str) -> None:
    """Every step that reads the version: ``info``, ``ls``, the reader, ``datamount://``, ``diff``, ``verify``, the
    mount (``row`` and its ``path``: the ones read at random)."""
    for command in ("info", "ls"):
        name = [DATASET] if command == "info" else []
        done = guard.run([*DATAMOUNT, command, *name, "--store", str(store), "--json"])
        shown = f"{done.seconds:.2f} s (CPU {done.cpu_seconds:.2f}), {done.peak_mb:,.0f} MB"
        figures.record(command, done, shown, done.seconds)
    whole = figures.rows <= WHOLE_FIND_ROWS
    measure_reader(figures, guard, store, row)
    measure_urls(figures, guard, store, path, whole)
    for command, arguments in (("diff", [f"{DATASET}@1", f"{DATASET}@1"]), ("verify", [DATASET, "--quiet"])):
        done = guard.run([*DATAMOUNT, command, *arguments, "--store", str(store), "--json"])
        shown = f"{done.seconds:.2f} s (CPU {done.cpu_seconds:.2f}), {done.peak_mb:,.0f} MB"
        figures.record(command, done, shown, done.peak_mb)
    measure_mount(figures, guard, store, path, whole)


def measure_reader(figures: Figures, guard: Guard, store: Path, row: int) -> None:
    done = guard.run([*THIS, "--step", "reader", "--store", str(store), "--row", str(row)])
    found = json.loads(done.stdout.splitlines()[-1]) if done.failure is None else {}
    shown = "{import:.2f} / {open:.3f} / {first:.3f} / {row:.3f} s".format_map(found) if found else ""
    if found:
        shown += f" (CPU {done.cpu_seconds:.2f})"
    figures.record("reader import/open/first/[i]", done, shown, found.get("open"))
    figures.record("reader RSS", done, f"{done.peak_mb:,.0f} MB", done.peak_mb)


def measure_urls(figures: Figures, guard: Guard, store: Path, path: str, whole: bool) -> None:
    step = [*THIS, "--step", "urls", "--store", str(store), "--path", path]
    done = guard.run(step if whole else [*step, "--folder-only"])
    found = json.loads(done.stdout.splitlines()[-1]) if done.failure is None else {}
    shown = "{info:.3f} / {ls:.3f} / {find:.2f} s ({files:,})".format_map(found) if found else ""
    if found and not whole:
        shown += " of one folder"
    if found:
        shown += f" (CPU {done.cpu_seconds:.2f})"
    figures.record("url info/ls/find", done, shown, found.get("find"))
    held = f" ({found['result_mb']:,.0f} MB of it the find's result)" if found else ""
    figures.record("url RSS", done, f"{done.peak_mb:,.0f} MB{held}", done.peak_mb)


def measure_mount(figures: Figures, guard: Guard, store: Path, path: str, whole: bool = True) -> None:
    reason = why_no_mount()
    if reason is not None:
        figures.cells["mount up/stat/ls/find"] = figures.cells["mount RSS"] = f"n/a ({reason})"
        return
    with (
        tempfile.TemporaryDirectory(prefix="datamount-bench-mnt-") as mountpoint,
        tempfile.TemporaryFile() as log,
        PeakFile() as peak,
    ):
        command = [*DATAMOUNT, "mount", DATASET, mountpoint, "--store", str(store), "--foreground"]
        started = time.perf_counter()
        server = subprocess.Popen(peak.launched(command), stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        shown, walked = "", Outcome(0, 0, 0, "", "interrupted")
        try:
            shown, walked = walk_mount(guard, server, Path(mountpoint), path, started, whole)
            if walked.failure is not None and walked.failure.startswith("did not mount"):
                log.seek(0)
                walked.failure += f": {log.read().decode(errors='replace').strip()[-160:]}"
        finally:
            subprocess.run([*DATAMOUNT, "unmount", mountpoint], capture_output=True, check=False)
            if walked.failure is not None:  # a server that never answered may not have seen the unmount
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
            failure, usage = guard.wait(server)
            peak_mb = peak.mb(usage)
            if os.path.ismount(mountpoint):  # its server killed before it unmounted: detached, not left behind
                subprocess.run(["umount", "-l", mountpoint], capture_output=True, check=False)
        served = Outcome(
            0, cpu_seconds(usage), peak_mb, "", walked.failure or failure,
            walked.limit or failure is not None,
        )  # fmt: skip
        if served.failure is None and server.returncode != 0:
            served.failure = f"serving process exit {server.returncode}"
        figures.record("mount up/stat/ls/find", served, shown, walked.seconds)
        memory = f"{served.peak_mb:,.0f} MB (CPU {served.cpu_seconds:.1f} s)"
        figures.record("mount RSS", served, memory, served.peak_mb)


def walk_mount(
    guard: Guard, server: subprocess.Popen[bytes], mountpoint: Path, path: str, started: float, whole: bool = True
) -> tuple[str, Outcome]:
    """Wait for the mount to answer, stat ``path`` in it, list its folder and (``whole``) walk it: the figures and
    the walk's outcome."""
    deadline = time.monotonic() + guard.timeout
    looked = 0.0
    while not os.path.ismount(mountpoint):
        # WNOWAIT: the ended server stays to be waited for by the guard, which reads its peak RSS.
        if os.waitid(os.P_PID, server.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return "", Outcome(0, 0, 0, "", "did not mount")
        if time.monotonic() > deadline:
            return "", Outcome(0, 0, 0, "", f"timed out ({guard.timeout:.0f} s)", limit=True)
        if time.monotonic() - looked > POLL_SECONDS:
            looked = time.monotonic()
            if sessions_rss([server.pid]) > guard.max_rss:
                return "", Outcome(0, 0, 0, "", over(guard.max_rss), limit=True)
        time.sleep(0.01)
    up = time.perf_counter() - started
    # The first stat and listing are answered by the serving process while the guard does not watch it: run them
    # in a guarded process of their own (a server building a whole tree is then killed at the limit).
    looked_at = guard.run([*THIS, "--step", "stat", "--path", str(mountpoint / path)], also=[server.pid])
    if looked_at.failure is not None:
        return "", looked_at
    times = json.loads(looked_at.stdout.splitlines()[-1])
    shown = f"{up:.2f} / {times['stat']:.3f} / {times['ls']:.3f} s ({times['listed']:,})"
    if not whole:
        return shown + " / not walked", looked_at
    walked = guard.run(["sh", "-c", f"find '{mountpoint}' -type f | wc -l"], also=[server.pid])
    files = int(walked.stdout.strip() or 0)
    return shown + f" / {walked.seconds:.2f} s ({files:,})", walked


def why_no_mount() -> str | None:
    """Why this machine cannot mount with FUSE (None: it can)."""
    from datamount.mount import check_fuse
    from datamount.storage import MountError

    try:
        check_fuse()
    except MountError as exc:
        return str(exc).split(":", 1)[-1].strip()[:60]
    return None


# ---------------------------------------------------------------------------- steps in a fresh process


def step_reader(store: str, row: int) -> dict[str, float]:
    """Import, open, first sample and row ``row`` of ``reader``, in seconds."""
    started = time.perf_counter()
    from datamount.readers import reader

    imported = time.perf_counter()
    opened_reader = reader(DATASET, store=store)
    opened = time.perf_counter()
    next(iter(opened_reader()))
    first = time.perf_counter()
    opened_reader[row]
    done = time.perf_counter()
    return {"import": imported - started, "open": opened - imported, "first": first - opened, "row": done - first}


def step_urls(store: str, path: str, whole: bool) -> dict[str, float]:
    """One path's ``info`` through ``datamount://`` in a fresh filesystem, ``ls`` of its folder, then a ``find`` of
    the version (``whole``) or of that folder."""
    import fsspec

    fs = fsspec.filesystem("datamount", store=store, cache=False)
    root = f"datamount://_/{DATASET}@latest"
    folder = f"{root}/{path.rpartition('/')[0]}" if "/" in path else root
    started = time.perf_counter()
    fs.info(f"{root}/{path}")
    looked_up = time.perf_counter()
    fs.ls(folder, detail=False)
    listed = time.perf_counter()
    paths = fs.find(root if whole else folder)
    found = time.perf_counter()
    result = sys.getsizeof(paths) + sum(map(sys.getsizeof, paths))  # what the caller holds: the list and its strings
    return {
        "info": looked_up - started,
        "ls": listed - looked_up,
        "find": found - listed,
        "files": len(paths),
        "result_mb": result / 1e6,
    }


def step_stat(path: str) -> dict[str, float]:
    """``os.stat`` of ``path`` (in a mount), then ``os.listdir`` of its folder: seconds, and the names listed."""
    started = time.perf_counter()
    os.stat(path)
    stated = time.perf_counter()
    names = os.listdir(os.path.dirname(path))
    return {"stat": stated - started, "ls": time.perf_counter() - stated, "listed": len(names)}


def synthetic_line(i: int, path_of: Callable[[int], str] = image_path) -> str:
    return f"{path_of(i)}\t{i % LABELS}\n"


def synthesize(
    store_url: str, rows: int, shard_rows: int, path_of: Callable[[int], str] = image_path
) -> dict[str, float]:
    """A packed image version of ``rows`` rows in the (new, local) store ``store_url``, straight in the store's
    format, no files: one shard of ``shard_rows`` rows (and one of the rest) named by the manifest once per that
    many rows, the normalised list and its blocks, and the entries given to ``catalog.commit`` lazily, which makes
    the indexes (by path; a packed version has no row index) as an upload's commit does.

    Row ``i``'s file holds the 32 bytes of file ``i % shard_rows`` (:func:`file_bytes`), so that each entry's size
    and xxh3-64 (an entry of ``upload --pack``: no sha256, manifest format 8) are those of the bytes the shard holds
    for its row; its label is ``i % LABELS``, as in the shard. The
    shards' ``path`` column names the first shard's rows (it is not what any reader finds a row by). ``path_of``:
    row ``i``'s path (:func:`image_path`, folders of 1,000 files; another must sort as the rows do)."""
    from datamount.datasets import catalog, locks
    from datamount.datasets.manifest import PACKED_DIGEST_FORMAT_VERSION
    from datamount.storage import open_store
    from datamount.storage.checksums import xxh3

    period = min(rows, shard_rows)
    if period % LABELS and period != rows:
        raise ValueError(f"--synthetic-shard-rows must be a multiple of {LABELS}")
    store = open_store(store_url, check=False)
    timed: dict[str, float] = {}
    started = time.perf_counter()
    digests = [xxh3(file_bytes(i)) for i in range(period)]
    with locks.writing(store, DATASET, purpose="synthesize"):
        shards = synthetic_shards(store, rows, period)
        timed["shards"] = time.perf_counter() - started
        draft = synthetic_list(store, rows, shards, path_of)
        timed["list"] = time.perf_counter() - started - timed["shards"]
        files = SyntheticFiles(rows, digests, path_of)
        draft = dataclasses.replace(draft, files=files, format_version=PACKED_DIGEST_FORMAT_VERSION)
        committed = catalog.commit(store, draft)
        timed["commit"] = time.perf_counter() - started - timed["shards"] - timed["list"]
    timed["version"] = committed.version
    return timed


class SyntheticFiles(Sequence["FileEntry"]):
    """The file entries of a synthetic version, made as they are iterated (in path order, which is row order)."""

    def __init__(self, rows: int, digests: list[str], path_of: Callable[[int], str] = image_path) -> None:
        self.rows, self.digests, self.path_of = rows, digests, path_of

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> FileEntry:  # type: ignore[override]
        from datamount.datasets.manifest import FileEntry

        return FileEntry(self.path_of(i), FILE_BYTES, "", self.digests[i % len(self.digests)])

    def __iter__(self) -> Iterator[FileEntry]:
        from datamount.datasets.manifest import FileEntry

        digests, period = self.digests, len(self.digests)
        if self.path_of is not image_path:
            yield from (FileEntry(self.path_of(i), FILE_BYTES, "", digests[i % period]) for i in range(self.rows))
            return
        for start in range(0, self.rows, 1000):
            folder = f"img/{start // 1000:05d}/"
            yield from (
                FileEntry(f"{folder}{i:09d}.bin", FILE_BYTES, "", digests[i % period])
                for i in range(start, min(start + 1000, self.rows))
            )


def synthetic_shards(store: Any, rows: int, period: int) -> list[Any]:
    """One shard of ``period`` rows (and one of the ``rows % period`` left), written by datamount's shard writer in
    row groups cut as ``upload --pack`` cuts them; the manifest's shards: the first once per ``period`` rows."""
    from datamount.datasets.manifest import Kind
    from datamount.datasets.shard_writer import (
        DEFAULT_ROW_GROUP_BYTES,
        FIRST_ROW_GROUP_BYTES,
        ShardWriter,
        list_schema,
    )  # fmt: skip

    schema = list_schema(DATASET, Kind.IMAGE, ["file", "label"])
    writer = ShardWriter(store, DATASET, schema, shard_bytes=1 << 40)
    row_bytes = FILE_BYTES + 3  # a row's file and label, as the upload's cut counts them
    first, following = FIRST_ROW_GROUP_BYTES // row_bytes, DEFAULT_ROW_GROUP_BYTES // row_bytes
    try:
        for count in (period, rows % period):
            start = 0
            while start < count:
                stop = min(start + (first if start == 0 else following), count)
                numbers = range(start, stop)
                writer.add_group(
                    [
                        [file_bytes(i) for i in numbers],
                        [str(i % LABELS) for i in numbers],
                        [image_path(i) for i in numbers],
                    ]
                )
                start = stop
            if count:
                writer.end_shard()
        written = writer.close()
    except BaseException:
        writer.abort()
        raise
    return [written[0]] * (rows // period) + written[1:]


def synthetic_list(store: Any, rows: int, shards: list[Any], path_of: Callable[[int], str] = image_path) -> Any:
    """The normalised list of ``rows`` synthetic rows, written as a stream straight into the (local) store's lists
    with its blocks; the draft that names it."""
    import hashlib

    from datamount.datasets import layout
    from datamount.datasets.list_blocks import ListBlocksWriter
    from datamount.datasets.manifest import Kind, Manifest

    folder = store.local_path(f"{layout.dataset_folder(DATASET)}/lists")
    if folder is None:
        raise ValueError("a synthetic version is written into a local store")
    os.makedirs(folder, exist_ok=True)
    blocks, digest, size = ListBlocksWriter(), hashlib.sha256(), 0
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as out:
        try:
            for start in range(0, rows, 64_000):
                lines = [synthetic_line(i, path_of).encode() for i in range(start, min(start + 64_000, rows))]
                for piece in blocks.add(lines):
                    digest.update(piece)
                    size += len(piece)
                    out.write(piece)
        except BaseException:
            os.remove(out.name)
            raise
    sha256 = digest.hexdigest()
    draft = Manifest(
        name=DATASET, kind=Kind.IMAGE, columns=["file", "label"], rows=rows, list_sha256=sha256, list_size=size,
        list_blocks=blocks.finish(), source="synthetic.list", objects=False, shards=shards,
    )  # fmt: skip
    os.rename(out.name, store.local_path(layout.list_path(draft)))
    return draft


# -------------------------------------------------------------------------------------------------- main


@contextlib.contextmanager
def generated(folder: Path, layout: str, rows: int, pool: int) -> Iterator[Source]:
    """The source of ``layout`` at ``rows`` rows in a fresh folder under ``folder``, removed after."""
    work = Path(tempfile.mkdtemp(prefix=f"datamount-scale-{rows}-", dir=folder))
    try:
        yield make_images(work, rows, pool) if layout in IMAGE_LAYOUTS else make_text(work, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_size(
    folder: Path, layouts: Sequence[str], rows: int, guard: Guard, seed: int, pool: int = 0
) -> Iterator[Figures]:
    """Every layout at ``rows`` rows, each as soon as it is measured; the image layouts share one source."""
    for kind in ("image", "text"):
        chosen = [
            layout for layout in layouts if layout != "synthetic" and (layout in IMAGE_LAYOUTS) == (kind == "image")
        ]
        fitting = [layout for layout in chosen if fits(folder, layout, rows, chosen, pool)]
        if not fitting:
            continue
        with generated(folder, fitting[0], rows, pool) as source:
            for layout in fitting:
                with fresh_store(folder, layout) as store:
                    yield measure(layout, source, store, guard, seed)


@contextlib.contextmanager
def fresh_store(folder: Path, layout: str) -> Iterator[Path]:
    store = Path(tempfile.mkdtemp(prefix=f"datamount-scale-store-{layout}-", dir=folder))
    try:
        yield store
    finally:
        shutil.rmtree(store, ignore_errors=True)


def fits(folder: Path, layout: str, rows: int, chosen: Sequence[str], pool: int = 0) -> bool:
    need = max(disk_needed(one, rows, pool) for one in chosen) + DISK_MARGIN
    free = shutil.disk_usage(folder).free
    if need > free:
        print(f"{layout} at {rows:,} rows left out: needs {need / 1e9:.1f} GB of disk, {free / 1e9:.1f} GB free")
    return need <= free


@contextlib.contextmanager
def ext4_image(size: str) -> Iterator[Path]:
    """An ext4 image of ``size`` bytes (``auto``: half the free disk, the most allowed) in the system's temporary
    folder, made with ``-O inline_data`` and mounted ``nodiscard`` on a temporary folder (root only); unmounted and
    deleted on the way out, whatever ended the run."""
    where = Path(tempfile.gettempdir())
    half = shutil.disk_usage(where).free // 2
    wanted = half if size == "auto" else parse_size(size)
    if wanted > half:
        sys.exit(f"--ext4-image {size}: more than half the free disk of {where} ({half / 1e9:.1f} GB)")
    image = where / f"datamount-scale-{os.getpid()}.ext4"
    mountpoint = Path(tempfile.mkdtemp(prefix="datamount-scale-ext4-"))
    try:
        with open(image, "wb") as sparse:
            sparse.truncate(wanted)
        # 4 KiB of image per inode: a file of 32 bytes takes an inode and no block (inline_data), and 10^6 image
        # rows unpacked take two million (source and objects): 15 GB holds 3.7 million.
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-O", "inline_data", "-i", "4096", "-m", "0", "-E", "nodiscard", str(image)],
            check=True,
        )
        subprocess.run(["mount", "-o", "loop,nodiscard", str(image), str(mountpoint)], check=True)
        print(f"ext4 image of {wanted / 1e9:.1f} GB ({half / 1e9:.1f} GB is half the free disk) at {mountpoint}")
        yield mountpoint
    finally:
        if os.path.ismount(mountpoint) and subprocess.run(["umount", str(mountpoint)], check=False).returncode:
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)  # busy: detached, freed when let go
        with contextlib.suppress(OSError):
            mountpoint.rmdir()
        image.unlink(missing_ok=True)


def stopped_by_signal(number: int, _frame: object) -> None:
    """SIGTERM or SIGHUP: leave by the ``finally`` clauses (the ext4 image unmounted and deleted)."""
    raise SystemExit(128 + number)


COLUMNS = (
    "command start", "upload", "upload RSS", "manifest B/row", "index B/row", "info", "ls",
    "reader import/open/first/[i]",
    "reader RSS", "url info/ls/find", "url RSS", "diff", "verify", "mount up/stat/ls/find", "mount RSS",
)  # fmt: skip


def warm_up(guard: Guard) -> None:
    """Import, untimed, what the steps import, so that no step pays for compiling it to bytecode."""
    modules = "datamount.cli.main, datamount.readers, datamount.urlfs, datamount.mount, fsspec"
    for command in ([*DATAMOUNT, "--version"], [sys.executable, "-c", f"import {modules}"]):
        guard.run(command)


def print_figures(figures: Figures) -> None:
    print(f"\n{figures.layout}, {figures.rows:,} rows (load {figures.load:.1f})", flush=True)
    for column in COLUMNS:
        if column in figures.cells:
            print(f"  {column:<30} {figures.cells[column]}", flush=True)


def print_table(results: Sequence[Figures]) -> None:
    print("\n| rows | layout | load | " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * (len(COLUMNS) + 3))
    for figures in results:
        cells = [figures.cells.get(column, "") for column in COLUMNS]
        print(f"| {figures.rows:,} | {figures.layout} | {figures.load:.1f} | " + " | ".join(cells) + " |")


def parse_size(text: str) -> int:
    units = {"GB": 10**9, "MB": 10**6, "G": 10**9, "M": 10**6}
    for unit, scale in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 rows of every default layout, for a smoke run")
    parser.add_argument("--rows", default="100000,1000000", help="row counts, comma-separated ('' for none)")
    parser.add_argument("--layouts", default=",".join(DEFAULT_LAYOUTS), help=f"of {', '.join(LAYOUTS[:-1])}")
    parser.add_argument(
        "--pool", type=int, default=0, help="image rows name a pool of this many files (0: each its own)"
    )
    parser.add_argument(
        "--synthetic", default="", help="row counts of synthetic packed image versions, comma-separated"
    )
    parser.add_argument("--synthetic-shard-rows", type=int, default=SYNTHETIC_SHARD_ROWS, help="rows of its one shard")
    parser.add_argument("--ext4-image", help="generate in an ext4 image of this size (e.g. 30GB, auto); root only")
    parser.add_argument("--max-rss", default="6GB", help="kill a step whose processes hold more (e.g. 6GB, 500MB)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a step may take")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random row read")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()), help="where data is generated")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--step", choices=["reader", "urls", "stat", "synthesize"], help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--folder-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step is not None:
        print(json.dumps(run_step(args)))
        return
    layouts = args.layouts.split(",") if args.layouts else []
    unknown = sorted(set(layouts) - set(LAYOUTS[:-1]))
    if unknown:
        parser.error(f"--layouts: unknown {', '.join(unknown)} (choose from {', '.join(LAYOUTS[:-1])})")
    try:
        sizes = [2000] if args.quick else [int(rows.replace("_", "")) for rows in args.rows.split(",") if rows]
        synthetic = [int(rows.replace("_", "")) for rows in args.synthetic.split(",") if rows]
        guard = Guard(parse_size(args.max_rss), args.timeout)
    except ValueError as exc:
        parser.error(f"--rows, --synthetic or --max-rss: {exc}")
    if min([*sizes, *synthetic, 1]) < 1 or guard.max_rss < 1 or args.pool < 0:
        parser.error("--rows, --synthetic and --max-rss must be positive, --pool not negative")
    signal.signal(signal.SIGTERM, stopped_by_signal)
    signal.signal(signal.SIGHUP, stopped_by_signal)
    with contextlib.ExitStack() as stack:
        folder = args.folder
        if args.ext4_image:
            folder = stack.enter_context(ext4_image(args.ext4_image))
            scratch = folder / "tmp"  # the steps' temporary files (a sort's spill, shards being written) there too
            scratch.mkdir()
            os.environ["TMPDIR"] = str(scratch)
            tempfile.tempdir = None
        results = run_all(args, folder, layouts, sizes, synthetic, guard)
    print_table(results)
    errors = [error for found in results for error in found.errors]
    if errors:
        sys.exit("steps failed:\n" + "\n".join(errors))


def run_step(args: argparse.Namespace) -> dict[str, float]:
    """One step in this fresh process (the benchmark runs itself with ``--step``)."""
    if args.step == "reader":
        return step_reader(args.store, args.row)
    if args.step == "urls":
        return step_urls(args.store, args.path, whole=not args.folder_only)
    if args.step == "stat":
        return step_stat(args.path)
    return synthesize(args.store, args.row, int(args.path))


def run_all(
    args: argparse.Namespace, folder: Path, layouts: Sequence[str], sizes: Sequence[int], synthetic: Sequence[int],
    guard: Guard,
) -> list[Figures]:  # fmt: skip
    """Every size of every layout, then every synthetic version, each printed (and written to ``--json``) as soon
    as it is measured."""
    warm_up(guard)
    results: list[Figures] = []

    def measured() -> Iterator[Figures]:
        for rows in sizes:
            yield from run_size(folder, layouts, rows, guard, args.seed, args.pool)
        for rows in synthetic:
            if not fits(folder, "synthetic", rows, ["synthetic"]):
                continue
            with fresh_store(folder, "synthetic") as store:
                yield measure_synthetic(rows, args.synthetic_shard_rows, store, guard, args.seed)

    for found in measured():
        print_figures(found)
        results.append(found)
        if args.json is not None:  # after each, so that a run stopped early keeps what it measured
            args.json.write_text(json.dumps([asdict(one) for one in results], indent=1), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
