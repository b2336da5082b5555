"""Dataset upload and read throughput against the same objects moved directly with fsspec / s3fs.

    python benchmarks/bench_datasets.py [--quick] [--runs N] [--server moto|seaweedfs]

An image dataset (4,000 files of ~110 KB of random bytes; 300 with ``--quick``) is uploaded and read:

- S3 (a moto server in its own process on loopback, or SeaweedFS's ``weed mini``): ``reader(name)`` over every
  sample vs ``S3FileSystem.cat`` of the same objects, and vs loops that read one object at a time
  (``S3FileSystem.open(path).read()`` and ``S3FileSystem.cat_file(path)``, on the first 500 objects); ``upload`` vs
  ``S3FileSystem.put`` of the same files, each timed run to a fresh prefix so that everything is really sent.
- Local disk: ``reader(name)`` vs ``LocalFileSystem.cat`` of the same object files.

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS, Row, interleaved_medians, print_rows

from datamount.datasets.catalog import dataset_folder, read_rows
from datamount.datasets.upload import upload
from datamount.readers.dataset import DatasetReader, reader
from datamount.storage import open_store
from datamount.storage.backends.s3 import s3_filesystem_options

DATASET = "bench-images"
BUCKET = "bench-datasets"
CLASSES = 10
MEAN_SIZE = 110_000
NAIVE_LOOP_OBJECTS = 500
SHORT_NAMES = {"seaweedfs": "weed"}


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
    folder = dataset_folder(samples.manifest.name)
    by_path = {entry.path: entry for entry in samples.manifest.files}
    entries = [by_path[row[0]] for row in read_rows(store, samples.manifest)]
    return [store.full_path(f"{folder}/{entry.object_key}") for entry in entries], [e.size for e in entries]


def read_samples(samples: DatasetReader) -> int:
    """Iterate one epoch; return the bytes seen."""
    return sum(len(data) for data, *_ in samples())


def mb_per_second(total_bytes: int, seconds: float) -> float:
    return total_bytes / 1e6 / seconds


def bench_s3_reads(setup: str, samples: DatasetReader, fs: Any, runs: int) -> list[Row]:
    """``reader`` vs ``S3FileSystem.cat`` of the same objects, and vs loops reading one object at a time."""
    paths, sizes = object_paths(samples)
    total = sum(sizes)
    few = paths[:NAIVE_LOOP_OBJECTS]
    few_bytes = sum(sizes[:NAIVE_LOOP_OBJECTS])

    def open_each() -> None:
        for path in few:
            with fs.open(path, "rb") as f:
                f.read()

    def cat_each() -> None:
        for path in few:
            fs.cat_file(path)

    seconds = interleaved_medians(
        {"ours": lambda: read_samples(samples), "cat": lambda: fs.cat(paths), "open": open_each, "cat_file": cat_each},
        runs,
    )
    ours = mb_per_second(total, seconds["ours"])
    references = [
        (mb_per_second(total, seconds["cat"]), "S3FileSystem.cat"),
        (mb_per_second(few_bytes, seconds["open"]), f"open().read() loop ({len(few)})"),
        (mb_per_second(few_bytes, seconds["cat_file"]), f"cat_file loop ({len(few)})"),
    ]
    return [Row(setup, f"read {len(paths)} images", ours, rate, "MB/s", name) for rate, name in references]


def bench_s3_uploads(setup: str, list_file: Path, store_options: dict[str, str], fs: Any, runs: int) -> Row:
    """``upload`` vs ``S3FileSystem.put`` of the same files, each run to a prefix that holds nothing yet."""
    relative = [line.split("\t")[0] for line in list_file.read_text(encoding="utf-8").splitlines()]
    local = [str(list_file.parent / path) for path in relative]
    total = sum(os.path.getsize(path) for path in local)
    counter = itertools.count()
    current: list[str] = []

    def fresh_prefix() -> None:
        for prefix in current:
            fs.rm(prefix, recursive=True)
        current[:] = [f"{BUCKET}/run-{next(counter)}"]

    def ours() -> None:
        upload(list_file, DATASET, store=open_store(f"s3://{current[0]}", **store_options))

    def reference() -> None:
        fs.put(local, [f"{current[0]}/{path}" for path in relative])

    seconds = interleaved_medians({"ours": ours, "put": reference}, runs, setup=fresh_prefix)
    fresh_prefix()
    return Row(setup, f"upload {len(local)} images", mb_per_second(total, seconds["ours"]),
               mb_per_second(total, seconds["put"]), "MB/s", "S3FileSystem.put")  # fmt: skip


def bench_s3(server: str, list_file: Path, runs: int) -> list[Row]:
    """Reads and uploads on a fresh S3 server holding one empty bucket."""
    import s3fs

    setup = f"s3 ({SHORT_NAMES.get(server, server)})"
    with S3_SERVERS[server]() as (endpoint, _):
        options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
        fs = s3fs.S3FileSystem(**s3_filesystem_options(options))
        fs.mkdir(BUCKET)
        store = open_store(f"s3://{BUCKET}/read", **options)
        upload(list_file, DATASET, store=store)
        rows = bench_s3_reads(setup, reader(DATASET, store), fs, runs)
        rows.append(bench_s3_uploads(setup, list_file, options, fs, runs))
    return rows


def bench_local_reads(list_file: Path, folder: Path, runs: int) -> Row:
    """``reader`` on a local store vs ``LocalFileSystem.cat`` of the same object files."""
    from fsspec.implementations.local import LocalFileSystem

    store = open_store(folder)
    upload(list_file, DATASET, store=store)
    samples = reader(DATASET, store)
    paths, sizes = object_paths(samples)
    total = sum(sizes)
    fs = LocalFileSystem()
    seconds = interleaved_medians({"ours": lambda: read_samples(samples), "cat": lambda: fs.cat(paths)}, runs)
    return Row("local", f"read {len(paths)} images", mb_per_second(total, seconds["ours"]),
               mb_per_second(total, seconds["cat"]), "MB/s", "LocalFileSystem.cat")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 images, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument("--server", choices=sorted(S3_SERVERS), default="moto", help="the S3 server to run")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count = 300 if args.quick else 4000

    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp:
        list_file = make_image_list(Path(tmp) / "source", count)
        rows = bench_s3(args.server, list_file, args.runs)
        rows.append(bench_local_reads(list_file, Path(tmp) / "store", args.runs))

    print_rows(rows, f"Datasets vs fsspec, {count} images of ~{MEAN_SIZE // 1000} KB, median of {args.runs} runs")


if __name__ == "__main__":
    main()
