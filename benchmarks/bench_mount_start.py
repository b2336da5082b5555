"""The mount's start at scale: from ``datamount mount`` to the first ``stat`` answered, a folder of 1,000 files
listed, and the serving process's memory before any walk, for image versions of many rows (packed and unpacked),
measured with the ``datamount`` of one or more checkouts in the same run (to compare with an earlier one).

    python benchmarks/bench_mount_start.py [--rows 1000000] [--layouts packed,unpacked] [--folder DIR]
        [--checkout NAME=PYTHON ...] [--mounts-of NAME=PYTHON:OTHER ...]

The rows are ``benchmarks/bench_scale.py``'s: one file of 32 bytes per row, ``img/NNNNN/`` folders of 1,000 files.
Each ``--checkout`` (default: this one, as ``this``) uploads each layout into a store of its own with its own
``datamount upload`` (so a checkout from before an index was written uploads the format it knows), then serves it
with ``datamount mount NAME MNT --foreground``; each ``--mounts-of`` serves the stores that checkout ``OTHER``
uploaded with its own ``datamount`` (an earlier mount on the newer format). For each mount:

- ``up``: seconds from the start of ``datamount mount`` to the mount point being a mount;
- ``first stat``: seconds from the start to an ``os.stat`` of a file in it answered (the file of a random row),
  and the CPU seconds the serving process took to get there (the steady figure on a loaded machine);
- ``listing``: ``os.listdir`` of a folder of 1,000 files not listed yet, then ``os.stat`` of each of its files;
- ``read``: the first file's bytes read;
- the serving process's RSS then (before any walk), and its peak so far (``VmHWM``);
- with ``--find``: ``find MNT -type f | wc -l`` timed, and the serving process's RSS after it (it holds what the
  kernel holds: every file's node, unless the kernel forgets some).

Data goes to a temporary folder (``--folder``), checked for free disk first, and is removed at the end, also when a
step fails. Not a timed test: figures depend on the machine and its load (printed beside them).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import DATASET, DISK_MARGIN, disk_needed, image_path, make_images

#: Seconds a mount may take to answer its first stat (a tree built from 10^6 rows took about a minute).
MOUNT_TIMEOUT = 900.0
#: Seconds between two looks at the mount point while it starts.
POLL_SECONDS = 0.005


@dataclass(frozen=True)
class Checkout:
    """A ``datamount`` to measure: its name, its interpreter, and whose stores it mounts (its own, or another's)."""

    name: str
    python: str
    stores_of: str

    def command(self, *arguments: str) -> list[str]:
        return [self.python, "-m", "datamount.cli.main", *arguments]


def upload(checkout: Checkout, list_file: Path, layout: str, store: Path) -> float:
    """Upload the list with the checkout's ``datamount``; its wall time."""
    command = checkout.command("upload", str(list_file), DATASET, "--store", str(store), "--quiet")
    started = time.perf_counter()
    subprocess.run([*command, *(["--pack"] if layout == "packed" else [])], check=True, cwd="/")
    return time.perf_counter() - started


def memory_of(pid: int) -> tuple[float, float]:
    """The process's resident MB now and at its peak (``VmRSS``, ``VmHWM``)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_of(pid: int) -> float:
    """The process's CPU seconds so far (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_mount(checkout: Checkout, store: Path, rows: int, seed: int, *, find: bool) -> dict[str, float]:
    """Mount the store's version with the checkout's ``datamount``, and time its start, a stat, a listing and a
    read (see the module's documentation)."""
    rng = random.Random(seed)
    path = image_path(rng.randrange(rows))
    folder = str(Path(image_path(rng.randrange(rows // 1000) * 1000)).parent)
    with tempfile.TemporaryDirectory(prefix="datamount-bench-mnt-") as mountpoint, tempfile.TemporaryFile() as log:
        mounted = Path(mountpoint)
        started = time.perf_counter()
        server = subprocess.Popen(
            checkout.command("mount", DATASET, mountpoint, "--store", str(store), "--foreground", "--no-cache"),
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
        )
        try:
            while not os.path.ismount(mountpoint):
                if server.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"{checkout.name}: the mount ended: {log.read().decode()[-400:]}")
                if time.perf_counter() - started > MOUNT_TIMEOUT:
                    raise RuntimeError(f"{checkout.name}: no mount after {MOUNT_TIMEOUT:.0f} s")
                time.sleep(POLL_SECONDS)
            up = time.perf_counter() - started
            os.stat(mounted / path)
            first_stat = time.perf_counter() - started
            cpu = cpu_of(server.pid)
            before = time.perf_counter()
            names = os.listdir(mounted / folder)
            listed = time.perf_counter() - before
            for name in names:
                os.stat(mounted / folder / name)
            stats = time.perf_counter() - before - listed
            if len(names) != 1000:
                raise RuntimeError(f"{checkout.name}: {folder} holds {len(names)} files, not 1,000")
            before = time.perf_counter()
            data = (mounted / path).read_bytes()
            read = time.perf_counter() - before
            if len(data) != 32:
                raise RuntimeError(f"{checkout.name}: {path} read as {len(data)} bytes")
            rss, peak = memory_of(server.pid)
            walked = {}
            if find:
                before = time.perf_counter()
                found = subprocess.run(f"find '{mountpoint}' -type f | wc -l", shell=True, capture_output=True)
                walked = {
                    "find": time.perf_counter() - before,
                    "found": int(found.stdout),
                    "after": memory_of(server.pid)[0],
                }
        finally:
            subprocess.run(checkout.command("unmount", mountpoint), capture_output=True, check=False, cwd="/")
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return {
        "up": up,
        "first stat": first_stat,
        "cpu": cpu,
        "listing": listed,
        "stats": stats,
        "read": read,
        "rss": rss,
        "peak": peak,
        **walked,
    }


def shown(checkout: Checkout, layout: str, rows: int, figures: dict[str, float]) -> str:
    uploaded = f" (uploaded in {figures['upload']:.0f} s)" if "upload" in figures else ""
    return (
        f"{checkout.name:>10} {layout:>8} {rows:>10,} rows{uploaded}: up {figures['up']:.2f} s, first stat "
        f"{figures['first stat']:.3f} s (CPU {figures['cpu']:.2f} s), 1,000 files listed {figures['listing']:.3f} s "
        f"+ stat of each {figures['stats']:.3f} s, first read {figures['read']:.3f} s; server RSS "
        f"{figures['rss']:,.0f} MB (peak {figures['peak']:,.0f} MB), load {os.getloadavg()[0]:.1f}"
    ) + (
        f"; find {figures['find']:.1f} s ({figures['found']:,.0f} files), then RSS {figures['after']:,.0f} MB"
        if "find" in figures
        else ""
    )


def parse_checkouts(own: list[str], others: list[str]) -> list[Checkout]:
    """``NAME=PYTHON`` (each uploads its stores) and ``NAME=PYTHON:OTHER`` (mounts ``OTHER``'s) as checkouts."""
    checkouts = []
    for item in own or [f"this={sys.executable}"]:
        name, python = item.split("=", 1)
        checkouts.append(Checkout(name, python, name))
    for item in others:
        name, rest = item.split("=", 1)
        python, _, stores_of = rest.rpartition(":")
        checkouts.append(Checkout(name, python, stores_of))
    return checkouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="image rows (a multiple of 1,000)")
    parser.add_argument("--layouts", default="packed,unpacked", help="packed, unpacked or both")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()), help="where data is generated")
    parser.add_argument("--checkout", action="append", default=[], help="NAME=PYTHON: uploads and mounts")
    parser.add_argument("--mounts-of", action="append", default=[], help="NAME=PYTHON:OTHER: mounts OTHER's stores")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--find", action="store_true", help="then walk the mount with find, and its RSS after")
    args = parser.parse_args()
    if args.rows < 1000 or args.rows % 1000:
        parser.error("--rows must be a multiple of 1,000")
    layouts = args.layouts.split(",")
    checkouts = parse_checkouts(args.checkout, args.mounts_of)
    uploading = [one for one in checkouts if one.stores_of == one.name]
    need = sum(disk_needed(layout, args.rows) for layout in layouts) * len(uploading) + DISK_MARGIN
    free = shutil.disk_usage(args.folder).free
    if need > free:
        sys.exit(f"needs {need / 1e9:.1f} GB of disk in {args.folder}, {free / 1e9:.1f} GB free")
    work = Path(tempfile.mkdtemp(prefix="datamount-mount-start-", dir=args.folder))
    try:
        started = time.perf_counter()
        (work / "source").mkdir()
        source = make_images(work / "source", args.rows)
        print(f"{args.rows:,} files generated in {time.perf_counter() - started:.0f} s", flush=True)
        stores: dict[tuple[str, str], Path] = {}
        uploads: dict[tuple[str, str], float] = {}
        for checkout in uploading:
            for layout in layouts:
                store = stores[checkout.name, layout] = work / f"store-{checkout.name}-{layout}"
                uploads[checkout.name, layout] = upload(checkout, source.list_file, layout, store)
        for layout in layouts:
            for checkout in checkouts:
                store = stores[checkout.stores_of, layout]
                figures = measure_mount(checkout, store, args.rows, args.seed, find=args.find)
                with contextlib.suppress(KeyError):
                    figures["upload"] = uploads[checkout.name, layout]
                print(shown(checkout, layout, args.rows, figures), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
