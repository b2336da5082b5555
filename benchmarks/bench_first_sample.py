"""A packed version on an S3 server, read in a fresh process as an epoch starts: how long until the first sample,
how long for the pass, and the process's peak memory; a streamed pass (the default) against one that fetches whole
shards (through the shard cache, as every remote pass did before passes streamed), and against WebDataset streaming
tar shards of the same samples from the same server (``pipe``-free: its ``https?://`` handler, ``curl``, on
presigned URLs; WebDataset must be installed, as ``datamount[bench]`` does).

    python benchmarks/bench_first_sample.py [--quick] [--runs N] [--server moto|seaweedfs|ceph]

The version has 2,400 samples of ~110 KB in shards of 256 MB (300 samples in 32 MB shards with ``--quick``); the tar
shards are cut at the same size. Prefer Ceph or SeaweedFS: moto copies the whole object for every ranged GET.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
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
imported = time.perf_counter() - started
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
print(json.dumps({"imported": imported, "first": first, "pass": done, "rss_mb": peak_rss_mb(), "samples": count}))
"""


#: The same in WebDataset: its tar shards streamed by ``curl`` from presigned URLs (given as JSON).
WEBDATASET_PASS = """
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from _harness import peak_rss_mb
import webdataset as wds
imported = time.perf_counter() - started
samples = wds.WebDataset(json.loads(sys.argv[1]), shardshuffle=False, empty_check=False).to_tuple("bin", "cls")
first = None
count = 0
for _ in samples:
    count += 1
    if first is None:
        first = time.perf_counter() - started
done = time.perf_counter() - started
print(json.dumps({"imported": imported, "first": first, "pass": done, "rss_mb": peak_rss_mb(), "samples": count}))
"""


def write_tars(list_file: Path, folder: Path, shard_bytes: int) -> list[Path]:
    """The list's samples as WebDataset tar shards of about ``shard_bytes`` each (``KEY.bin`` and ``KEY.cls``)."""
    groups: list[list[tuple[Path, str]]] = [[]]
    size = 0
    for line in list_file.read_text(encoding="utf-8").splitlines():
        path, label = line.split("\t")
        file = list_file.parent / path
        if groups[-1] and size + file.stat().st_size > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append((file, label))
        size += file.stat().st_size
    shards = []
    for number, group in enumerate(groups):
        shards.append(folder / f"shard-{number:05d}.tar")
        with tarfile.open(shards[-1], "w") as archive:
            for file, label in group:
                for suffix, content in (("bin", file.read_bytes()), ("cls", label.encode())):
                    member = tarfile.TarInfo(f"{file.stem}.{suffix}")
                    member.size = len(content)
                    archive.addfile(member, io.BytesIO(content))
    return shards


def presigned_tars(tars: list[Path], bucket: str, endpoint: str, keys: dict[str, str]) -> list[str]:
    """Upload ``tars`` to ``bucket`` and return a GET URL of each that needs no credentials (for ``curl``)."""
    import boto3

    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=keys["key"], aws_secret_access_key=keys["secret"]
    )
    urls = []
    for tar in tars:
        client.upload_file(str(tar), bucket, f"wds/{tar.name}")
        urls.append(
            client.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": f"wds/{tar.name}"}, ExpiresIn=6 * 3600
            )
        )
    return urls


def one_pass(url: str, environment: dict[str, str], mode: str) -> dict[str, float]:
    code = WEBDATASET_PASS if mode == "webdataset" else PASS
    done = subprocess.run(
        [sys.executable, "-c", code, url, mode, str(Path(__file__).resolve().parent)],
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
        list_file = make_dataset(Path(tmp) / "source", count, 110_000)
        upload(list_file, "packed", store=store)
        shards = len(pack("packed", store=store, shard_bytes=shard_bytes).shards)
        tars: list[str] = []
        if importlib.util.find_spec("webdataset") is None or shutil.which("curl") is None:
            print("WebDataset or curl is not installed (pip install webdataset); left out", file=sys.stderr)
        else:
            tars = presigned_tars(write_tars(list_file, Path(tmp), shard_bytes), bucket, endpoint, keys)
        # The fresh processes find the server the way a job does: from the environment.
        environment = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": keys["key"],
            "AWS_SECRET_ACCESS_KEY": keys["secret"],
        }
        found: dict[str, list[dict[str, float]]] = {"stream": [], "cache": [], **({"webdataset": []} if tars else {})}
        sources = {mode: json.dumps(tars) if mode == "webdataset" else url for mode in found}
        for mode in found:  # untimed: each kind's imports compiled and cached (harness.cache_bytecode), as a user's are
            one_pass(sources[mode], environment, mode)
        for _ in range(args.runs):
            for mode in found:
                found[mode].append(one_pass(sources[mode], environment, mode))
                if found[mode][-1]["samples"] != count:
                    raise SystemExit(f"{mode}: {found[mode][-1]['samples']} samples, not {count}")
    print(f"\nA fresh process's pass over {count} x 110 KB in {shards} shard(s), {args.server}, median of {args.runs}")
    print(f"{'pass':<28} {'import':>8} {'first sample':>14} {'whole pass':>11} {'peak RSS':>9}  (after the import)")
    labels = {
        "stream": "streamed row groups",
        "cache": "whole shards (cache=DIR)",
        "webdataset": f"WebDataset, {len(tars)} tar(s)",
    }

    def after_import(mode: str, key: str) -> float:
        return statistics.median(r[key] - r["imported"] for r in found[mode])

    for mode, label in labels.items():
        if mode not in found:
            continue
        imported = statistics.median(r["imported"] for r in found[mode])
        rss = statistics.median(r["rss_mb"] for r in found[mode])
        first, whole = after_import(mode, "first"), after_import(mode, "pass")
        print(f"{label:<28} {imported:>6.2f} s {first * 1e3:>11.1f} ms {whole:>9.2f} s {rss:>6.0f} MB")
    if "webdataset" not in found:
        return
    ratio = after_import("webdataset", "pass") / after_import("stream", "pass")
    print(
        f"\nstreamed pass: {ratio:.2f}x WebDataset's rate after the imports (target >= 1.2x). WebDataset imports torch "
        "(most of its import time and memory); its curl processes are not counted."
    )


if __name__ == "__main__":
    main()
