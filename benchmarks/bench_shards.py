"""Packed (Parquet shard) reads against references measured in the same run.

    python benchmarks/bench_shards.py [--quick] [--runs N] [--server moto|seaweedfs]

1. Local disk, warm page cache, ~110 KB samples: ``reader(name)()`` over packed shards vs reading the same shard
   files' bytes with ``cat`` (``LocalFileSystem.cat``); and ``reader(name, zero_copy=True)`` vs ``reader(name)``; MB/s.
2. Local disk, 784-byte samples (MNIST-sized): packed ``reader(name)()`` vs WebDataset reading tar shards of the same
   samples; samples/s.
3. S3 (moto or SeaweedFS, in its own process): packed ``reader(name)()`` (a version packed with ``pack``'s defaults,
   every row group checked) vs one plain GET of each shard through the same store (``Store.read``: the same bytes,
   no decoding, no check); MB/s and this process's CPU seconds per GB (user + system, the server's not counted).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS, Row, interleaved_medians, print_rows

from datamount.datasets import layout
from datamount.datasets.pack import pack
from datamount.datasets.shard_writer import DEFAULT_SHARD_BYTES
from datamount.datasets.upload import upload
from datamount.readers import DatasetReader, reader
from datamount.storage import Store, open_store
from datamount.storage.backends.s3 import s3_filesystem_options


def make_dataset(folder: Path, count: int, size: int) -> Path:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        name = f"data/{i:06d}.bin"
        (folder / name).write_bytes(os.urandom(size))
        rows.append(f"{name}\t{i % 10}\n")
    list_file = folder / "samples.list"
    list_file.write_text("".join(rows), encoding="utf-8")
    return list_file


def packed_dataset(store: Store, list_file: Path, name: str, shard_bytes: int) -> list[str]:
    upload(list_file, name, store=store)
    manifest = pack(name, store=store, shard_bytes=shard_bytes)
    return [layout.shard_path(name, shard) for shard in manifest.shards]


def drain(samples: DatasetReader) -> int:
    return sum(len(sample[0]) for sample in samples())


def local_large(tmp: Path, count: int, runs: int) -> list[Row]:
    """The packed reader vs ``cat`` of the shards; ``zero_copy=True`` vs the default (``bytes`` per sample)."""
    store = open_store(tmp / "store-large")
    shards = packed_dataset(store, make_dataset(tmp / "large", count, 110_000), "large", 64 << 20)
    from fsspec.implementations.local import LocalFileSystem

    files = [store.full_path(s) for s in shards]
    size_mb = sum(os.path.getsize(f) for f in files) / 1e6
    samples = reader("large", store)
    views = reader("large", store, zero_copy=True)
    actions = {
        "ours": lambda: drain(samples),
        "views": lambda: drain(views),
        "cat": lambda: LocalFileSystem().cat(files),
    }
    times = interleaved_medians(actions, runs)
    setup, rate = f"{count} x 110 KB, packed", {label: size_mb / seconds for label, seconds in times.items()}
    return [
        Row("local", setup, rate["ours"], rate["cat"], "MB/s", "cat"),
        Row("local", f"{setup}, zero_copy", rate["views"], rate["ours"], "MB/s", "reader() (bytes)"),
    ]


def local_small(tmp: Path, count: int, runs: int) -> Row:
    import webdataset as wds

    list_file = make_dataset(tmp / "small", count, 784)
    store = open_store(tmp / "store-small")
    packed_dataset(store, list_file, "small", 64 << 20)
    tars = []
    rows = list_file.read_text(encoding="utf-8").splitlines()
    per_tar = max(1, count // 4)
    for start in range(0, count, per_tar):
        path = tmp / f"small-{start // per_tar:03d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for index, line in enumerate(rows[start : start + per_tar], start=start):
                name, label = line.split("\t")
                sink.write({"__key__": f"{index:08d}", "bin": (tmp / "small" / name).read_bytes(), "cls": label})
        tars.append(str(path))
    samples = reader("small", store)
    web = wds.WebDataset(tars, shardshuffle=False, empty_check=False).to_tuple("bin", "cls")
    times = interleaved_medians({"ours": lambda: drain(samples), "wds": lambda: sum(1 for _ in web)}, runs)
    return Row(
        "local", f"{count} x 784 B, packed", count / times["ours"], count / times["wds"], "samples/s", "WebDataset"
    )


def s3_packed(tmp: Path, count: int, runs: int, server: str) -> Row:
    import s3fs

    with S3_SERVERS[server]() as (endpoint, _):
        options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
        s3fs.S3FileSystem(**s3_filesystem_options(options)).mkdir("bench")
        store = open_store("s3://bench/root", **options)
        shards = packed_dataset(store, make_dataset(tmp / "remote", count, 110_000), "remote", DEFAULT_SHARD_BYTES)
        size_gb = sum(len(store.read(shard)) for shard in shards) / 1e9  # also warms the server's caches
        samples = reader("remote", store)
        actions = {"ours": lambda: drain(samples), "get": lambda: [store.read(shard) for shard in shards]}
        seconds, cpu = interleaved_costs(actions, runs)
    return Row(
        f"s3 ({server})",
        f"{count} x 110 KB, packed",
        size_gb * 1e3 / seconds["ours"],
        size_gb * 1e3 / seconds["get"],
        "MB/s",
        "one GET per shard",
        cpu_per="GB",
        ours_cpu=cpu["ours"] / size_gb,
        reference_cpu=cpu["get"] / size_gb,
    )


def interleaved_costs(actions: dict[str, Callable[[], object]], runs: int) -> tuple[dict[str, float], ...]:
    """The median wall seconds and CPU seconds (this process's user + system, every thread) of each action, taking
    turns. ``time.process_time``, not ``os.times``: the latter counts in ticks of 10 ms, a tenth of a pass here."""
    seconds: dict[str, list[float]] = {name: [] for name in actions}
    cpu: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            started, used = time.perf_counter(), time.process_time()
            action()
            seconds[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - used)
    return tuple({name: statistics.median(values[name]) for name in actions} for values in (seconds, cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per figure (median reported)")
    parser.add_argument("--server", choices=sorted(S3_SERVERS), default="moto", help="the S3 server to run")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    large, small, remote = (200, 5_000, 100) if args.quick else (1_000, 60_000, 800)
    with tempfile.TemporaryDirectory(prefix="datamount-bench-shards-") as folder:
        tmp = Path(folder)
        rows = [
            *local_large(tmp, large, runs),
            local_small(tmp, small, runs),
            s3_packed(tmp, remote, runs, args.server),
        ]
    print_rows(rows, f"Packed shards vs references, median of {runs} runs (ratio > 1: datamount is faster)")


if __name__ == "__main__":
    main()
