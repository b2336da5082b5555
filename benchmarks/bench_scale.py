"""Scale: a version of 10^5 to 10^8 rows uploaded, described, opened, read at random and listed, each step in a
fresh process under a memory guard.

    python benchmarks/bench_scale.py [--quick] [--rows 100000,1000000] [--layouts packed,unpacked,text]
                                     [--max-rss 6GB] [--timeout 1800] [--folder DIR] [--json FILE]

Data is generated in a temporary folder (``--folder``, default the system's): for the image layouts, one file of 32
bytes per row (``img/00012/000012345.bin``, label ``i % 1000``; the rows are what is measured, not bytes), for
``text`` a text list (``s000012345<TAB>t345``), which fits 10^8 rows in 1.6 GB of disk. A layout whose files do not
fit the folder's free disk is left out with the reason (a row's file takes a 4 KiB block and an inode, once in the
source folder and once more as an object of an unpacked upload). Each layout goes to a local store of its own:

- ``packed``: ``datamount upload LIST NAME --pack`` of the image list (its files straight into shards);
- ``unpacked``: ``datamount upload LIST NAME`` of the image list (one object per file);
- ``text``: ``datamount upload LIST NAME --kind text`` (the list is the data); ``text-packed`` adds ``--pack``.

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
  the version (every file listed): times, entries and peak RSS;
- the mount: ``datamount mount NAME MNT --foreground`` until it answers, ``os.stat`` of row ``i``'s path through it,
  then ``find MNT -type f | wc -l``: times, entries, and the peak RSS of the serving process (where FUSE can run).

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
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: F401  (bytecode cached for the fresh processes, as in every benchmark)

DATASET = "scale"
FILE_BYTES = 32
LABELS = 1000
#: A file of the image layouts on disk: its 4 KiB block, its inode and its share of its folder's entries.
FILE_DISK_BYTES = 4096 + 512
#: Disk left free beyond what a layout needs (other processes share the disk).
DISK_MARGIN = 2 * 1024**3
LAYOUTS = ("packed", "unpacked", "text", "text-packed")
IMAGE_LAYOUTS = ("packed", "unpacked")
DEFAULT_LAYOUTS = ("packed", "unpacked", "text")
#: The dataset folder's parts that are not its manifest: file bytes, lists, shards, writers' locks.
NOT_MANIFEST = ("objects", "lists", "packs", "locks")
#: Seconds between two looks at a step's memory (each reads every /proc/PID/stat: 0.1 s took 8% of a core).
POLL_SECONDS = 0.5
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
    path and label of row ``i``."""

    list_file: Path
    rows: int
    kind: str
    path_and_label_bytes: float


def image_path(i: int) -> str:
    return f"img/{i // 1000:05d}/{i:09d}.bin"


def text_row(i: int) -> tuple[str, str]:
    return f"s{i:09d}", f"t{i % LABELS}"


def make_images(folder: Path, rows: int) -> Source:
    """``rows`` files of 32 bytes (each its own bytes) under ``folder`` and the ``.list`` naming them."""
    list_file = folder / "images.list"
    path_bytes = 0
    with open(list_file, "w", encoding="ascii") as listing:
        for start in range(0, rows, 1000):
            (folder / image_path(start)).parent.mkdir(parents=True)
            lines = []
            for i in range(start, min(start + 1000, rows)):
                relative = image_path(i)
                fd = os.open(folder / relative, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, f"{i:0{FILE_BYTES - 1}d}\n".encode())
                os.close(fd)
                lines.append(f"{relative}\t{i % LABELS}\n")
                path_bytes += len(relative) + len(str(i % LABELS))
            listing.writelines(lines)
    return Source(list_file, rows, "image", path_bytes / rows)


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


def disk_needed(layout: str, rows: int) -> int:
    """Bytes of disk a layout's data takes at ``rows`` rows (source and store), beyond the margin."""
    if layout in IMAGE_LAYOUTS:
        return rows * FILE_DISK_BYTES * (2 if layout == "unpacked" else 1) + rows * 40
    return rows * 25 * 3  # the list, its normalised copy in the store, shards or spare


# ---------------------------------------------------------------------------------------------- the steps


@dataclass
class Figures:
    """One layout at one size: what each step measured (shown as text where a step failed or hit a limit)."""

    layout: str
    rows: int
    load: float
    cells: dict[str, str] = field(default_factory=dict)
    values: dict[str, float | None] = field(default_factory=dict)
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


