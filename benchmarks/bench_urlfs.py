"""``datamount://`` URLs against the store's own fsspec filesystem, and listing and opening in a version of a million
files.

Usage::

    python benchmarks/bench_urlfs.py [--quick] [--runs N] [--server moto|seaweedfs] [--files N]

1. Shards read with ``pyarrow.parquet.read_table`` (every column), on a local store and on S3 (SeaweedFS by default,
   in its own process): through ``datamount://`` (each 256 KiB block checked against its xxh3-64) vs through the
   store's own fsspec filesystem (``Store.fs``: ``LocalFileSystem``, obstore's S3), the same shard files. An image
   version of 1,000 files of 20-100 KB (200 with ``--quick``), packed into 16 MB shards; a fresh ``datamount://``
   filesystem each round (one that read a shard keeps its checked copy). MB/s, medians of ``--runs`` interleaved
   rounds; goal: ratio >= 0.9.
2. A packed image version of ``--files`` tiny files (1,000,000; 20,000 with ``--quick``) on a local store:
   ``find`` over it on a filesystem that opened it (goal < 2 s), and the first ``open`` and read of one file on a
   fresh filesystem (the manifest and the list read; the one path found in them, no tree built; goal < 200 ms), and
   the first ``info`` and ``exists`` on a fresh filesystem. Seconds, medians of ``--runs``. The version is made in
   ``/dev/shm`` where there is one.

The machine's load (``os.getloadavg``) is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS, Row, interleaved_medians, make_bucket, print_rows

from datamount.datasets import layout
from datamount.datasets.upload import upload
from datamount.storage import Store, open_store
from datamount.urlfs import DatamountFileSystem

SHARD_BYTES = 16 << 20


def image_list(folder: Path, count: int, sizes: tuple[int, int] = (20_000, 100_000)) -> Path:
    """``count`` files of random bytes (sizes spread over ``sizes``) and the list naming them."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        name = f"data/{i:07d}.bin"
        (folder / name).write_bytes(os.urandom(sizes[0] + (sizes[1] - sizes[0]) * i // max(1, count - 1)))
        rows.append(f"{name}\t{i % 10}\n")
    (folder / "train.list").write_text("".join(rows), encoding="utf-8")
    return folder / "train.list"


def shards_read(store: Store, setup: str, list_file: Path, options: dict[str, str], runs: int) -> Row:
    """``read_table`` of every shard of a packed version: through ``datamount://`` vs ``Store.fs``."""
    import pyarrow.parquet as pq

    manifest = upload(list_file, "shards", store=store, packed=True, shard_bytes=SHARD_BYTES).manifest
    direct = [store.full_path(layout.shard_path("shards", shard)) for shard in manifest.shards]
    size_mb = sum(shard.size for shard in manifest.shards) / 1e6

    def ours() -> None:
        # A fresh filesystem each round (its manifest read counted): one that read the shards before keeps them.
        fs = DatamountFileSystem(store=store.url, options=options, cache=False, skip_instance_cache=True)
        paths = sorted(fs.glob("_/shards@1/shards/*.parquet"))
        assert len(paths) == len(direct)
        pq.read_table(paths, filesystem=fs)

    actions = {"ours": ours, "store": lambda: pq.read_table(direct, filesystem=store.fs)}
    times = interleaved_medians(actions, runs)
    return Row(setup, f"read_table, {len(direct)} shards", size_mb / times["ours"], size_mb / times["store"], "MB/s",
               "Store.fs")  # fmt: skip


def tiny_list(folder: Path, count: int) -> Path:
    """``count`` files of a few bytes in 1,000 folders, and the list naming them."""
    rows = []
    for i in range(count):
        name = f"data/{i // 1000:04d}/{i:07d}.txt"
        if i % 1000 == 0:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"%d\n" % i)
        rows.append(f"{name}\t{i % 10}\n")
    (folder / "tiny.list").write_text("".join(rows), encoding="utf-8")
    return folder / "tiny.list"


def many_files(tmp: Path, count: int, runs: int) -> list[str]:
    """``find`` and the first ``open`` in a version of ``count`` files (made in a memory folder where there is one:
    writing a million files is most of making it); lines of figures."""
    if Path("/dev/shm").is_dir():
        with tempfile.TemporaryDirectory(prefix="datamount-bench-urlfs-", dir="/dev/shm") as memory:
            return _many_files(Path(memory), count, runs)
    return _many_files(tmp, count, runs)


def _many_files(tmp: Path, count: int, runs: int) -> list[str]:
    started = time.perf_counter()
    list_file = tiny_list(tmp / "tiny", count)
    store = open_store(tmp / "store-tiny")
    manifest = upload(list_file, "tiny", store=store, packed=True).manifest
    made = time.perf_counter() - started
    wanted = f"_/tiny@1/data/{(count // 2) // 1000:04d}/{count // 2:07d}.txt"

    def first_open() -> tuple[float, float]:
        fs = DatamountFileSystem(store=store.url, cache=str(tmp / "cache"), skip_instance_cache=True)
        began = time.perf_counter()
        with fs.open(wanted) as file:
            assert file.read() == b"%d\n" % (count // 2)
        opened = time.perf_counter() - began
        fs = DatamountFileSystem(store=store.url, cache=str(tmp / "cache"), skip_instance_cache=True)
        began = time.perf_counter()
        assert fs.info(wanted)["type"] == "file" and fs.exists(wanted.rsplit("/", 1)[0])
        return opened, time.perf_counter() - began

    opens, infos = zip(*(first_open() for _ in range(runs)), strict=True)
    fs = DatamountFileSystem(store=store.url, cache=str(tmp / "cache"), skip_instance_cache=True)
    fs.ls("_/tiny@1")
    finds = []
    for _ in range(runs):
        began = time.perf_counter()
        found = fs.find("_/tiny@1")
        finds.append(time.perf_counter() - began)
    assert len(found) == count + 1 + len(manifest.shards)  # the files, the list and the shards
    return [
        f"a packed version of {count:,} files (made in {made:.0f} s)",
        f"  first open + read of one file, fresh filesystem: {statistics.median(opens) * 1000:8.0f} ms  (goal < 200)",
        f"  first info + exists (folder), fresh filesystem:   {statistics.median(infos) * 1000:8.0f} ms",
        f"  find over the version, opened filesystem:         {statistics.median(finds):8.2f} s   (goal < 2)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per figure (median reported)")
    parser.add_argument("--server", choices=sorted(S3_SERVERS), default="seaweedfs", help="the S3 server to run")
    parser.add_argument(
        "--files", type=int, default=None, help="files of the large version (default 1,000,000; 0: not measured)"
    )
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    count = 200 if args.quick else 1_000
    files = (20_000 if args.quick else 1_000_000) if args.files is None else args.files
    with tempfile.TemporaryDirectory(prefix="datamount-bench-urlfs-") as folder:
        tmp = Path(folder)
        list_file = image_list(tmp / "images", count)
        rows = [shards_read(open_store(tmp / "store"), "local", list_file, {}, runs)]
        with S3_SERVERS[args.server]() as (endpoint, _):
            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
            make_bucket("s3", "bench", **options)
            store = open_store("s3://bench/root", **options)
            rows.append(shards_read(store, f"s3 ({args.server})", list_file, options, runs))
        lines = many_files(tmp, files, runs) if files else []
    print_rows(rows, f"datamount:// vs the store's own fsspec filesystem (load {os.getloadavg()[0]:.1f})")
    print()
    print("\n".join(lines))
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
