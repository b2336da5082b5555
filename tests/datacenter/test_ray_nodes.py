"""A two-node Ray cluster across network namespaces (the head in one, a worker node in another) and the worker node
lost mid-pass: the task master and ``dist_reader`` finish the pass with trainers on both nodes, its leases handed
again after they expire; ``pack --ray`` finishes its version, or leaves none; Ray Data's ``read_version`` reads every
row, checked, and ``write_version`` commits one version without a duplicate row."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from datamount.datasets import catalog, layout
from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import Store, open_store
from tests.datacenter.conftest import FaultRecord, SourceImages, as_rows, require_namespaces
from tests.servers._launch import ServerStartError, cannot_run
from tests.servers.ray_nodes import RayNodes, environment, start_ray_nodes

pytestmark = [pytest.mark.datacenter, pytest.mark.ray, pytest.mark.timeout(400)]

ROOT = Path(__file__).resolve().parents[2]
ROWS = 600
ROWS_PER_TASK = 20
LEASE_TIMEOUT = 3.0
#: Rows the worker node's trainer reads before its node is lost.
KILL_AT = 60
#: Seconds a row takes to "train" on: the pass lasts long enough for both trainers to take tasks.
DELAY = 0.02


@pytest.fixture(scope="module")
def nodes() -> Iterator[RayNodes]:
    require_namespaces("Ray across namespaces")
    try:
        import ray  # noqa: F401
    except ImportError:
        cannot_run("Ray across namespaces", "Ray is not installed (pip install 'datamount[ray]')")
    try:
        started = start_ray_nodes(worker=False)
    except ServerStartError as exc:
        cannot_run("Ray across namespaces", str(exc))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def worker_up(nodes: RayNodes) -> RayNodes:
    """The cluster with its worker node running (started again after a test lost it)."""
    if not any(name.startswith("worker") for name in nodes.processes):
        nodes.start_worker()
    return nodes


def driver(nodes: RayNodes, command: str, config: dict[str, Any], *, on_worker: bool = False, timeout: float = 120
           ) -> dict[str, Any]:  # fmt: skip
    """Run a driver command of ``_ray_driver`` on the head (or the worker node); its JSON answer."""
    where, node = (nodes.worker, nodes.worker_ip) if on_worker else (nodes.head, nodes.head_ip)
    config = {"address": nodes.address, "node": node, **config}
    argv = [sys.executable, "-m", "tests.datacenter._ray_driver", command, json.dumps(config)]
    done = subprocess.run(where.command(argv), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=environment())  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1]))


class Trainer:
    """A trainer process on one node, its rows collected by a thread as they come."""

    def __init__(self, nodes: RayNodes, name: str, config: dict[str, Any], *, on_worker: bool) -> None:
        where, node = (nodes.worker, nodes.worker_ip) if on_worker else (nodes.head, nodes.head_ip)
        config = {"address": nodes.address, "node": node, "name": name, "delay": DELAY, **config}
        argv = [sys.executable, "-m", "tests.datacenter._ray_driver", "trainer", json.dumps(config)]
        self.process = nodes.popen(where, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        self.rows: list[tuple[str, float]] = []
        self.node = ""
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not line.startswith("{"):  # Ray's own messages
                continue
            answer = json.loads(line)
            if "ready" in answer:
                self.node = answer["ready"]
                self.ready.set()
            else:
                self.rows.append((answer["row"], answer["t"]))

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code


@pytest.fixture(scope="module")
def lines_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A local store (every node reaches the same folder, as a cluster's shared file system) with dataset
    ``lines`` of :data:`ROWS` distinct rows."""
    folder = tmp_path_factory.mktemp("ray-store")
    store = open_store(str(folder / "store"))
    source = folder / "lines.list"
    source.write_text("".join(f"s{i:04d}\tt{i:04d}\n" for i in range(ROWS)), encoding="utf-8")
    upload(source, "lines", store=store)
    return store


