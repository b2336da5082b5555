"""Drivers of the two-node Ray tests, run inside a node's namespace: ``python -m tests.datacenter._ray_driver
COMMAND JSON``. Each prints one JSON line of results (a trainer prints one line per row).

- ``start-master``: start the task master of a dataset (a detached actor: it outlives this process).
- ``status``: the master's queue status and restarts.
- ``trainer``: a trainer reading one pass through ``dist_reader``, joined to the node at ``node``; prints
  ``{"row": SOURCE, "t": TIME}`` per row.
- ``pack``: ``pack_ray`` of a dataset; after ``kill_after`` shards are written, every process of namespace
  ``kill_namespace`` is SIGKILLed (the worker node is lost mid-pack).
- ``read-version``: ``datamount.ray.read_version`` of a dataset, the worker node lost once ``kill_after`` blocks
  have come; whether the rows equal ``reader()``'s.
- ``write-version``: ``datamount.ray.write_version`` of ``rows`` generated rows in ``blocks`` blocks, the worker node
  lost once the first shard is in the store (``kill_namespace``; none without it); how long it took.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import ray

from tests.servers._launch import environment_path


def start_master(config: dict[str, Any]) -> None:
    from datamount.readers.master import start_master

    ray.init(address=config["address"], _node_ip_address=config["node"], logging_level="WARNING")
    master = start_master(
        config["dataset"],
        config["store"],
        namespace=config["namespace"],
        rows_per_task=config["rows_per_task"],
        lease_timeout=config["lease_timeout"],
        passes=1,
    )
    print(json.dumps({"tasks": master.status().tasks}), flush=True)


def status(config: dict[str, Any]) -> None:
    from datamount.readers.master import connect

    ray.init(address=config["address"], _node_ip_address=config["node"], logging_level="WARNING")
    master = connect(config["dataset"], namespace=config["namespace"])
    found = master.status()
    troubled = [
        {"start": r.task.start, "stop": r.task.stop, "leases": r.leases, "expired": r.expired, "state": r.state,
         "reason": r.reason}
        for r in found.troubled
    ]  # fmt: skip
    print(json.dumps({"finished": found.finished, "done": found.done, "failed": found.failed,
                      "troubled": troubled, "restarts": master.info().restarts}), flush=True)  # fmt: skip


def trainer(config: dict[str, Any]) -> None:
    from datamount.readers.master import dist_reader

    ray.init(address=config["address"], _node_ip_address=config["node"], logging_level="WARNING")
    samples = dist_reader(config["dataset"], config["store"], namespace=config["namespace"], trainer=config["name"])
    print(json.dumps({"ready": ray.get_runtime_context().get_node_id()}), flush=True)
    for source, _ in samples():
        print(json.dumps({"row": source, "t": time.time()}), flush=True)
        time.sleep(config["delay"])


def kill_namespace(namespace: str) -> int:
    """SIGKILL every process of network namespace ``namespace``; how many there were."""
    ip = shutil.which("ip", path=environment_path()) or "ip"
    listed = subprocess.run([ip, "netns", "pids", namespace], capture_output=True, text=True, check=True)
    for pid in listed.stdout.split():
        os.kill(int(pid), signal.SIGKILL)
    return len(listed.stdout.split())


class KillNamespace:
    """Progress that SIGKILLs every process of a namespace once ``after`` shards are written."""

    def __init__(self, namespace: str, after: int) -> None:
        self.namespace, self.after, self.units = namespace, after, 0
        self.killed_at: float | None = None
        self.killed = 0

    def start(self, phase: str, *, items: int, size: int) -> None:
        pass

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        self.units += 1
        if self.units == self.after and self.killed_at is None:
            self.killed = kill_namespace(self.namespace)
            self.killed_at = time.monotonic()

    def finish(self) -> None:
        pass


def pack(config: dict[str, Any]) -> None:
    from datamount.datasets.pack_ray import pack_ray

    ray.init(address=config["address"], _node_ip_address=config["node"], logging_level="WARNING")
    nodes = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]}
    kill = KillNamespace(config["kill_namespace"], config["kill_after"])
    started = time.monotonic()
    outcome: dict[str, Any] = {"nodes": sorted(nodes.values())}
    try:
        manifest = pack_ray(config["dataset"], store=config["store"], shard_bytes=config["shard_bytes"], progress=kill)
        outcome.update(shards=len(manifest.shards), version=manifest.version)
    except Exception as exc:  # reported to the test, which checks what the store holds
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    outcome.update(
        seconds=time.monotonic() - started,
        after_kill=None if kill.killed_at is None else time.monotonic() - kill.killed_at,
        killed_processes=kill.killed,
        units_before_kill=kill.after,
    )
    print(json.dumps(outcome), flush=True)


def ray_data_driver(config: dict[str, Any]) -> dict[str, Any]:
    """Join the cluster for Ray Data (blocks in order, no progress bars); the live nodes' addresses."""
    import ray.data

    ray.init(address=config["address"], _node_ip_address=config["node"], logging_level="WARNING")
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order, context.enable_progress_bars = True, False
    return {"nodes": sorted(node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"])}


def read_version(config: dict[str, Any]) -> None:
    from datamount.ray import read_version
    from datamount.readers import reader

    outcome = ray_data_driver(config)
    started = time.monotonic()
    dataset = read_version(config["dataset"], store=config["store"], override_num_blocks=config["blocks"])
    rows, killed, killed_at = [], 0, None
    for number, batch in enumerate(dataset.iter_batches(batch_size=None, batch_format="pyarrow"), start=1):
        rows.extend(zip(*(batch.column(name).to_pylist() for name in batch.column_names), strict=True))
        if number == config["kill_after"]:
            killed, killed_at = kill_namespace(config["kill_namespace"]), time.monotonic()
    expected = list(reader(config["dataset"], config["store"])())
    outcome.update(rows=len(rows), equal=rows == expected, killed_processes=killed, seconds=time.monotonic() - started,
                   after_kill=None if killed_at is None else time.monotonic() - killed_at)  # fmt: skip
    print(json.dumps(outcome), flush=True)


def generated(batch: dict[str, Any], delay: float) -> dict[str, Any]:
    """Rows made from their ``id`` alone (the same in every attempt of a task), each batch ``delay`` seconds late:
    the worker node is lost while tasks run."""
    time.sleep(delay)
    ids = batch["id"]
    return {"id": ids, "text": [f"row {i}" for i in ids], "blob": [int(i).to_bytes(8, "little") * 4 for i in ids]}


def write_version(config: dict[str, Any]) -> None:
    import ray.data

    from datamount.ray import write_version
    from datamount.storage import open_store

    outcome = ray_data_driver(config)
    store = open_store(config["store"])
    packs = f"datasets/{config['dataset']}/packs"
    killed: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:  # the worker node is lost once the first shard is stored
        while not done.is_set() and not store.list(packs):
            done.wait(0.02)
        if not done.is_set():
            killed["processes"], killed["at"] = kill_namespace(config["kill_namespace"]), time.monotonic()

    watcher = threading.Thread(target=watch)
    if config.get("kill_namespace"):
        watcher.start()
    started = time.monotonic()
    source = ray.data.range(config["rows"], override_num_blocks=config["blocks"])
    rows = source.map_batches(generated, fn_kwargs={"delay": config.get("delay", 0.0)})
    try:
        manifest = write_version(rows, config["dataset"], store=store, row_group_bytes=1 << 20)
        outcome.update(version=manifest.version, rows=manifest.rows, shards=len(manifest.shards))
    except Exception as exc:  # reported to the test, which checks what the store holds
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - started
    done.set()
    if watcher.ident is not None:
        watcher.join()
    outcome.update(seconds=seconds, killed_processes=killed.get("processes", 0),
                   after_kill=started + seconds - killed["at"] if "at" in killed else None)  # fmt: skip
    print(json.dumps(outcome), flush=True)


COMMANDS = {"start-master": start_master, "status": status, "trainer": trainer, "pack": pack,
            "read-version": read_version, "write-version": write_version}  # fmt: skip

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
