"""``import --from-format webdataset`` of tar shards on S3 (SeaweedFS) against the two ways a user has without it:
fetching the tars, unpacking them (``tar -x``) and ``upload --pack`` of the files; and reading the tars with
WebDataset alone (its own reader over HTTP, through curl, as it reads remote shards).

    python benchmarks/bench_import.py [--quick] [--runs N] [--size 10GB] [--sample-size 110KB] [--server NAME]

Each way runs in a fresh process (the ``datamount`` command, a shell pipeline, ``python -c``), interleaved, medians
of ``--runs``; every import writes to a prefix that holds nothing yet. Reported: MB/s of source bytes, the ratio, and
CPU seconds per GB in the client processes and in the server. The shards are made once, in a temporary folder and
on the server, sized after the free disk (``--size`` may take at most a fifth of it: the source, its copy on the
server, the imported version, the unpacked files and their upload), and removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS, Cost, Measure, costed_row, make_bucket, print_rows, processes_cpu_seconds

from datamount.cli.options import parse_size
from datamount.storage import open_store

BUCKET = "bench-import"
SHARD_BYTES = 256 << 20
DATAMOUNT = [str(Path(sys.executable).with_name("datamount"))]

UNPACK_AND_UPLOAD = """
set -euo pipefail
mkdir -p "$WORK/files"
for url in $URLS; do curl -sf "$url" | tar -x -C "$WORK/files"; done
"$PYTHON" -c "$WRITE_LIST" "$WORK/files"
"$DATAMOUNT" upload "$WORK/files/train.list" unpacked --pack -q "$@"
rm -rf "$WORK/files"
"""
WRITE_LIST = """
import pathlib, sys
folder = pathlib.Path(sys.argv[1])
rows = [f"{p.name}\\t{p.with_suffix('.cls').read_text()}\\n" for p in sorted(folder.glob("*.jpg"))]
(folder / "train.list").write_text("".join(rows))
"""

WEBDATASET_PASS = """
import sys, webdataset as wds
total = 0
for sample in wds.WebDataset(sys.argv[1:], shardshuffle=False, empty_check=False):
    total += len(sample["jpg"]) + len(sample["cls"])
print(total)
"""


def make_shards(folder: Path, total: int, sample: int) -> list[Path]:
    """WebDataset shards of about :data:`SHARD_BYTES` holding ``total`` bytes of ``sample``-byte JPEG-headed noise
    and a class each, written by WebDataset's own ``ShardWriter``."""
    import webdataset

    folder.mkdir(parents=True)
    rng = random.Random(0)
    count = max(1, total // sample)
    with webdataset.ShardWriter(str(folder / "train-%06d.tar"), maxsize=SHARD_BYTES, verbose=0) as sink:
        for number in range(count):
            image = b"\xff\xd8\xff\xe0" + rng.randbytes(sample - 4)
            sink.write({"__key__": f"{number:08d}", "jpg": image, "cls": str(number % 1000).encode()})
    return sorted(folder.iterdir())


def child_costs(actions: dict[str, Callable[[int], object]], runs: int, server_pid: int) -> dict[str, Cost]:
    """Each action's median wall time, CPU seconds of the processes it waited for, and the server's, over ``runs``
    interleaved rounds (round ``n`` passed to the action, for its fresh prefix)."""
    found: dict[str, list[tuple[float, float, float]]] = {name: [] for name in actions}
    names = list(actions)
    for round_number in range(runs):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            os.sync()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            server_before = processes_cpu_seconds([server_pid])
            started = time.perf_counter()
            actions[name](round_number)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            found[name].append((wall, cpu, processes_cpu_seconds([server_pid]) - server_before))
    return {name: Cost(*(statistics.median(t[i] for t in times) for i in range(3))) for name, times in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="24 MB of shards, one run: a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per way (median reported)")
    parser.add_argument("--size", default="10GB", help="bytes of samples in the shards (default 10GB)")
    parser.add_argument("--sample-size", default="110KB", help="bytes per sample's image (default 110KB)")
    parser.add_argument("--server", choices=["seaweedfs", "moto"], default="seaweedfs")
    args = parser.parse_args()
    total = parse_size("24MB" if args.quick else args.size)
    sample = parse_size(args.sample_size)
    runs = 1 if args.quick else args.runs
    with tempfile.TemporaryDirectory(prefix="datamount-bench-import-") as tmp:
        free = shutil.disk_usage(tmp).free
        if total * 5 > free:
            parser.error(f"--size {total:,} B needs five times its bytes on disk; {free:,} B are free")
        shards = make_shards(Path(tmp) / "source", total, sample)
        source_bytes = sum(path.stat().st_size for path in shards)
        with S3_SERVERS[args.server]() as (endpoint, pid):
            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
            make_bucket("s3", BUCKET, **options)
            source = open_store(f"s3://{BUCKET}/source", **options)
            for path in shards:
                source.put_file(str(path), path.name)
            for path in shards:
                path.unlink()
            pattern = f"s3://{BUCKET}/source/train-{{000000..{len(shards) - 1:06d}}}.tar"
            urls = [f"{endpoint}/{BUCKET}/source/{path.name}" for path in shards]
            flags = [f"endpoint_url={endpoint}", "key=bench", "secret=bench-secret"]
            env = {**os.environ, "WORK": tmp, "URLS": " ".join(urls), "PYTHON": sys.executable}
            env |= {"WRITE_LIST": WRITE_LIST, "DATAMOUNT": DATAMOUNT[0]}

            def store_url(way: str, round_number: int) -> str:
                return f"s3://{BUCKET}/{way}-{round_number}"

            def ours(round_number: int) -> None:
                command = [*DATAMOUNT, "import", "--from-format", "webdataset", pattern, "imported", "-q"]
                command += [arg for flag in flags for arg in ("--from-option", flag)]
                command += [arg for flag in flags for arg in ("-o", flag)]
                subprocess.run([*command, "--store", store_url("import", round_number)], check=True)

            def unpack_and_upload(round_number: int) -> None:
                store = ["--store", store_url("upload", round_number), *(a for f in flags for a in ("-o", f))]
                subprocess.run(["bash", "-c", UNPACK_AND_UPLOAD, "bash", *store], check=True, env=env)

            def webdataset_pass(round_number: int) -> None:
                subprocess.run([sys.executable, "-c", WEBDATASET_PASS, *urls], check=True, stdout=subprocess.DEVNULL)

            costs = child_costs(
                {"import": ours, "unpack+upload": unpack_and_upload, "webdataset": webdataset_pass}, runs, pid
            )
        amounts = dict.fromkeys(costs, float(source_bytes))
        measure = Measure("MB/s", 1e6, "GB", 1e9)
        operation = f"{source_bytes / 1e9:.2f} GB of tars"
        rows = [
            costed_row(
                args.server, operation, costs, amounts, "import", "unpack+upload", "tar -x + upload --pack", measure
            ),
            costed_row(
                args.server, operation, costs, amounts, "import", "webdataset", "WebDataset's reader alone", measure
            ),
        ]
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print_rows(rows, f"import --from-format webdataset, {len(shards)} shard(s), median of {runs} run(s); load {load}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
