"""A packed version on an S3 server, read in a fresh process as an epoch starts: how long until the first sample,
how long for the pass, and the process's peak memory; a streamed pass (the default) against one that fetches whole
shards (through the shard cache, as every remote pass did before passes streamed).

    python benchmarks/bench_first_sample.py [--quick] [--runs N] [--server moto|seaweedfs|ceph]

The version has 2,400 samples of ~110 KB in shards of 256 MB (300 samples in 32 MB shards with ``--quick``).
Prefer Ceph or SeaweedFS: moto copies the whole object for every ranged GET.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import make_bucket
from bench_latency import s3_endpoint
from bench_shards import make_dataset

from datamount.datasets import pack, upload
from datamount.storage import open_store

#: Run in a fresh process: read the whole version once; print the first sample's time, the pass's, peak RSS.
PASS = """
import json, sys, tempfile, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from _harness import peak_rss_mb
from datamount.readers import reader
url, cached = sys.argv[1], sys.argv[2] == "cache"
with tempfile.TemporaryDirectory() as cache:
    samples = reader("packed", url, cache=cache if cached else None)
    first = None
    count = 0
    for _ in samples():
        count += 1
        if first is None:
            first = time.perf_counter() - started
    done = time.perf_counter() - started
print(json.dumps({"first": first, "pass": done, "rss_mb": peak_rss_mb(), "samples": count}))
"""


def one_pass(url: str, environment: dict[str, str], mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", PASS, url, mode, str(Path(__file__).resolve().parent)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
        env=environment,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 samples in 32 MB shards, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="passes of each kind, taking turns (median reported)")
    parser.add_argument("--server", choices=["moto", "seaweedfs", "ceph"], default="moto")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    count, shard_bytes = (300, 32 << 20) if args.quick else (2400, 256 << 20)
    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp, s3_endpoint(args.server) as server:
        endpoint, keys, _ = server
        bucket = "bench-first-sample"
        make_bucket("s3", bucket, endpoint_url=endpoint, **keys)
        url = f"s3://{bucket}/store"
        store = open_store(url, endpoint_url=endpoint, **keys)
        upload(make_dataset(Path(tmp) / "source", count, 110_000), "packed", store=store)
        shards = len(pack("packed", store=store, shard_bytes=shard_bytes).shards)
        # The fresh processes find the server the way a job does: from the environment.
        environment = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": keys["key"],
            "AWS_SECRET_ACCESS_KEY": keys["secret"],
        }
        found: dict[str, list[dict[str, float]]] = {"stream": [], "cache": []}
        for _ in range(args.runs):
            for mode in found:
                found[mode].append(one_pass(url, environment, mode))
    print(f"\nA fresh process's pass over {count} x 110 KB in {shards} shard(s), {args.server}, median of {args.runs}")
    print(f"{'pass':<28} {'first sample':>13} {'whole pass':>11} {'peak RSS':>10}")
    for mode, label in (("stream", "streamed row groups"), ("cache", "whole shards (cache=DIR)")):
        first = statistics.median(r["first"] for r in found[mode])
        whole = statistics.median(r["pass"] for r in found[mode])
        rss = statistics.median(r["rss_mb"] for r in found[mode])
        print(f"{label:<28} {first:>11.2f} s {whole:>9.2f} s {rss:>7.0f} MB")


if __name__ == "__main__":
    main()
