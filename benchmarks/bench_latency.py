"""Reads from an object store that is far away: every request answered ``--latency-ms`` later (default 20 ms, as S3
answers a small GET), against the same reads with no latency added.

    python benchmarks/bench_latency.py [--quick] [--runs N] [--latency-ms MS] [--server moto|seaweedfs|ceph]

Loopback answers in about a millisecond, which hides whether a reader keeps enough requests in flight. Here two
proxies run in processes of their own in front of one S3 server (``tests/servers/fault_proxy.py``): one adds the
latency to every request, the other adds nothing, so that both paths pay the same proxy cost. On each:

- ``reader(name)`` of an unpacked version (4,000 objects of ~110 KB; 60 with ``--quick``) and of the same version
  packed (shards read by ranged GETs);
- a naive loop reading one object at a time (``open().read()`` through the filesystem, on the first 200 objects);
- a mixture of three packed parts (the packed version read three ways: in order, and shuffled with two seeds),
  ``mix(..., samples=N)``: a pass must not wait for its parts' first row groups one after another.

Reported: each path's samples/s with latency, its ratio to its own figure without (target: >= 0.8), and the
reader's ratio to the naive loop with latency (target: >= 20).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from fsspec import AbstractFileSystem

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    S3_SERVERS,
    Measure,
    Row,
    costed_row,
    delaying_proxy,
    interleaved_costs,
    make_bucket,
    print_rows,
)
from bench_datasets import DATASET, make_image_list, object_paths

from datamount.datasets import pack
from datamount.datasets.upload import upload
from datamount.readers import mix, reader
from datamount.storage import Store, open_store

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "bench-latency"
NAIVE_OBJECTS = 200


@contextlib.contextmanager
def s3_endpoint(server: str) -> Iterator[tuple[str, dict[str, str], list[int]]]:
    """An S3 server of the given kind: its endpoint, the credentials to use, and its processes."""
    if server == "ceph":
        sys.path.insert(0, str(ROOT))
        from tests.servers.ceph import start_ceph_server, why_ceph_cannot_run

        reason = why_ceph_cannot_run()
        if reason is not None:
            raise SystemExit(f"cannot run Ceph here: {reason}")
        ceph = start_ceph_server()
        try:
            pids = [process.pid for process in ceph.processes.values()]
            yield ceph.endpoint_url, {"key": ceph.key, "secret": ceph.secret}, pids
        finally:
            ceph.stop()
        return
    with S3_SERVERS[server]() as (endpoint, pid):
        yield endpoint, {"key": "bench", "secret": "bench-secret"}, [pid]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 images, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added to every request (default 20)")
    parser.add_argument("--server", choices=[*sorted(S3_SERVERS), "ceph"], default="moto")
    parser.add_argument("--count", type=int, help="images in the dataset (default 4,000; 60 with --quick)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count = args.count or (60 if args.quick else 4000)

    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp, s3_endpoint(args.server) as server:
        endpoint, keys, pids = server
        list_file = make_image_list(Path(tmp) / "source", count)
        make_bucket("s3", BUCKET, endpoint_url=endpoint, **keys)
        url = f"s3://{BUCKET}/store"
        upload(list_file, DATASET, store=open_store(url, endpoint_url=endpoint, **keys))
        pack(DATASET, store=open_store(url, endpoint_url=endpoint, **keys))
        with delaying_proxy(endpoint, args.latency_ms) as far, delaying_proxy(endpoint, 0) as near:
            stores = {
                "far": open_store(url, endpoint_url=far, **keys),
                "near": open_store(url, endpoint_url=near, **keys),
            }
            rows = bench(stores, count, args.runs, args.latency_ms, pids)
    print_rows(rows, f"Reads with {args.latency_ms:g} ms added per request, {args.server}, {count} images of ~110 KB")


def bench(stores: dict[str, Store], count: int, runs: int, latency_ms: float, server_pids: list[int]) -> list[Row]:
    """Each path on each store, taking turns: samples/s, and CPU seconds per 1,000 samples in this process and in
    the server."""
    actions: dict[str, Callable[[], object]] = {}
    items: dict[str, int] = {}
    for where, store in stores.items():
        unpacked = reader(DATASET, store, use_shards=False)
        packed = reader(DATASET, store)
        few = object_paths(unpacked)[0][:NAIVE_OBJECTS]
        actions[f"unpacked {where}"] = lambda samples=unpacked: _drain(samples(), count)
        actions[f"packed {where}"] = lambda samples=packed: _drain(samples(), count)
        actions[f"naive {where}"] = lambda fs=store.fs, few=few: _drain(_naive_loop(fs, few), len(few))
        parts = {f"part{k}": reader(DATASET, store, shuffle=k > 0, seed=k) for k in range(3)}
        mixture = mix(dict.fromkeys(parts, 1), readers=parts, samples=count)
        actions[f"mixture {where}"] = lambda samples=mixture: _drain(samples(), count)
        items.update({f"{path} {where}": count for path in ("unpacked", "packed", "mixture")})
        items[f"naive {where}"] = len(few)
    costs = interleaved_costs(actions, runs, server_pids=server_pids)

    samples = Measure("samples/s", 1, "1k obj", 1000)

    def row(operation: str, ours: str, reference: str, reference_name: str) -> Row:
        return costed_row(f"+{latency_ms:g} ms", operation, costs, items, ours, reference, reference_name, samples)

    return [
        row("reader, unpacked", "unpacked far", "unpacked near", "same, no latency"),
        row("reader, packed", "packed far", "packed near", "same, no latency"),
        row("reader, unpacked", "unpacked far", "naive far", "open().read() loop"),
        row("reader, packed", "packed far", "naive far", "open().read() loop"),
        row("open().read() loop", "naive far", "naive near", "same, no latency"),
        row("mixture of 3 packed parts", "mixture far", "mixture near", "same, no latency"),
    ]


def _naive_loop(fs: AbstractFileSystem, paths: list[str]) -> Iterator[bytes]:
    for path in paths:
        with fs.open(path, "rb") as f:
            yield f.read()


def _drain(samples: Iterable[object], expected: int) -> None:
    seen = sum(1 for _ in samples)
    if seen != expected:
        raise RuntimeError(f"read {seen} samples, expected {expected}")


if __name__ == "__main__":
    main()
