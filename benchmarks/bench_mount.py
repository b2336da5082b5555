"""A mounted version walked by shell tools, against ``reader(name)`` reading the same files.

Usage::

    python benchmarks/bench_mount.py [--quick] [--runs N] [--backend NAME ...] [--count N] [--order ORDER]

An image dataset (2,000 files of 20-100 KB of random bytes in 10 class folders, listed in a shuffled ``.list``, or a
class-sorted one with ``--order sorted``; 40 files with ``--quick``) is uploaded unpacked, packed (``upload --pack``:
shards only) and packed after its upload (``upload`` then ``pack``: objects and shards) to each backend (``local`` and
``moto`` by default; ``ceph`` (RGW) and the others of the harness with ``--backend``). Each round, for each of the
three versions in turn, every action in a process of its own:

- ``reader``: ``reader(name, cache=False)`` reading every row (each file's bytes checked) in a fresh process, timed
  from the reader's first row request (opening it is shown apart): the reference;
- ``walk x1``: ``find MNT -type f -print0 | xargs -0 cat > /dev/null`` in a shell, as users do, over a fresh mount
  (``cache=False``: every byte comes from the store, checked), timed from the start of the walk; the time ``mount()``
  took to answer is shown apart;
- ``walk x4``: four such shells at once on a fresh mount, each walking a quarter of the class folders;
- on ``local`` only, the same two walks over the source folder the dataset was uploaded from (its layout is the
  mount's): what the disk and the shell tools alone cost.

The page cache is dropped before each action when run as root (otherwise each mount, being fresh, starts with an
empty kernel cache of its own, but the store's files may be cached); with ``--quick``, once at the start.

Figures: files/s and MB/s; the ratio walk / reader in files/s (target >= 0.8 on S3, for x1 and x4) and mount walk /
source-folder walk; CPU seconds per 1,000 files of the process that reads the store (the mount's serving process for
a walk, the shells' own CPU not counted; the reader's process for ``reader``), and of the store's server processes.
Medians of ``--runs`` interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import posixpath
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import BACKENDS, Row, print_rows, processes_cpu_seconds

if TYPE_CHECKING:
    from datamount.storage import Store

CLASSES = 10
SIZES = (20_000, 100_000)
WALKERS = 4
#: Each version uploaded: its dataset name, whether ``upload`` packs it, and whether ``pack`` adds shards after.
VERSIONS = {
    "unpacked": ("images", False, False),
    "packed": ("images-packed", True, False),
    "packed after": ("images-both", False, True),
}
#: Where the walks over the source folder are listed (``local`` only).
SOURCE = "source folder"
READER = "reader"
WALK_ONE = "walk x1"
WALK_MANY = f"walk x{WALKERS}"


@dataclass(frozen=True)
class Measured:
    """One action: its wall time, the files and bytes it read, the CPU seconds of the process that reads the store
    and of the store's servers (None where there is none), and its setup time (``mount()``, opening the reader)."""

    seconds: float
    files: float
    bytes: float
    cpu: float | None = None
    server_cpu: float | None = None
    setup: float | None = None

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds

    @property
    def mb_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds

    def per_thousand(self, cpu: float | None) -> float | None:
        return None if cpu is None else cpu * 1000 / self.files


def median_measured(found: list[Measured]) -> Measured:
    def median(name: str) -> float | None:
        values = [getattr(one, name) for one in found]
        return None if values[0] is None else statistics.median(values)

    return Measured(**{field.name: median(field.name) for field in fields(Measured)})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------- the data


def make_image_list(folder: Path, count: int, *, order: str, seed: int = 0) -> Path:
    """Write ``count`` files of random bytes under ``folder/images/classK/`` and the ``.list`` naming them, in
    ``order`` (``shuffled`` or ``sorted`` by class); return the list."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        label = i * CLASSES // count
        relative = f"images/class{label}/img{i:05d}.jpg"
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(*SIZES)))
        lines.append(f"{relative}\t{label}\n")
    if order == "shuffled":
        rng.shuffle(lines)
    list_file = folder / "train.list"
    list_file.write_text("".join(lines), encoding="utf-8")
    return list_file


def walker_folders(list_file: Path) -> dict[str, list[list[str]]]:
    """The folders (relative to the mount) each walker walks: one walker over everything; ``WALKERS`` over a share of
    the class folders each."""
    lines = list_file.read_text(encoding="utf-8").splitlines()
    classes = sorted({posixpath.dirname(line.split("\t")[0]) for line in lines})
    return {WALK_ONE: [[""]], WALK_MANY: [classes[i::WALKERS] for i in range(WALKERS)]}


def tree_amount(roots: list[Path]) -> tuple[int, int]:
    """The files under ``roots`` and their bytes."""
    files = size = 0
    for root in roots:
        for folder, _, names in os.walk(root):
            files += len(names)
            size += sum(os.path.getsize(os.path.join(folder, name)) for name in names)
    return files, size


def drop_caches() -> bool:
    """Write back and drop the page cache (root only); whether it was dropped."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------- the actions


