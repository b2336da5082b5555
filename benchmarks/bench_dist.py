"""The task master and Ray packing against references measured in the same run, on a local Ray cluster.

    python benchmarks/bench_dist.py [--quick] [--runs N] [--cpus N]

1. Tasks handed out per second by the master (``get_task`` + ``finish`` per task), from one client and from two
   client processes at once; reference: the same number of calls to a Ray actor method that does nothing.
2. One pass over a packed dataset (784-byte samples) by 2 trainer processes (Ray actors, each reader made once)
   taking tasks with ``dist_reader``; reference: 2 such processes each reading its static share with
   ``reader(rank=, world_size=2)``. Also this process reading the whole pass with ``reader``.
3. ``pack_ray`` on the cluster's CPUs against the local ``pack``, for images (64 KB files) and text lines; MB/s of
   sample data. The cluster is started before the timing (its start-up is reported on its own).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, interleaved_medians, median_seconds, print_rows

from datamount.datasets import catalog, layout
from datamount.datasets.pack import pack
from datamount.datasets.pack_ray import pack_ray
from datamount.datasets.upload import upload
from datamount.readers.master import DistReader, Lease, start_master, stop_master
from datamount.storage import Store, open_store


class _Idle:
    """An actor whose method does nothing: the floor of a Ray actor call."""

    def call(self, *args: Any) -> None:
        return None


def _hand_out(name: str, namespace: str, seconds: float) -> int:
    """Take and finish tasks for ``seconds``; the number taken (run as a Ray task)."""
    from datamount.readers.master import connect

    client = connect(name, namespace=namespace)
    taken, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = client.get_task(f"bench-{os.getpid()}")
        if isinstance(answer, Lease):
            client.finish(answer)
            taken += 1
    return taken


def _idle_calls(actor: Any, seconds: float) -> int:
    import ray

    calls, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        ray.get(actor.call.remote())
        ray.get(actor.call.remote())
        calls += 1
    return calls


class _Trainer:
    """A trainer process (a Ray actor): its reader is made once, then each call reads one pass."""

    def __init__(self, how: str, name: str, store: Store, namespace: str, rank: int) -> None:
        from datamount.readers import reader

        if how == "dist":
            self.samples: Any = DistReader(name, store, namespace=namespace)
        else:
            self.samples = reader(name, store, rank=rank, world_size=2)

    def one_pass(self) -> int:
        return sum(1 for _ in self.samples())


def make_images(folder: Path, count: int, size: int) -> Path:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        (folder / f"data/{i:06d}.bin").write_bytes(os.urandom(size))
        rows.append(f"data/{i:06d}.bin\t{i % 10}\n")
    list_file = folder / "samples.list"
    list_file.write_text("".join(rows), encoding="utf-8")
    return list_file


def make_text(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    list_file = folder / "pairs.list"
    words = ["le", "chat", "noir", "dort", "sur", "un", "tapis", "rouge", "près", "du", "feu"]
    lines = (" ".join(words[(i + k) % len(words)] for k in range(6 + i % 9)) for i in range(count))
    list_file.write_text("".join(f"{line}\t{line.upper()}\n" for line in lines), encoding="utf-8")
    return list_file


def master_rate(ray: Any, store: Store, tasks: int, seconds: float, runs: int) -> list[Row]:
    source = make_text(Path(store.root) / "src-rate", tasks)
    upload(source, "rate", store=store)
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    start_master("rate", store, namespace=namespace, rows_per_task=1, lease_timeout=600)
    idle = ray.remote(num_cpus=0)(_Idle).remote()
    ray.get(idle.call.remote())
    hand_out, idle_calls = ray.remote(num_cpus=1)(_hand_out), ray.remote(num_cpus=1)(_idle_calls)
    rows = []
    try:
        for clients in (1, 2):
            ours, reference = [], []
            for _ in range(runs):
                ours.append(sum(ray.get([hand_out.remote("rate", namespace, seconds) for _ in range(clients)])))
                reference.append(sum(ray.get([idle_calls.remote(idle, seconds) for _ in range(clients)])))
            ours.sort()
            reference.sort()
            rows.append(
                Row(
                    "master",
                    f"get_task+finish, {clients} client{'s' if clients > 1 else ''}",
                    ours[len(ours) // 2] / seconds,
                    reference[len(reference) // 2] / seconds,
                    "tasks/s",
                    "2 no-op actor calls",
                )
            )
    finally:
        stop_master("rate", namespace=namespace)
        ray.kill(idle)
    return rows


def reading_overhead(ray: Any, list_file: Path, tmp: Path, count: int, row_group_bytes: int, runs: int) -> list[Row]:
    """One pass by 2 trainers with dist_reader, by 2 static shares, and by one process reading it all."""
    store = open_store(tmp / f"store-read-{row_group_bytes}")
    upload(list_file, "read", store=store)
    pack("read", store=store, row_group_bytes=row_group_bytes)
    tasks = sum(len(shard.row_groups) for shard in catalog.resolve(store, "read").shards)
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    start_master("read", store, namespace=namespace, lease_timeout=600)
    # Both kinds of trainers are alive at once but read in turn: none reserves a CPU, or 4 would not fit in 2.
    trainer = ray.remote(num_cpus=0)(_Trainer)
    trainers = {
        how: [trainer.remote(how, "read", store, namespace, rank) for rank in range(2)] for how in ("dist", "static")
    }

    def two_trainers(how: str) -> None:
        counts = ray.get([one.one_pass.remote() for one in trainers[how]])
        if (how == "static" and sum(counts) != count) or (how == "dist" and sum(counts) % count):
            raise RuntimeError(f"{how}: the trainers read {counts} samples of {count}")

    from datamount.readers import reader

    whole = reader("read", store, rank=0, world_size=1)
    try:
        two_trainers("dist")  # the trainers start and make their readers here, not in the timed runs
        two_trainers("static")
        actions = {
            "dist": lambda: two_trainers("dist"),
            "static": lambda: two_trainers("static"),
            "one": lambda: sum(1 for _ in whole()),
        }
        times = interleaved_medians(actions, runs)
    finally:
        for one in (*trainers["dist"], *trainers["static"]):
            ray.kill(one)
        stop_master("read", namespace=namespace)
    static, what = count / times["static"], f"{count} x 784 B, {row_group_bytes >> 20} MB groups"
    return [
        Row(f"{tasks} tasks", f"{what}, dist_reader x2", count / times["dist"], static, "samples/s", "2 static shares"),
        Row("1 process", f"{what}, reader", count / times["one"], static, "samples/s", "2 static shares"),
    ]


def packing_speedup(store_root: Path, source: Path, label: str, runs: int) -> Row:
    stores = {"local": open_store(store_root / "local"), "ray": open_store(store_root / "ray")}
    originals = {}
    for how, store in stores.items():
        manifest = upload(source, "p", store=store).manifest
        originals[how] = (manifest, manifest.to_json())
    data_mb = (sum(f.size for f in originals["local"][0].files) or source.stat().st_size) / 1e6

    def unpack(how: str) -> None:
        manifest, body = originals[how]
        store = stores[how]
        store.remove(f"{layout.dataset_folder('p')}/packs", recursive=True, missing_ok=True)
        store.write(layout.manifest_path("p", manifest.version), body)

    shard = max(1, int(data_mb * 1e6) // 8)  # 8 shards: work for every CPU, and more than one round of tasks
    sizes = {"shard_bytes": shard, "row_group_bytes": min(8 << 20, max(1, shard // 4))}
    pack_ray("p", store=stores["ray"], **sizes)  # Ray's workers start and import here, untimed
    unpack("ray")
    local = median_seconds(lambda: pack("p", store=stores["local"], **sizes), runs, setup=lambda: unpack("local"))
    distributed = median_seconds(lambda: pack_ray("p", store=stores["ray"], **sizes), runs, setup=lambda: unpack("ray"))
    shards = len(catalog.resolve(stores["ray"], "p").shards)
    return Row("pack", f"{label}, {shards} shards", data_mb / distributed, data_mb / local, "MB/s", "local pack")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per figure (median reported)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    args = parser.parse_args()
    runs = args.runs or (3 if args.quick else 5)
    seconds = 0.25 if args.quick else 3.0
    tasks, samples, images, lines = (10_000, 4_000, 64, 20_000) if args.quick else (100_000, 200_000, 3_000, 1_000_000)
    import ray

    with tempfile.TemporaryDirectory(prefix="datamount-bench-dist-") as folder:
        tmp = Path(folder)
        started = time.perf_counter()
        ray.init(
            num_cpus=args.cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            logging_level=logging.WARNING,
            _temp_dir=str(tmp / "ray"),
        )
        print(f"local Ray cluster ({args.cpus} CPUs) started in {time.perf_counter() - started:.1f} s")
        try:
            store = open_store(tmp / "store")
            rows = master_rate(ray, store, tasks, seconds, runs)
            small = make_images(tmp / "read", samples, 784)
            for row_group_bytes in (1 << 20, 8 << 20):
                rows += reading_overhead(ray, small, tmp, samples, row_group_bytes, runs)
            rows.append(
                packing_speedup(
                    tmp / "pack-images", make_images(tmp / "img", images, 64_000), f"{images} x 64 KB", runs
                )
            )
            rows.append(packing_speedup(tmp / "pack-text", make_text(tmp / "txt", lines), f"{lines} lines", runs))
        finally:
            ray.shutdown()
    print_rows(rows, f"Task master and Ray pack, {args.cpus} CPUs, median of {runs} runs (ratio > 1: ours is faster)")


if __name__ == "__main__":
    main()
