"""Drivers of the two-node Ray tests, run inside a node's namespace: ``python -m tests.datacenter._ray_driver
COMMAND JSON``. Each prints one JSON line of results (a trainer prints one line per row).

- ``start-master``: start the task master of a dataset (a detached actor: it outlives this process).
- ``status``: the master's queue status and restarts.
- ``trainer``: a trainer reading one pass through ``dist_reader``, joined to the node at ``node``; prints
  ``{"row": SOURCE, "t": TIME}`` per row.
- ``pack``: ``pack_ray`` of a dataset; after ``kill_after`` shards are written, every process of namespace
  ``kill_namespace`` is SIGKILLed (the worker node is lost mid-pack).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
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
            ip = shutil.which("ip", path=environment_path()) or "ip"
            listed = subprocess.run([ip, "netns", "pids", self.namespace], capture_output=True, text=True, check=True)
            for pid in listed.stdout.split():
                os.kill(int(pid), signal.SIGKILL)
            self.killed = len(listed.stdout.split())
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


COMMANDS = {"start-master": start_master, "status": status, "trainer": trainer, "pack": pack}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