def walk(groups: list[list[Path]]) -> float:
    """Seconds for one shell per group, all at once, to ``cat`` every file under the group's folders."""
    commands = [
        f"find {' '.join(shlex.quote(str(folder)) for folder in group)} -type f -print0 | xargs -0 cat > /dev/null"
        for group in groups
    ]
    started = time.perf_counter()
    shells = [subprocess.Popen(["bash", "-o", "pipefail", "-c", command]) for command in commands]
    codes = [shell.wait() for shell in shells]
    seconds = time.perf_counter() - started
    if any(codes):
        raise RuntimeError(f"a walk failed (exit statuses {codes}): {commands}")
    return seconds


def source_walk(source: Path, groups: list[list[str]]) -> Measured:
    """The walk over the source folder itself (no mount, no store)."""
    roots = [[source / folder for folder in group] for group in groups]
    seconds = walk(roots)
    return Measured(seconds, *tree_amount([root for group in roots for root in group]))


def mounted_walk(store: Store, name: str, groups: list[list[str]], server_pids: list[int], scratch: Path) -> Measured:
    """The walk over a fresh mount of ``name`` (no content cache), timed from its start; ``mount()``'s time apart."""
    from datamount.mount import mount, unmount

    mountpoint = Path(tempfile.mkdtemp(prefix="mnt-", dir=scratch))
    started = time.perf_counter()
    mounted = mount(name, mountpoint, store=store, cache=False, log_file=scratch / "mount.log")
    setup = time.perf_counter() - started
    try:
        serving, server = processes_cpu_seconds([mounted.pid]), processes_cpu_seconds(server_pids)
        roots = [[mountpoint / folder for folder in group] for group in groups]
        seconds = walk(roots)
        cpu = processes_cpu_seconds([mounted.pid]) - serving
        server_cpu = processes_cpu_seconds(server_pids) - server if server_pids else None
        files, size = tree_amount([root for group in roots for root in group])
    finally:
        unmount(mountpoint)
        _wait_gone(mounted.pid)
        mountpoint.rmdir()
    return Measured(seconds, files, size, cpu, server_cpu, setup)


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Wait for the serving process to exit, so that it takes no CPU from the next action."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def reader_in_process(store: Store, name: str, server_pids: list[int]) -> Measured:
    """``reader(name)`` over every row, in a fresh process (the store handed to it through a pipe)."""
    server = processes_cpu_seconds(server_pids)
    done = subprocess.run(
        [sys.executable, __file__, "--child"], input=pickle.dumps((store, name)), capture_output=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the reader's process failed: {done.stderr.decode(errors='replace')[-2000:]}")
    found = json.loads(done.stdout)
    server_cpu = processes_cpu_seconds(server_pids) - server if server_pids else None
    return Measured(found["seconds"], found["files"], found["bytes"], found["cpu"], server_cpu, found["open"])


def read_child() -> dict[str, float]:
    """In the reader's process: read every row of the dataset named on stdin, with its store."""
    store, name = pickle.loads(sys.stdin.buffer.read())
    from datamount.readers import reader

    cpu, started = time.process_time(), time.perf_counter()
    samples = reader(name, store, cache=False)
    opened = time.perf_counter()
    files = size = 0
    for data, *_ in samples():
        files += 1
        size += len(data)
    ended = time.perf_counter()
    return {
        "seconds": ended - opened,
        "open": opened - started,
        "files": files,
        "bytes": size,
        "cpu": time.process_time() - cpu,
    }


# ---------------------------------------------------------------------------------------------------- the rounds


def bench_backend(
    name: str, list_file: Path, runs: int, scratch: Path, *, drop_each: bool
) -> dict[tuple[str, str], Measured]:
    """Every action on a fresh server (or folder) of backend ``name``, ``runs`` rounds, taking turns (the page cache
    dropped before each when ``drop_each``); medians."""
    from datamount.datasets import pack, upload

    groups = walker_folders(list_file)
    with BACKENDS[name]() as backend:
        store = backend.open("mount")
        pids = backend.server_pids
        actions: dict[tuple[str, str], Callable[[], Measured]] = {}
        for version, (dataset, packed, packed_after) in VERSIONS.items():
            upload(list_file, dataset, store=store, packed=packed)
            if packed_after:
                pack(dataset, store=store)
            actions[version, READER] = partial(reader_in_process, store, dataset, pids)
            for walker in (WALK_ONE, WALK_MANY):
                actions[version, walker] = partial(mounted_walk, store, dataset, groups[walker], pids, scratch)
        if name == "local":
            for walker in (WALK_ONE, WALK_MANY):
                actions[SOURCE, walker] = partial(source_walk, list_file.parent, groups[walker])
        found: dict[tuple[str, str], list[Measured]] = {key: [] for key in actions}
        for _ in range(runs):
            for key, action in actions.items():
                if drop_each:
                    drop_caches()
                found[key].append(action())
    return {key: median_measured(measured) for key, measured in found.items()}


def figures_table(results: dict[str, dict[tuple[str, str], Measured]]) -> None:
    print("\nFigures (CPU s per 1k files: the process reading the store, i.e. the mount's serving process or the")
    print("reader's; and the store's servers; setup: mount() until it answers, or opening the reader)")
    header = (
        f"{'backend':<8} {'version':<14} {'action':<8} {'files':>6} {'MB':>7} {'seconds':>8} {'files/s':>9} "
        f"{'MB/s':>8} {'CPU/1k':>7} {'srv/1k':>7} {'setup s':>8}"
    )
    print(header)
    print("-" * len(header))

    def shown(value: float | None, width: int, digits: int) -> str:
        return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    for backend, found in results.items():
        for (version, action), one in found.items():
            print(
                f"{backend:<8} {version:<14} {action:<8} {one.files:>6.0f} {one.bytes / 1e6:>7.1f} "
                f"{one.seconds:>8.2f} {one.files_per_second:>9.0f} {one.mb_per_second:>8.1f} "
                f"{shown(one.per_thousand(one.cpu), 7, 3)} {shown(one.per_thousand(one.server_cpu), 7, 3)} "
                f"{shown(one.setup, 8, 2)}"
            )


def ratio_rows(results: dict[str, dict[tuple[str, str], Measured]]) -> list[Row]:
    """Each mount walk against ``reader`` of the same version, and on ``local`` against the source folder's walk."""
    rows = []

    def row(backend: str, operation: str, ours: Measured, reference: Measured, reference_name: str) -> Row:
        return Row(
            backend, operation, ours.files_per_second, reference.files_per_second, "files/s", reference_name,
            "1k files", ours.per_thousand(ours.cpu), reference.per_thousand(reference.cpu),
            ours.per_thousand(ours.server_cpu), reference.per_thousand(reference.server_cpu),
        )  # fmt: skip

    for backend, found in results.items():
        for version in VERSIONS:
            for walker in (WALK_ONE, WALK_MANY):
                ours = found[version, walker]
                operation = f"{version}: {walker}"
                rows.append(row(backend, operation, ours, found[version, READER], "reader (fresh process)"))
                if (SOURCE, walker) in found:
                    rows.append(row(backend, operation, ours, found[SOURCE, walker], f"{walker} of the source folder"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 files, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="interleaved rounds per figure (median reported)")
    parser.add_argument(
        "--backend", action="append", choices=sorted(BACKENDS), help="backends to run on (default: local and moto)"
    )
    parser.add_argument("--count", type=int, help="files in the dataset (default 2,000; 40 with --quick)")
    parser.add_argument("--order", choices=("shuffled", "sorted"), default="shuffled", help="the list's order")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(read_child()))
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count = args.count or (40 if args.quick else 2000)
    if count < CLASSES:
        parser.error(f"--count must be at least {CLASSES} (one file per class folder)")
    from datamount.mount import check_fuse

    check_fuse()
    dropped = drop_caches()
    results = {}
    with tempfile.TemporaryDirectory(prefix="datamount-bench-mount-") as tmp:
        list_file = make_image_list(Path(tmp) / "source", count, order=args.order)
        for backend in args.backend or ["local", "moto"]:
            results[backend] = bench_backend(backend, list_file, args.runs, Path(tmp), drop_each=not args.quick)

    caches = "page cache NOT dropped (not root)"
    if dropped:
        caches = "page cache dropped once (--quick)" if args.quick else "page cache dropped before each action"
    print(
        f"\n{count} files of {SIZES[0] // 1000}-{SIZES[1] // 1000} KB in {CLASSES} class folders, {args.order} list; "
        f"mounts with cache=False; {caches}; medians of {args.runs} interleaved rounds"
    )
    figures_table(results)
    print_rows(ratio_rows(results), "Mount walks vs reader (target >= 0.8 on S3) and vs the source folder's walk")


if __name__ == "__main__":
    main()