def test_a_lost_worker_node_s_leases_expire_and_every_task_is_done(nodes: RayNodes, lines_store: Store) -> None:
    common = {"dataset": "lines", "store": lines_store.url, "namespace": f"dc-{time.monotonic_ns()}"}
    # Started before the worker node joins, the master is on the head (a master lost with its node is restarted
    # from its snapshot, which may hand out again more than the lost trainer's two leases: docs/task-master.md).
    assert not any(name.startswith("worker") for name in nodes.processes), list(nodes.processes)
    started = driver(nodes, "start-master", {**common, "rows_per_task": ROWS_PER_TASK, "lease_timeout": LEASE_TIMEOUT})
    assert started["tasks"] == ROWS // ROWS_PER_TASK
    nodes.start_worker()
    doomed = Trainer(nodes, "on-worker-node", common, on_worker=True)
    deadline = time.monotonic() + 120
    while len(doomed.rows) < KILL_AT:
        assert doomed.process.poll() is None and time.monotonic() < deadline, "the worker node's trainer did not read"
        time.sleep(0.01)
    # The head's trainer joins the pass while the worker node's reads, then that node is lost.
    steady = Trainer(nodes, "on-head", common, on_worker=False)
    assert steady.ready.wait(120)
    assert doomed.node != steady.node  # each trainer joined its own node's raylet
    killed = nodes.kill_worker()
    killed_at = time.time()
    doomed.wait(30)
    assert steady.wait(180) == 0, steady.process.stderr.read() if steady.process.stderr else ""

    status = driver(nodes, "status", common)
    expected = [f"s{i:04d}" for i in range(ROWS)]
    read = [row for row, _ in doomed.rows] + [row for row, _ in steady.rows]
    assert sorted(set(read)) == expected  # every row read at least once
    assert (status["finished"], status["done"], status["failed"], status["restarts"]) == (
        True,
        ROWS // ROWS_PER_TASK,
        0,
        0,
    )
    expired = [report for report in status["troubled"] if report["expired"]]
    assert expired and all(report["state"] == "done" for report in expired)
    # At least once, and only the rows of the tasks the lost trainer held (the one it read and one read ahead).
    repeated = len(read) - ROWS
    assert 0 <= repeated <= sum(report["stop"] - report["start"] for report in expired) <= 2 * ROWS_PER_TASK, status
    first_again = min(t for row, t in steady.rows if any(r["start"] <= int(row[1:]) < r["stop"] for r in expired))
    FaultRecord(
        "ray 2 nodes (head + worker node)",
        "task master pass, 2 trainers",
        f"worker node: raylet, workers, trainer ({killed} processes, SIGKILL)",
        f"after the worker node's trainer read {KILL_AT} of {ROWS} rows",
        f"{len(expired)} leases expired and were handed to the head's trainer; pass finished",
        stall_s=first_again - killed_at,
        requests_repeated=len(expired),
        verified=f"{ROWS} rows, each at least once; {repeated} read twice",
        extra={"lease_timeout_s": LEASE_TIMEOUT, "master_restarts": status["restarts"], "troubled": status["troubled"]},
    ).save()


def test_pack_ray_loses_the_worker_node_and_commits_a_whole_version_or_none(
    worker_up: RayNodes, tmp_path: Path, source_images: SourceImages
) -> None:
    nodes = worker_up
    store = open_store(str(tmp_path / "store"))
    upload(source_images.list_file, "images", store=store)
    before = catalog.versions(store, "images")
    outcome = driver(
        nodes,
        "pack",
        {"dataset": "images", "store": store.url, "shard_bytes": 8 << 20, "kill_namespace": nodes.worker.name,
         "kill_after": 1},
        timeout=300,
    )  # fmt: skip
    nodes.kill_worker()  # reap what the driver killed
    # A set: a worker node started again after an earlier test lost it joins as a new node at the same address, and
    # the lost one can still be listed alive until the cluster's health checks give it up.
    assert set(outcome["nodes"]) == {nodes.head_ip, nodes.worker_ip}
    assert outcome["killed_processes"] > 0, outcome
    after = catalog.versions(store, "images")
    assert after == before  # a pack adds shards to its version, never a version
    latest = catalog.resolve(store, "images")
    if "error" in outcome:
        assert not latest.shards  # no half-made pack recorded
    else:
        assert len(latest.shards) == outcome["shards"]
        assert as_rows(list(reader("images", store)())) == source_images.rows
    FaultRecord(
        "ray 2 nodes (head + worker node)",
        "pack --ray",
        f"worker node ({outcome['killed_processes']} processes, SIGKILL)",
        f"after {outcome['units_before_kill']} of its shards were written",
        outcome.get("error", f"completed: {outcome.get('shards')} shards recorded"),
        stall_s=outcome["after_kill"] or 0.0,
        verified=f"{len(source_images.rows)} samples read back from the shards" if "error" not in outcome else "",
        extra={"seconds": outcome["seconds"]},
    ).save()


