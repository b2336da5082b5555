"""A two-node Ray cluster across network namespaces: the head in one, a worker node in another, joined by a veth
pair (:mod:`tests.servers.netns`); the worker node can be lost (every process in its namespace SIGKILLed) and
started again.

Each node runs ``ray start --block`` with its own address and temporary folder. Ray finds the raylet a driver joins
by looking at the machine's processes, which a namespace does not hide, and prefers the head's: a driver meant for the
worker node calls ``ray.init(address, _node_ip_address=WORKER)`` first (:data:`JOIN_NODE`). Token authentication is
off (the cluster is reachable only from its own namespaces).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers._launch import ServerStartError, log_tail
from tests.servers.netns import Link, Namespace, link, make_namespace

HEAD_PORT = 6379
START_TIMEOUT = 180.0
#: The environment of every process of the cluster and of its drivers.
RAY_ENVIRONMENT = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
#: Python that joins the worker node's raylet (``ray.init`` would otherwise pick the head's): format with
#: ``address`` and ``node``.
JOIN_NODE = "import ray; ray.init(address={address!r}, _node_ip_address={node!r}, logging_level='WARNING')"


def environment() -> dict[str, str]:
    return {**os.environ, **RAY_ENVIRONMENT}


@dataclass
class RayNodes:
    """The head (namespace :attr:`head`, address :attr:`head_ip`) and a worker node (namespace :attr:`worker`)."""

    head: Namespace
    worker: Namespace
    link: Link
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    worker_starts: int = 0

    @property
    def head_ip(self) -> str:
        return self.link.address_a

    @property
    def worker_ip(self) -> str:
        return self.link.address_b

    @property
    def address(self) -> str:
        """The cluster's address (the head's GCS), for ``ray.init`` and ``--address``."""
        return f"{self.head_ip}:{HEAD_PORT}"

    def popen(self, where: Namespace, argv: list[str], **options: object) -> subprocess.Popen[str]:
        """A process ``argv`` inside namespace ``where`` with the cluster's environment (the caller reaps it)."""
        return subprocess.Popen(where.command(argv), env=environment(), text=True, **options)  # type: ignore[call-overload]

    def _start(self, name: str, where: Namespace, arguments: list[str]) -> Path:
        ray = str(Path(sys.executable).parent / "ray")
        temp = self.workdir / name
        temp.mkdir(exist_ok=True)
        log = self.workdir / f"{name}.log"
        log.write_text("")
        command = [ray, "start", "--block", f"--temp-dir={temp}", "--disable-usage-stats", *arguments]
        with open(log, "ab") as out:
            self.processes[name] = subprocess.Popen(
                where.command(command), stdout=out, stderr=subprocess.STDOUT, env=environment(), start_new_session=True
            )
        return log

    def _wait_started(self, name: str, log: Path) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while "Ray runtime started" not in log.read_text(errors="replace"):
            process = self.processes[name]
            if process.poll() is not None or time.monotonic() > deadline:
                raise ServerStartError(f"Ray {name} did not start; {log} ends with:{log_tail(log)}")
            time.sleep(0.25)

    def start_worker(self) -> None:
        """Start (again) the worker node: 2 CPUs, on the worker namespace's address."""
        self.worker_starts += 1
        name = f"worker{self.worker_starts}"
        log = self._start(name, self.worker, [f"--address={self.address}", f"--node-ip-address={self.worker_ip}",
                                              "--num-cpus=2"])  # fmt: skip
        self._wait_started(name, log)

    def kill_worker(self) -> int:
        """SIGKILL every process of the worker node's namespace (raylet, workers, drivers): the node is lost. How
        many there were."""
        pids = self.worker.pids()
        for pid in pids:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                os.kill(pid, 9)
        for name, process in list(self.processes.items()):
            if name.startswith("worker"):
                process.wait(timeout=10)
                del self.processes[name]
        return len(pids)

    def stop(self) -> None:
        """Remove both namespaces (every process in them is killed) and the temporary folders."""
        for where in (self.worker, self.head):
            where.remove()
        for process in self.processes.values():
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                process.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_ray_nodes(*, worker: bool = True) -> RayNodes:
    """A head (1 CPU) in one new namespace and a worker node (2 CPUs) in another, joined by an uncapped veth pair;
    returns once both have started (the head only, without ``worker``: :meth:`RayNodes.start_worker` adds it)."""
    head, other = make_namespace(), make_namespace()
    nodes = RayNodes(head, other, link(other, head, rate=None), Path(tempfile.mkdtemp(prefix="datamount-ray-")))
    try:
        log = nodes._start("head", head, ["--head", f"--node-ip-address={nodes.head_ip}", f"--port={HEAD_PORT}",
                                          "--num-cpus=1", "--include-dashboard=false"])  # fmt: skip
        nodes._wait_started("head", log)
        if worker:
            nodes.start_worker()
    except BaseException:
        nodes.stop()
        raise
    return nodes
