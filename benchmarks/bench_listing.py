"""A flat folder of a million files listed through the mount: the serving process's peak RSS while
``ls -f MNT/flat | wc -l`` runs, and the listing's wall time.

    python benchmarks/bench_listing.py [--rows 1000000] [--store DIR] [--repeat 1] [--json FILE]

The version is synthesized as ``bench_scale.py --synthetic`` makes one (a packed image version written straight into
the store's format, no files: its rows name one shard of 1,000 rows again and again), but its rows' paths are all in
one folder, ``flat/000000123.bin``, each its own. ``--store DIR``: a local store kept between runs (made, with the
version, where it has none), so that two builds of datamount are measured on the same version, each run of this
script with the ``datamount`` it imports (``PYTHONPATH``); without it, a temporary one, removed at the end.

Then ``datamount mount NAME MNT --foreground`` in a process of its own, up until it answers; the listing, run
``--repeat`` times, each in a fresh mount (the kernel keeps the names it was given: a second listing would not ask);
the serving process's resident memory when it answers, and its peak (``VmHWM``) after each listing. ``--opens N``:
then N of the folder's files opened and read, chosen at random (seeded), in the same mount: each a file the kernel
holds from the listing, whose node the serving process may have to make again (a shuffled pass after a scan); their
mean time, and the peak after them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import memory_mb
from bench_scale import DATAMOUNT, DATASET, synthesize

from datamount import datasets
from datamount.datasets.layout import dataset_folder

FOLDER = "flat"
SHARD_ROWS = 1_000


def flat_path(i: int) -> str:
    return f"{FOLDER}/{i:09d}.bin"


def listed_once(store: Path, rows: int, opens: int) -> dict[str, float]:
    """Mount the version, list its folder with ``ls -f | wc -l``, open and read ``opens`` of its ``rows`` files at
    random, unmount: the figures."""
    with tempfile.TemporaryDirectory(prefix="datamount-bench-listing-") as mountpoint:
        command = [*DATAMOUNT, "mount", DATASET, mountpoint, "--store", str(store), "--foreground", "--no-cache"]
        started = time.perf_counter()
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            while not os.path.ismount(mountpoint):
                if server.poll() is not None:
                    raise RuntimeError(f"did not mount: {server.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
                time.sleep(0.01)
            figures = {"up_s": time.perf_counter() - started, "rss_up_mb": memory_mb("VmRSS", server.pid)}
            started = time.perf_counter()
            counted = subprocess.run(
                ["sh", "-c", f"ls -f '{mountpoint}/{FOLDER}' | wc -l"], capture_output=True, text=True, check=True
            )
            figures["ls_s"] = time.perf_counter() - started
            figures["names"] = int(counted.stdout)
            figures["peak_mb"] = memory_mb("VmHWM", server.pid)
            figures["rss_after_mb"] = memory_mb("VmRSS", server.pid)
            if opens:
                chosen = random.Random(0).sample(range(rows), opens)
                started = time.perf_counter()
                for row in chosen:
                    Path(mountpoint, flat_path(row)).read_bytes()
                figures["open_ms"] = (time.perf_counter() - started) / opens * 1e3
                figures["peak_after_opens_mb"] = memory_mb("VmHWM", server.pid)
        finally:
            subprocess.run([*DATAMOUNT, "unmount", mountpoint], capture_output=True, check=False)
            server.wait(timeout=120)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--store", type=Path, help="a local store kept between runs (default: a temporary one)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--opens", type=int, default=0, help="files opened and read at random after each listing")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    if args.rows < SHARD_ROWS or args.rows % SHARD_ROWS or args.repeat < 1 or not 0 <= args.opens <= args.rows:
        parser.error(f"--rows must be a multiple of {SHARD_ROWS}, --repeat at least 1, --opens 0 to --rows")
    store = args.store or Path(tempfile.mkdtemp(prefix="datamount-bench-listing-store-"))
    try:
        made = {}
        if not (store / dataset_folder(DATASET)).exists():
            store.mkdir(parents=True, exist_ok=True)
            made = synthesize(str(store), args.rows, SHARD_ROWS, flat_path)
        runs = [listed_once(store, args.rows, args.opens) for _ in range(args.repeat)]
        result = {
            "datamount": str(Path(datasets.__file__ or "").parent.parent),
            "rows": args.rows,
            "made": made,
            "runs": runs,
        }
        print(json.dumps(result))
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    finally:
        if args.store is None:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
