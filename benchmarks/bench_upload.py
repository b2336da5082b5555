"""``upload --pack`` (files straight into shards) against the unpacked upload of the same small files (one object
each), on any backend.

    python benchmarks/bench_upload.py [--quick] [--runs N] [--count N] [--backend NAME ...]

The files are MNIST-sized (784 random bytes, 60,000 of them; 500 with ``--quick``). Each timed run uploads to a
prefix that holds nothing yet, so that everything is really sent. Reported: files/s of each, their ratio (target on
S3: >= 20x), and CPU seconds per 1,000 files in this process and in the server.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import BACKENDS, FreshStores, Measure, Row, costed_row, interleaved_costs, print_rows

from datamount.datasets.upload import upload

SIZE = 784
DATASET = "bench-small"


def make_small_files(folder: Path, count: int) -> Path:
    """``count`` files of 784 random bytes under ``folder`` and the ``.list`` naming them; the list's path."""
    lines = []
    for i in range(count):
        relative = f"data/{i // 1000:03d}/{i:06d}.bin"
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(SIZE))
        lines.append(f"{relative}\t{i % 10}\n")
    list_file = folder / "small.list"
    list_file.write_text("".join(lines), encoding="utf-8")
    return list_file


def bench_backend(name: str, list_file: Path, count: int, runs: int) -> list[Row]:
    with BACKENDS[name]() as backend:
        ready = FreshStores(backend, ["packed", "objects"])
        costs = interleaved_costs(
            {
                "packed": lambda: upload(list_file, DATASET, store=ready["packed"], packed=True),
                "objects": lambda: upload(list_file, DATASET, store=ready["objects"]),
            },
            runs,
            server_pids=backend.server_pids,
            setup=ready.renew,
        )
        ready.remove()
    files = Measure("files/s", 1, "1k files", 1000)
    amounts = {"packed": count, "objects": count}
    operation = f"upload {count} x {SIZE} B"
    return [costed_row(name, operation, costs, amounts, "packed", "objects", "upload, one object per file", files)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 files, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument("--count", type=int, help="files (default 60,000; 500 with --quick)")
    parser.add_argument(
        "--backend", action="append", choices=sorted(BACKENDS), help="backends to run on (default: moto and local)"
    )
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count = args.count or (500 if args.quick else 60000)
    rows = []
    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp:
        list_file = make_small_files(Path(tmp) / "source", count)
        for backend in args.backend or ["moto", "local"]:
            rows += bench_backend(backend, list_file, count, args.runs)
    print_rows(rows, f"upload --pack vs upload, {count} files of {SIZE} B, median of {args.runs} runs")


if __name__ == "__main__":
    main()
