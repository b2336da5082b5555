"""The task master on a local Ray cluster and ``dist_reader``: trainers share passes, survive a killed trainer and a
killed master, and a task that always fails does not stall the pass."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import catalog
from datamount.datasets.rows import object_locations, read_lines
from datamount.datasets.upload import upload
from datamount.readers.dataset import reader
from datamount.readers.errors import MasterExistsError, MasterFinishedError, MasterNotFoundError, MasterUnavailableError
from datamount.readers.master import (
    DistReader,
    MasterClient,
    connect,
    dist_reader,
    snapshot_path,
    start_master,
    stop_master,
    use_master,
)
from datamount.storage import Store
from tests.generated import MakeImageList

ROWS = 60

TRAINER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from datamount.readers.master import dist_reader

    address, store, namespace, name, delay, go = sys.argv[1:7]
    samples = dist_reader("lines", store, address=address, namespace=namespace, trainer=name)
    print("ready", flush=True)
    while go != "-" and not Path(go).exists():
        time.sleep(0.02)
    for source, _ in samples():
        print(source, flush=True)
        time.sleep(float(delay))
    """
)


@pytest.fixture
def lines(local_store: Store, tmp_path: Path) -> list[tuple[str, str]]:
    """A text dataset ``lines`` of :data:`ROWS` distinct rows in the local store; its rows."""
    rows = [(f"s{i:03d}", f"t{i:03d}") for i in range(ROWS)]
    source = tmp_path / "lines.list"
    source.write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    upload(source, "lines", store=local_store)
    return rows


