"""Dataset upload and read throughput against the same bytes moved directly by the backend's own fsspec filesystem.

    python benchmarks/bench_datasets.py [--quick] [--runs N] [--backend NAME ...]

An image dataset (4,000 files of ~110 KB of random bytes; 60 with ``--quick``) is uploaded to and read from each
backend (``local``; S3 on ``moto`` or SeaweedFS's ``weed mini`` (``seaweedfs``); and the project's test servers:
``gluster`` (FUSE mount), ``hdfs`` (2.7.3), ``ceph`` (RGW), ``gcs`` (emulator)):

- read: ``reader(name)`` over every sample vs the filesystem's ``cat`` of the same objects (many in flight where the
  filesystem is asynchronous; on S3, s3fs's), vs a loop of ``cat_file`` one object at a time (on the first 500
  objects), and on S3 vs ``reader`` through s3fs (``client="s3fs"``) rather than obstore;
- upload: ``upload`` vs the filesystem's ``put`` of the same files (on S3, s3fs's), each timed run to a fresh prefix
  so that everything is really sent (on file systems also vs ``put`` then one ``syncfs``: an upload is durable, a put
  is not).

CPU seconds per GB are shown for each side, in this process (all threads) and in the server's processes.

Ratios above 1 mean datamount is faster. Medians of several runs, the compared operations taking turns.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import BACKENDS, BYTES, Backend, FreshStores, Row, costed_row, interleaved_costs, print_rows

from datamount.datasets import layout
from datamount.datasets.rows import read_lines
from datamount.datasets.upload import upload
from datamount.readers.dataset import DatasetReader, reader
from datamount.storage import Store

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


def bench_reads(
    setup: str,
    samples: DatasetReader,
    unchecked: DatasetReader,
    runs: int,
    pids: list[int],
    *,
    other_client: DatasetReader | None = None,
) -> list[Row]:
    """``reader`` vs a filesystem's ``cat`` of the same objects (s3fs's on S3, whatever client the store uses),
    vs a loop reading one object at a time, vs ``reader(..., verify=False)`` (the cost of checking each object's
    sha256), and vs the same reader through the store's other client (``other_client``, on S3: s3fs)."""
    reference = (other_client or samples).store.fs
    paths, sizes = object_paths(samples)
    total = sum(sizes)
    few = paths[:NAIVE_LOOP_OBJECTS]
    few_bytes = sum(sizes[:NAIVE_LOOP_OBJECTS])

    def cat_each() -> None:
        for path in few:
            reference.cat_file(path)

    actions = {
        "ours": lambda: read_samples(samples),
        "cat": lambda: reference.cat(paths),
        "cat_file": cat_each,
        "unchecked": lambda: read_samples(unchecked),
    }
    if other_client is not None:
        actions["other_client"] = lambda: read_samples(other_client)
    costs = interleaved_costs(actions, runs, server_pids=pids)
    moved = {**dict.fromkeys(actions, total), "cat_file": few_bytes}
    operation = f"read {len(paths)} images"
    name = type(reference).__name__
    rows = [
        costed_row(setup, operation, costs, moved, "ours", "cat", f"{name}.cat", BYTES),
        costed_row(setup, operation, costs, moved, "ours", "cat_file", f"{name}.cat_file loop ({len(few)})", BYTES),
        costed_row(setup, operation, costs, moved, "ours", "unchecked", "reader(verify=False)", BYTES),
    ]
    if other_client is not None:
        label = f"reader(client={other_client.store.client!r})"  # type: ignore[attr-defined]
        rows.append(costed_row(setup, operation, costs, moved, "ours", "other_client", label, BYTES))
    return rows


def bench_uploads(setup: str, list_file: Path, backend: Backend, runs: int) -> list[Row]:
    """``upload`` vs the filesystem's ``put`` of the same files, each run to a prefix that holds nothing yet. On a
    file system also vs ``put`` followed by one ``syncfs`` (``Store.make_durable``): an upload's files are durable
    when it returns, ``put``'s are not."""
    relative = [line.split("\t")[0] for line in list_file.read_text(encoding="utf-8").splitlines()]
    local = [str(list_file.parent / path) for path in relative]
    total = sum(os.path.getsize(path) for path in local)

    def make_folders(store: Store) -> None:  # put() of a list makes none
        for folder in sorted({os.path.dirname(path) for path in relative}):
            store.fs.makedirs(store.full_path(folder), exist_ok=True)

    def put(store: Store) -> None:
        store.fs.put(local, [store.full_path(path) for path in relative])

    def put_durable(store: Store) -> None:
        put(store)
        store.make_durable(relative)

    actions = {
        "ours": lambda: upload(list_file, DATASET, store=ready["ours"]),
        "put": lambda: put(ready["put"]),
    }
    probe = backend.open("probe")
    on_disk = probe.local_path() is not None
    if on_disk:
        actions["put_durable"] = lambda: put_durable(ready["put_durable"])
    # On S3 the reference is s3fs's put, whichever client the store uses.
    options = {"put": {"client": "s3fs"}} if probe.protocol == "s3" else {}
    ready = FreshStores(backend, actions, prepare=make_folders, options=options)
    costs = interleaved_costs(actions, runs, server_pids=backend.server_pids, setup=ready.renew)
    name = type(ready["put"].fs).__name__
    ready.remove()
    moved = dict.fromkeys(actions, total)
    operation = f"upload {len(local)} images"
    rows = [costed_row(setup, operation, costs, moved, "ours", "put", f"{name}.put", BYTES)]
    if on_disk:
        rows.append(costed_row(setup, operation, costs, moved, "ours", "put_durable", f"{name}.put + syncfs", BYTES))
    return rows


def bench_backend(name: str, list_file: Path, runs: int) -> list[Row]:
    """Reads, then uploads, on a fresh server (or folder) of backend ``name``."""
    with BACKENDS[name]() as backend:
        store = backend.open("read")
        upload(list_file, DATASET, store=store)
        unchecked = reader(DATASET, store, verify=False)
        other = reader(DATASET, backend.open("read", client="s3fs")) if store.protocol == "s3" else None
        rows = bench_reads(name, reader(DATASET, store), unchecked, runs, backend.server_pids, other_client=other)
        rows += bench_uploads(name, list_file, backend, runs)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 images, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument(
        "--backend", action="append", choices=sorted(BACKENDS), help="backends to run on (default: moto and local)"
    )
    parser.add_argument("--count", type=int, help="images in the dataset (default 4,000; 60 with --quick)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count = args.count or (60 if args.quick else 4000)

    rows = []
    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp:
        list_file = make_image_list(Path(tmp) / "source", count)
        for backend in args.backend or ["moto", "local"]:
            rows += bench_backend(backend, list_file, args.runs)

    print_rows(rows, f"Datasets vs fsspec, {count} images of ~{MEAN_SIZE // 1000} KB, median of {args.runs} runs")


if __name__ == "__main__":
    main()
