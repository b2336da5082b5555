"""Dataset upload and read throughput against the same bytes moved directly by the backend's own fsspec filesystem.

    python benchmarks/bench_datasets.py [--quick] [--runs N] [--backend NAME ...]

An image dataset (4,000 files of ~110 KB of random bytes; 300 with ``--quick``) is uploaded to and read from each
backend (``local``; S3 on ``moto`` or SeaweedFS's ``weed mini`` (``seaweedfs``); and the project's test servers:
``gluster`` (FUSE mount), ``hdfs`` (2.7.3), ``ceph`` (RGW), ``gcs`` (emulator)):

- read: ``reader(name)`` over every sample vs the filesystem's ``cat`` of the same objects (many in flight where the
  filesystem is asynchronous), and vs a loop of ``cat_file`` one object at a time (on the first 500 objects);
- upload: ``upload`` vs the filesystem's ``put`` of the same files, each timed run to a fresh prefix so that
  everything is really sent.

Ratios above 1 mean datamount is faster. Medians of several runs, the compared operations taking turns.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import BACKENDS, Row, StoreOpener, interleaved_medians, print_rows

from datamount.datasets import layout
from datamount.datasets.rows import read_lines
from datamount.datasets.upload import upload
from datamount.readers.dataset import DatasetReader, reader

DATASET = "bench-images"
CLASSES = 10
MEAN_SIZE = 110_000
NAIVE_LOOP_OBJECTS = 500


def make_image_list(folder: Path, count: int, *, seed: int = 0) -> Path:
    """Write ``count`` image-like files of ~110 KB under ``folder`` and the ``.list`` naming them; return the list."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        label = i % CLASSES
        relative = f"images/class{label}/img{i:05d}.jpg"
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(rng.randint(MEAN_SIZE - 10_000, MEAN_SIZE + 10_000)))
        lines.append(f"{relative}\t{label}\n")
    list_file = folder / "train.list"
    list_file.write_text("".join(lines), encoding="utf-8")
    return list_file


def object_paths(samples: DatasetReader) -> tuple[list[str], list[int]]:
    """The full paths on the store's filesystem of the objects ``samples`` reads, in its order, and their sizes."""
    store = samples.store
    name = samples.manifest.name
    by_path = {entry.path: entry for entry in samples.manifest.files}
    entries = [by_path[row[0]] for row in read_lines(store, samples.manifest)]
    return [store.full_path(layout.object_path(name, entry.sha256)) for entry in entries], [e.size for e in entries]


def read_samples(samples: DatasetReader) -> int:
    """Iterate one epoch; return the bytes seen."""
    return sum(len(data) for data, *_ in samples())


def mb_per_second(total_bytes: int, seconds: float) -> float:
    return total_bytes / 1e6 / seconds


def bench_reads(setup: str, samples: DatasetReader, unchecked: DatasetReader, runs: int) -> list[Row]:
    """``reader`` vs the filesystem's ``cat`` of the same objects, vs a loop reading one object at a time, and vs
    ``reader(..., verify=False)`` (the cost of checking each object's sha256)."""
    fs = samples.store.fs
    paths, sizes = object_paths(samples)
    total = sum(sizes)
    few = paths[:NAIVE_LOOP_OBJECTS]
    few_bytes = sum(sizes[:NAIVE_LOOP_OBJECTS])

    def cat_each() -> None:
        for path in few:
            fs.cat_file(path)

    seconds = interleaved_medians(
        {
            "ours": lambda: read_samples(samples),
            "cat": lambda: fs.cat(paths),
            "cat_file": cat_each,
            "unchecked": lambda: read_samples(unchecked),
        },
        runs,
    )
    name = type(fs).__name__
    return [
        Row(setup, f"read {len(paths)} images", mb_per_second(total, seconds["ours"]),
            mb_per_second(total, seconds["cat"]), "MB/s", f"{name}.cat"),
        Row(setup, f"read {len(paths)} images", mb_per_second(total, seconds["ours"]),
            mb_per_second(few_bytes, seconds["cat_file"]), "MB/s", f"cat_file loop ({len(few)})"),
        Row(setup, f"read {len(paths)} images", mb_per_second(total, seconds["ours"]),
            mb_per_second(total, seconds["unchecked"]), "MB/s", "reader(verify=False)"),
    ]  # fmt: skip


def bench_uploads(setup: str, list_file: Path, open_at: StoreOpener, runs: int) -> Row:
    """``upload`` vs the filesystem's ``put`` of the same files, each run to a prefix that holds nothing yet."""
    relative = [line.split("\t")[0] for line in list_file.read_text(encoding="utf-8").splitlines()]
    local = [str(list_file.parent / path) for path in relative]
    total = sum(os.path.getsize(path) for path in local)
    counter = itertools.count()
    current = []

    def fresh_prefix() -> None:
        for store in current:
            store.remove("", recursive=True, missing_ok=True)
        current[:] = [open_at(f"upload-{next(counter)}")]
        store = current[0]
        for folder in sorted({os.path.dirname(path) for path in relative}):  # put() of a list makes no folders
            store.fs.makedirs(store.full_path(folder), exist_ok=True)

    def ours() -> None:
        upload(list_file, DATASET, store=current[0])

    def reference() -> None:
        store = current[0]
        store.fs.put(local, [store.full_path(path) for path in relative])

    seconds = interleaved_medians({"ours": ours, "put": reference}, runs, setup=fresh_prefix)
    fresh_prefix()
    name = type(current[0].fs).__name__
    return Row(setup, f"upload {len(local)} images", mb_per_second(total, seconds["ours"]),
               mb_per_second(total, seconds["put"]), "MB/s", f"{name}.put")  # fmt: skip


def bench_backend(backend: str, list_file: Path, runs: int) -> list[Row]:
    """Reads, then uploads, on a fresh server (or folder) of ``backend``."""
    with BACKENDS[backend]() as open_at:
        store = open_at("read")
        upload(list_file, DATASET, store=store)
        rows = bench_reads(backend, reader(DATASET, store), reader(DATASET, store, verify=False), runs)
        rows.append(bench_uploads(backend, list_file, open_at, runs))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 images, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument(
        "--backend", action="append", choices=sorted(BACKENDS), help="backends to run on (default: moto and local)"
    )
    parser.add_argument("--count", type=int, help="images in the dataset (default 4,000; 300 with --quick)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count = args.count or (300 if args.quick else 4000)

    rows = []
    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp:
        list_file = make_image_list(Path(tmp) / "source", count)
        for backend in args.backend or ["moto", "local"]:
            rows += bench_backend(backend, list_file, args.runs)

    print_rows(rows, f"Datasets vs fsspec, {count} images of ~{MEAN_SIZE // 1000} KB, median of {args.runs} runs")


if __name__ == "__main__":
    main()