@pytest.fixture
def namespace() -> Iterator[str]:
    """A Ray namespace of the test's own; every master left in it is stopped afterwards."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    for dataset in ("lines", "pictures"):
        with contextlib.suppress(MasterNotFoundError):
            stop_master(dataset, namespace=name, timeout=10)


def run_trainers(
    script: Path, address: str, store: Store, namespace: str, delays: list[float], go: Path | None
) -> list[subprocess.Popen[str]]:
    script.write_text(TRAINER, encoding="utf-8")
    trainers = [
        subprocess.Popen(
            [sys.executable, str(script), address, store.url, namespace, f"trainer-{n}", str(delay), str(go or "-")],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n, delay in enumerate(delays)
    ]
    for trainer in trainers:
        assert trainer.stdout is not None and trainer.stdout.readline() == "ready\n"
    return trainers


def wait_for(condition: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.05)


def cluster_address() -> str:
    """The address of the session's Ray cluster, for trainer processes."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_trainer_processes_share_a_pass_exactly(
    local_store: Store, lines: list[tuple[str, str]], namespace: str, tmp_path: Path
) -> None:
    master = start_master("lines", local_store, namespace=namespace, rows_per_task=4, passes=1, lease_timeout=60)
    go = tmp_path / "go"
    trainers = run_trainers(tmp_path / "trainer.py", cluster_address(), local_store, namespace, [0.02] * 3, go)
    go.touch()
    outputs = [trainer.communicate(timeout=90)[0].split() for trainer in trainers]
    assert [trainer.returncode for trainer in trainers] == [0, 0, 0]
    read = [row for output in outputs for row in output]
    assert sorted(read) == [source for source, _ in lines]
    assert sum(1 for output in outputs if output) >= 2
    status = master.status()
    assert (status.finished, status.done, status.failed, status.troubled) == (True, 15, 0, ())


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_killed_trainers_task_is_read_by_another(
    local_store: Store, lines: list[tuple[str, str]], namespace: str, tmp_path: Path
) -> None:
    master = start_master("lines", local_store, namespace=namespace, rows_per_task=6, passes=1, lease_timeout=3)
    [victim] = run_trainers(tmp_path / "trainer.py", cluster_address(), local_store, namespace, [600], None)
    assert victim.stdout is not None
    first_row = victim.stdout.readline().strip()
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    survivor = dist_reader("lines", local_store, namespace=namespace, trainer="survivor")
    read = [source for source, _ in survivor()]
    assert sorted(read) == [source for source, _ in lines]
    assert first_row == "s000" and first_row in read
    status = master.status()
    assert (status.finished, status.done, status.failed) == (True, 10, 0)
    # The victim held the task it was reading and, read ahead, the next one: both expired and were read again.
    assert [report.task.start for report in status.troubled] in ([0], [0, 6])
    for report in status.troubled:
        assert (report.leases, report.expired, report.state) == (2, 1, "done")
        assert "trainer-0" in report.reason


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_killed_master_is_restarted_by_ray_and_continues_the_pass(
    local_store: Store, lines: list[tuple[str, str]], namespace: str
) -> None:
    import ray

    master = start_master(
        "lines", local_store, namespace=namespace, rows_per_task=5, passes=1, lease_timeout=60, snapshot_interval=0.1
    )
    samples = dist_reader("lines", local_store, namespace=namespace, trainer="steady")
    assert isinstance(samples, DistReader)
    iterator = samples()
    before = [next(iterator)[0] for _ in range(23)]
    wait_for(lambda: master.status().pending == 2, "the trainer to lease the task after the one it reads")
    assert master.status().done == 4

    def snapshot_is_current() -> bool:
        queue = json.loads(local_store.read(snapshot_path("lines", namespace)))["queue"]
        return len(queue["done"]) == 4 and sorted(lease[0] for lease in queue["pending"]) == [4, 5]

    wait_for(snapshot_is_current, "the snapshot to record the 4 finished tasks and the 2 leases")
    ray.kill(master.handle, no_restart=False)
    wait_for(lambda: master.info().restarts == 1, "Ray to restart the master")
    after = [source for source, _ in iterator]
    assert before + after == [source for source, _ in lines]
    assert master.info().restarts == 1
    status = master.status()
    assert (status.pass_number, status.finished, status.done) == (1, True, 12)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_master_started_by_a_command_that_exited_survives_and_restarts(
    local_store: Store, lines: list[tuple[str, str]], namespace: str
) -> None:
    import ray

    command = [sys.executable, "-m", "datamount.cli.main", "master", "start", "lines", "--store", local_store.url]
    command += ["--address", cluster_address(), "--namespace", namespace, "--rows-per-task", "20"]
    started = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    assert "started the task master of lines@1: 3 tasks" in started.stdout
    master = connect("lines", namespace=namespace)
    ray.kill(master.handle, no_restart=False)
    wait_for(lambda: master.info().restarts == 1, "Ray to restart the master")
    assert sorted(dist_reader("lines", local_store, namespace=namespace)()) == lines


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_master_whose_snapshot_is_gone_cannot_restart_and_says_why(
    local_store: Store, lines: list[tuple[str, str]], namespace: str
) -> None:
    import ray

    master = start_master("lines", local_store, namespace=namespace)
    local_store.remove(snapshot_path("lines", namespace))
    ray.kill(master.handle, no_restart=False)
    with pytest.raises(MasterUnavailableError, match=r"failed to start: .*finds neither its snapshot"):
        wait_for(lambda: master.info().restarts == 1, "the restart to fail")


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_task_that_always_fails_ends_failed_without_stalling_the_pass(
    local_store: Store, make_image_list: MakeImageList, namespace: str
) -> None:
    upload(make_image_list(12), "pictures", store=local_store)
    expected = list(reader("pictures", local_store)())
    manifest = catalog.resolve(local_store, "pictures")
    [broken] = object_locations(manifest, read_lines(local_store, manifest))[5:6]
    local_store.remove(broken[0])
    master = start_master("pictures", local_store, namespace=namespace, rows_per_task=4, passes=1, max_failures=1)
    read = list(dist_reader("pictures", local_store, namespace=namespace)())
    assert read == expected[:4] + expected[8:]
    status = master.status()
    assert (status.finished, status.done, status.failed) == (True, 2, 1)
    [report] = status.troubled
    assert (report.task.start, report.task.stop, report.state, report.failed_reads) == (4, 8, "failed", 2)
    assert report.reason.startswith("MissingPartError: pictures@1, row 5: the object ")
    assert broken[0].split("/")[-1] in report.reason and "datamount verify pictures@1 --repair" in report.reason
    with pytest.raises(MasterFinishedError, match="all its passes"):
        next(iter(dist_reader("pictures", local_store, namespace=namespace)()))


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_passes_follow_each_other_in_a_seeded_order(
    local_store: Store, lines: list[tuple[str, str]], namespace: str
) -> None:
    start_master("lines", local_store, namespace=namespace, rows_per_task=10, passes=2, shuffle_seed=5)
    samples = dist_reader("lines", local_store, namespace=namespace)
    first = list(samples())
    second = list(pickle.loads(pickle.dumps(samples))())  # a copy, as a worker process would get it
    assert sorted(first) == sorted(second) == lines
    assert first != lines and second != first
    assert all(sorted(first[i : i + 10]) == first[i : i + 10] for i in range(0, ROWS, 10))


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_masters_are_found_by_name_once_and_refuse_what_cannot_work(
    local_store: Store, lines: list[tuple[str, str]], namespace: str, memory_store: Store
) -> None:
    with pytest.raises(MasterNotFoundError, match="datamount master start lines"):
        connect("lines", namespace=namespace)
    foreign = {"master": {"id": "an-earlier-master"}, "queue": {}}
    local_store.write(snapshot_path("lines", namespace), json.dumps(foreign).encode())
    master = start_master("lines", local_store, namespace=namespace)
    assert isinstance(master, MasterClient) and master.info().restarts == 0
    assert master.status().todo == 1
    with pytest.raises(MasterExistsError, match="already runs"):
        start_master("lines", local_store, namespace=namespace)
    with pytest.raises(ValueError, match="memory"):
        start_master("lines", memory_store, namespace=namespace)
    with pytest.raises(ValueError, match="serves lines@1"):
        next(iter(dist_reader("lines@2", local_store, namespace=namespace)()))
    status = stop_master("lines", namespace=namespace)
    assert status is not None and status.todo == 1
    assert not local_store.exists(snapshot_path("lines", namespace))


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_the_cli_starts_shows_and_stops_a_master(
    local_store: Store, lines: list[tuple[str, str]], namespace: str
) -> None:
    runner = CliRunner()
    common = ["--namespace", namespace]
    started = runner.invoke(
        cli, ["master", "start", "lines", "--store", local_store.url, "--rows-per-task", "7", "--passes", "2", *common]
    )
    assert started.exit_code == 0, started.output
    assert "started the task master of lines@1: 9 tasks" in started.output
    reader = dist_reader("lines", local_store, namespace=namespace, trainer="cli-test")
    iterator = reader()
    next(iterator)
    wait_for(lambda: connect("lines", namespace=namespace).status().pending == 2, "the task read ahead")
    shown = runner.invoke(cli, ["tasks", "lines", *common])
    assert shown.exit_code == 0, shown.output
    assert "7 todo, 2 pending, 0 done, 0 failed" in shown.output
    assert "cli-test" in shown.output and "pass: 1 of 2" in shown.output
    as_json = json.loads(runner.invoke(cli, ["tasks", "lines", "--json", *common]).output)
    assert as_json["queue"]["leases"][0]["owner"] == "cli-test"
    iterator.close()
    assert json.loads(runner.invoke(cli, ["tasks", "lines", "--json", *common]).output)["queue"]["todo"] == 9
    stopped = runner.invoke(cli, ["master", "stop", "lines", *common])
    assert stopped.exit_code == 0 and "stopped the task master of lines@1 at pass 1" in stopped.output
    gone = runner.invoke(cli, ["tasks", "lines", *common])
    assert gone.exit_code == 1 and "no task master for 'lines'" in gone.output