def written_columns(store: Store, name: str, columns: list[str]) -> dict[str, list[Any]]:
    """Columns of every shard of ``name``'s latest version, in its shards' order (read from the shared folder)."""
    manifest = catalog.resolve(store, name)
    tables = [pq.read_table(store.local_path(layout.shard_path(name, s)), columns=columns) for s in manifest.shards]
    return {column: [value for table in tables for value in table.column(column).to_pylist()] for column in columns}


def test_read_version_loses_the_worker_node_and_still_reads_every_row_checked(
    worker_up: RayNodes, tmp_path: Path, source_images: SourceImages
) -> None:
    nodes = worker_up
    store = open_store(str(tmp_path / "store"))
    upload(source_images.list_file, "images", store=store)
    pack("images", store=store, shard_bytes=8 << 20, row_group_bytes=1 << 20)
    outcome = driver(
        nodes,
        "read-version",
        {"dataset": "images", "store": store.url, "blocks": 16, "kill_after": 2, "kill_namespace": nodes.worker.name},
        timeout=300,
    )
    nodes.kill_worker()  # reap what the driver killed
    # A set: a worker node started again after an earlier test lost it joins as a new node at the same address, and
    # the lost one can still be listed alive until the cluster's health checks give it up.
    assert set(outcome["nodes"]) == {nodes.head_ip, nodes.worker_ip}
    assert outcome["killed_processes"] > 0, outcome
    assert outcome["rows"] == len(source_images.rows) and outcome["equal"], outcome
    FaultRecord(
        "ray 2 nodes (head + worker node)",
        "Ray Data read_version, 16 read tasks",
        f"worker node ({outcome['killed_processes']} processes, SIGKILL)",
        "after 2 of the dataset's blocks had come",
        "Ray ran the lost tasks again; every row read, equal to reader()'s",
        stall_s=outcome["after_kill"] or 0.0,
        verified=f"{outcome['rows']} rows equal to reader()'s, every byte checked",
        extra={"seconds": outcome["seconds"]},
    ).save()


def test_write_version_loses_the_worker_node_and_commits_once_without_a_duplicate(
    worker_up: RayNodes, tmp_path: Path
) -> None:
    nodes = worker_up
    store = open_store(str(tmp_path / "store"))
    rows = 24_000
    outcome = driver(
        nodes,
        "write-version",
        {"dataset": "made", "store": store.url, "rows": rows, "blocks": 24, "delay": 0.3,
         "kill_namespace": nodes.worker.name},
        timeout=300,
    )  # fmt: skip
    nodes.kill_worker()
    assert outcome["killed_processes"] > 0, outcome
    assert "error" not in outcome, outcome
    assert catalog.versions(store, "made") == [outcome["version"]] == [1]
    written = written_columns(store, "made", ["id", "index"])
    assert sorted(written["id"]) == list(range(rows))  # every row once
    assert written["index"] == list(range(rows))  # numbered without a gap, in the shards' order
    manifest = catalog.resolve(store, "made")
    assert sorted(store.list("datasets/made/packs")) == sorted(layout.shard_path("made", s) for s in manifest.shards)
    assert sorted(reader("made", store)())[:2] == [(0, "row 0", bytes(32)), (1, "row 1", (1).to_bytes(8, "little") * 4)]
    FaultRecord(
        "ray 2 nodes (head + worker node)",
        "Ray Data write_version, 24 write tasks",
        f"worker node ({outcome['killed_processes']} processes, SIGKILL)",
        "once the first shard was stored",
        f"Ray ran the lost tasks again; one version of {rows} rows, {outcome['shards']} shards committed",
        stall_s=outcome["after_kill"] or 0.0,
        verified=f"{rows} rows, each once, numbered 0..{rows - 1}; no file but the committed shards",
        extra={"seconds": outcome["seconds"]},
    ).save()


@pytest.mark.slow
def test_write_version_of_a_million_small_rows_on_two_nodes_commits_once(worker_up: RayNodes, tmp_path: Path) -> None:
    nodes = worker_up
    store = open_store(str(tmp_path / "store"))
    rows = 1_000_000
    outcome = driver(
        nodes, "write-version", {"dataset": "million", "store": store.url, "rows": rows, "blocks": 20}, timeout=300
    )
    assert "error" not in outcome, outcome
    assert catalog.versions(store, "million") == [1] and outcome["rows"] == rows
    written = written_columns(store, "million", ["id", "index"])
    assert written["index"] == list(range(rows)) and sorted(written["id"]) == list(range(rows))
    print(f"write_version of {rows:,} rows on 2 nodes: {outcome['seconds']:.1f} s, {outcome['shards']} shards")