def measure(layout: str, source: Source, store: Path, guard: Guard, seed: int) -> Figures:
    figures = Figures(layout, source.rows, os.getloadavg()[0])
    start = guard.run([*DATAMOUNT, "--version"])
    figures.record("command start", start, f"{start.seconds:.2f} s (CPU {start.cpu_seconds:.2f})", start.seconds)
    uploaded = guard.run(upload_command(source, layout, store))
    rate = source.rows / uploaded.seconds
    shown = f"{uploaded.seconds:.1f} s (CPU {uploaded.cpu_seconds:.1f} s), {rate:,.0f}/s"
    figures.record("upload", uploaded, shown, uploaded.seconds)
    figures.values["upload CPU"] = uploaded.cpu_seconds if uploaded.failure is None else None
    figures.record("upload RSS", uploaded, f"{uploaded.peak_mb:,.0f} MB", uploaded.peak_mb)
    if uploaded.failure is not None:
        return figures
    per_row = manifest_bytes(store) / source.rows
    figures.cells["manifest B/row"] = f"{per_row:.2f}"
    figures.values["manifest B/row"] = per_row
    if source.kind == "image":  # a text version's rows are in its list, none in its manifest
        beyond = per_row - source.path_and_label_bytes
        figures.cells["manifest B/row"] += f" ({beyond:.1f} beyond path+label)"
        figures.values["beyond path+label"] = beyond
    for command in ("info", "ls"):
        name = [DATASET] if command == "info" else []
        done = guard.run([*DATAMOUNT, command, *name, "--store", str(store), "--json"])
        shown = f"{done.seconds:.2f} s (CPU {done.cpu_seconds:.2f}), {done.peak_mb:,.0f} MB"
        figures.record(command, done, shown, done.seconds)
    row = random.Random(seed).randrange(source.rows)
    path = image_path(row) if source.kind == "image" else source.list_file.name
    measure_reader(figures, guard, store, row)
    measure_urls(figures, guard, store, path)
    measure_mount(figures, guard, store, path)
    return figures


def measure_reader(figures: Figures, guard: Guard, store: Path, row: int) -> None:
    done = guard.run([*THIS, "--step", "reader", "--store", str(store), "--row", str(row)])
    found = json.loads(done.stdout.splitlines()[-1]) if done.failure is None else {}
    shown = "{import:.2f} / {open:.3f} / {first:.3f} / {row:.3f} s".format_map(found) if found else ""
    figures.record("reader import/open/first/[i]", done, shown, found.get("open"))
    figures.record("reader RSS", done, f"{done.peak_mb:,.0f} MB", done.peak_mb)


def measure_urls(figures: Figures, guard: Guard, store: Path, path: str) -> None:
    done = guard.run([*THIS, "--step", "urls", "--store", str(store), "--path", path])
    found = json.loads(done.stdout.splitlines()[-1]) if done.failure is None else {}
    shown = "{info:.3f} / {find:.2f} s ({files:,})".format_map(found) if found else ""
    figures.record("url info/find", done, shown, found.get("find"))
    figures.record("url RSS", done, f"{done.peak_mb:,.0f} MB", done.peak_mb)


def measure_mount(figures: Figures, guard: Guard, store: Path, path: str) -> None:
    reason = why_no_mount()
    if reason is not None:
        figures.cells["mount up/stat/find"] = figures.cells["mount RSS"] = f"n/a ({reason})"
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
            shown, walked = walk_mount(guard, server, Path(mountpoint), path, started)
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
        served = Outcome(
            0, cpu_seconds(usage), peak_mb, "", walked.failure or failure,
            walked.limit or failure is not None,
        )  # fmt: skip
        if served.failure is None and server.returncode != 0:
            served.failure = f"serving process exit {server.returncode}"
        figures.record("mount up/stat/find", served, shown, walked.seconds)
        memory = f"{served.peak_mb:,.0f} MB (CPU {served.cpu_seconds:.1f} s)"
        figures.record("mount RSS", served, memory, served.peak_mb)


def walk_mount(
    guard: Guard, server: subprocess.Popen[bytes], mountpoint: Path, path: str, started: float
) -> tuple[str, Outcome]:
    """Wait for the mount to answer, stat ``path`` in it and walk it: the figures and the walk's outcome."""
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
    before = time.perf_counter()
    try:
        os.stat(mountpoint / path)
    except OSError as exc:
        return "", Outcome(0, 0, 0, "", f"stat of {path}: {exc.strerror}")
    stat = time.perf_counter() - before
    walked = guard.run(["sh", "-c", f"find '{mountpoint}' -type f | wc -l"], also=[server.pid])
    files = int(walked.stdout.strip() or 0)
    return f"{up:.2f} / {stat:.3f} / {walked.seconds:.2f} s ({files:,})", walked


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