def test_the_environment_chooses_between_master_and_local_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("DATAMOUNT_LOCAL", raising=False)
    ray_running = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    assert use_master() == ray_running
    assert use_master("10.0.0.1:6379") and not use_master("10.0.0.1:6379", local=True)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert use_master()
    monkeypatch.setenv("DATAMOUNT_LOCAL", "1")
    assert not use_master() and use_master(local=False)
    monkeypatch.setenv("DATAMOUNT_LOCAL", "perhaps")
    with pytest.raises(ValueError, match="DATAMOUNT_LOCAL"):
        use_master()


def test_without_a_cluster_dist_reader_is_the_local_reader(local_store: Store, lines: list[tuple[str, str]]) -> None:
    script = "import sys; from datamount.readers.master import dist_reader\n"
    script += "r = dist_reader('lines', sys.argv[1]); print(type(r).__name__, sum(1 for _ in r()))"
    environment = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DATAMOUNT_LOCAL")}
    done = subprocess.run(
        [sys.executable, "-c", script, local_store.url], capture_output=True, text=True, timeout=60, env=environment
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["DatasetReader", str(ROWS)]
    assert "ray" not in done.stderr.lower()


def test_dist_reader_refuses_options_that_are_the_masters_choice() -> None:
    with pytest.raises(TypeError, match="shuffle"):
        dist_reader("lines", local=True, shuffle=True)
