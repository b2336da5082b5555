"""Batched read and write throughput of a Store against the same operation done directly with fsspec / s3fs.

    python benchmarks/bench_store.py [--quick] [--runs N] [--server moto|seaweedfs]

Local disk: ``Store.read_many`` vs ``LocalFileSystem.cat(paths)``, ``Store.put_many`` vs ``LocalFileSystem.put``.
S3 (a moto server in its own process on loopback): ``Store.read_many`` vs ``S3FileSystem.cat(paths)``,
``Store.put_many`` vs ``S3FileSystem.put``. Ratios above 1 mean datamount is faster. Medians of several runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS, Row, interleaved_medians, print_rows

from datamount.storage import Store, open_store
from datamount.storage.backends.s3 import s3_filesystem_options


def make_files(folder: Path, count: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"f{i:05d}.bin"
        path.write_bytes(os.urandom(size))
        paths.append(path)
    return paths


def compare(label: str, store: Store, reference_fs, files: list[Path], runs: int) -> list[Row]:
    names = [f"bench/{p.name}" for p in files]
    full = [store.full_path(n) for n in names]
    total_mb = sum(p.stat().st_size for p in files) / 1e6
    sizes = [p.stat().st_size for p in files]
    local = [str(p) for p in files]

    # Every timed write goes to names not written before, as uploads do (their objects are content-addressed), and
    # the two take turns: overwriting would time the filesystem's replace-by-rename safeguards instead.
    rounds = itertools.count()

    def ours_put() -> None:
        run = next(rounds)
        store.put_many(zip(local, (f"fresh/{run}/{n}" for n in names), strict=True))

    def ref_put() -> None:
        run = next(rounds)
        reference_fs.put(local, [store.full_path(f"fresh/{run}/{n}") for n in names])

    writes = interleaved_medians({"ours": ours_put, "reference": ref_put}, runs)
    store.put_many(zip(local, names, strict=True))
    reads = interleaved_medians(
        {
            "ours": lambda: sum(len(b) for b in store.read_many(names, sizes=sizes)),
            "reference": lambda: reference_fs.cat(full),
        },
        runs,
    )
    ours_put, ref_put, ours_read, ref_read = writes["ours"], writes["reference"], reads["ours"], reads["reference"]
    ref_name = f"{type(reference_fs).__name__}"
    return [
        Row(label, f"write {len(files)} objects", total_mb / ours_put, total_mb / ref_put, "MB/s", f"{ref_name}.put"),
        Row(label, f"read {len(files)} objects", total_mb / ours_read, total_mb / ref_read, "MB/s", f"{ref_name}.cat"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per figure (median reported)")
    parser.add_argument("--server", choices=sorted(S3_SERVERS), default="moto", help="the S3 server to run")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    local_count, s3_count, size = (200, 100, 64 << 10) if args.quick else (2000, 500, 64 << 10)

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp:
        files = make_files(Path(tmp) / "src", max(local_count, s3_count), size)
        store = open_store(Path(tmp) / "store")
        from fsspec.implementations.local import LocalFileSystem

        rows += compare("local", store, LocalFileSystem(auto_mkdir=True), files[:local_count], runs)

        with S3_SERVERS[args.server]() as (endpoint, _):
            import s3fs

            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
            reference = s3fs.S3FileSystem(**s3_filesystem_options(options))
            reference.mkdir("bench-bucket")
            s3_store = open_store("s3://bench-bucket/root", **options)
            rows += compare(f"s3 ({args.server})", s3_store, reference, files[:s3_count], runs)

    print_rows(rows, f"Store vs fsspec, {size >> 10} KiB objects, median of {runs} runs")


if __name__ == "__main__":
    main()