def step_urls(store: str, path: str) -> dict[str, float]:
    """One path's ``info`` through ``datamount://`` in a fresh filesystem, then a ``find`` of the version."""
    import fsspec

    fs = fsspec.filesystem("datamount", store=store, cache=False)
    root = f"datamount://_/{DATASET}@latest"
    started = time.perf_counter()
    fs.info(f"{root}/{path}")
    looked_up = time.perf_counter()
    files = len(fs.find(root))
    return {"info": looked_up - started, "find": time.perf_counter() - looked_up, "files": files}


# -------------------------------------------------------------------------------------------------- main


@contextlib.contextmanager
def generated(folder: Path, layout: str, rows: int) -> Iterator[Source]:
    """The source of ``layout`` at ``rows`` rows in a fresh folder under ``folder``, removed after."""
    work = Path(tempfile.mkdtemp(prefix=f"datamount-scale-{rows}-", dir=folder))
    try:
        yield make_images(work, rows) if layout in IMAGE_LAYOUTS else make_text(work, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_size(folder: Path, layouts: Sequence[str], rows: int, guard: Guard, seed: int) -> Iterator[Figures]:
    """Every layout at ``rows`` rows, each as soon as it is measured; the image layouts share one source."""
    for kind in ("image", "text"):
        chosen = [layout for layout in layouts if (layout in IMAGE_LAYOUTS) == (kind == "image")]
        fitting = [layout for layout in chosen if fits(folder, layout, rows, chosen)]
        if not fitting:
            continue
        with generated(folder, fitting[0], rows) as source:
            for layout in fitting:
                store = Path(tempfile.mkdtemp(prefix=f"datamount-scale-store-{layout}-", dir=folder))
                try:
                    yield measure(layout, source, store, guard, seed)
                finally:
                    shutil.rmtree(store, ignore_errors=True)


def fits(folder: Path, layout: str, rows: int, chosen: Sequence[str]) -> bool:
    need = max(disk_needed(one, rows) for one in chosen) + DISK_MARGIN
    free = shutil.disk_usage(folder).free
    if need > free:
        print(f"{layout} at {rows:,} rows left out: needs {need / 1e9:.1f} GB of disk, {free / 1e9:.1f} GB free")
    return need <= free


COLUMNS = (
    "command start", "upload", "upload RSS", "manifest B/row", "info", "ls", "reader import/open/first/[i]",
    "reader RSS", "url info/find", "url RSS", "mount up/stat/find", "mount RSS",
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
    parser.add_argument("--rows", default="100000,1000000", help="row counts, comma-separated")
    parser.add_argument("--layouts", default=",".join(DEFAULT_LAYOUTS), help=f"of {', '.join(LAYOUTS)}")
    parser.add_argument("--max-rss", default="6GB", help="kill a step whose processes hold more (e.g. 6GB, 500MB)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a step may take")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random row read")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()), help="where data is generated")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--step", choices=["reader", "urls"], help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step is not None:
        found = step_reader(args.store, args.row) if args.step == "reader" else step_urls(args.store, args.path)
        print(json.dumps(found))
        return
    layouts = args.layouts.split(",")
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        parser.error(f"--layouts: unknown {', '.join(unknown)} (choose from {', '.join(LAYOUTS)})")
    try:
        sizes = [2000] if args.quick else [int(rows.replace("_", "")) for rows in args.rows.split(",")]
        guard = Guard(parse_size(args.max_rss), args.timeout)
    except ValueError as exc:
        parser.error(f"--rows or --max-rss: {exc}")
    if min(sizes) < 1 or guard.max_rss < 1:
        parser.error("--rows and --max-rss must be positive")
    warm_up(guard)
    results = []
    for rows in sizes:
        for found in run_size(args.folder, layouts, rows, guard, args.seed):
            print_figures(found)
            results.append(found)
            if args.json is not None:  # after each, so that a run stopped early keeps what it measured
                args.json.write_text(json.dumps([asdict(one) for one in results], indent=1), encoding="utf-8")
    print_table(results)
    errors = [error for found in results for error in found.errors]
    if errors:
        sys.exit("steps failed:\n" + "\n".join(errors))


if __name__ == "__main__":
    main()
