"""The dataset locks: writers share, a removal excludes them, a gone holder is let go, a lost lock commits nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datamount.cli.main import cli
from datamount.datasets import catalog, layout, locks, upload
from datamount.datasets.errors import DatasetBusyError, LockLostError
from datamount.datasets.progress import Silent
from datamount.storage import Store
from tests.generated import write_image_list

#: A process that takes a lock on dataset ``d`` of the store given as argv[1], says so, and holds it until its
#: standard input closes.
HOLDER = textwrap.dedent(
    """
    import sys
    from datamount.datasets import locks
    from datamount.storage import open_store
    hold = locks.writing if sys.argv[2] == "shared" else locks.removing
    with hold(open_store(sys.argv[1]), "d", purpose="hold"):
        print("held", flush=True)
        sys.stdin.read()
    """
)


@contextmanager
def held_elsewhere(store: Store, kind: str) -> Iterator[subprocess.Popen[str]]:
    """A lock of ``kind`` on ``d`` held by another process until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.url, kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        if holder.poll() is None:
            holder.communicate("", timeout=60)


def until(condition: object, what: str) -> None:
    """Wait (at most a minute) until ``condition()`` holds."""
    deadline = time.monotonic() + 60
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


@pytest.fixture
def dataset(local_store: Store, tmp_path: Path) -> Store:
    upload(write_image_list(tmp_path / "src", 4), "d", store=local_store)
    return local_store


def test_a_removal_waits_for_a_writer_of_another_process_then_goes_ahead(dataset: Store) -> None:
    removed: list[object] = []
    with held_elsewhere(dataset, locks.SHARED):
        removal = threading.Thread(target=lambda: removed.append(catalog.remove(dataset, "d", wait=120)))
        removal.start()
        until(
            lambda: any(lock.kind == locks.EXCLUSIVE for lock in locks.read_locks(dataset, "d")),
            "the removal announces itself",
        )
        assert catalog.versions(dataset, "d") == [1]  # it waits, keeping its lock file for later writers to see
    removal.join(timeout=120)
    assert removed == [[1]]
    assert list(dataset.list(layout.dataset_folder("d"))) == [layout.removed_path("d", 1)]  # its number stays taken


def test_a_writer_waits_for_a_removal_and_says_who_holds_it(dataset: Store, tmp_path: Path) -> None:
    other = write_image_list(tmp_path / "other", 3)
    command = [sys.executable, "-m", "datamount.cli.main", "upload", "--store", dataset.url, "-q", str(other), "d"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with held_elsewhere(dataset, locks.EXCLUSIVE) as holder:
        busy = rf"cannot upload d in .*: process {holder.pid} on .* \(hold, since"
        with pytest.raises(DatasetBusyError, match=busy), locks.writing(dataset, "d", purpose="upload", wait=0.2):
            pass
        uploading = subprocess.Popen(command, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
        assert uploading.stderr is not None
        said = uploading.stderr.readline()
        assert said.startswith(f"datamount: waiting to upload d: process {holder.pid} on ")
        assert catalog.versions(dataset, "d") == [1]
    assert uploading.wait(timeout=120) == 0, uploading.stderr.read()  # it waited for the removal, then uploaded
    assert catalog.versions(dataset, "d") == [1, 2]


def test_a_busy_dataset_is_exit_status_7_naming_the_holder(dataset: Store) -> None:
    from click.testing import CliRunner

    with held_elsewhere(dataset, locks.SHARED) as holder:
        result = CliRunner().invoke(cli, ["rm", "d@1", "--yes", "--wait", "0.2", "--store", dataset.url])
    assert result.exit_code == 7, result.output
    assert f"cannot remove d in {dataset.url}: process {holder.pid} on" in result.output
    assert catalog.versions(dataset, "d") == [1]


def test_the_lock_of_a_killed_process_is_let_go_at_once_on_its_host(dataset: Store) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, dataset.url, locks.SHARED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    assert [lock.pid for lock in locks.read_locks(dataset, "d")] == [holder.pid]
    assert catalog.remove(dataset, "d@1", wait=0) == [1]


def write_lock(store: Store, kind: str, *, host: str, age: float) -> str:
    path = f"{locks.locks_folder('d')}/{kind}-by-hand.json"
    now = time.time()
    body = {"host": host, "pid": 1, "purpose": "upload", "created": now - age, "refreshed": now - age}
    store.write(path, json.dumps({**body, "stale_after": 600.0}).encode())
    return path


def test_a_lock_of_another_host_is_stale_once_not_refreshed_for_ten_intervals(dataset: Store) -> None:
    path = write_lock(dataset, locks.SHARED, host="elsewhere.example", age=0)
    with pytest.raises(DatasetBusyError, match=r"process 1 on elsewhere\.example"):
        catalog.remove(dataset, "d@1", wait=0)
    assert catalog.versions(dataset, "d") == [1]
    write_lock(dataset, locks.SHARED, host="elsewhere.example", age=601)
    assert catalog.remove(dataset, "d@1", wait=0) == [1]
    assert not dataset.exists(path)


def test_a_holder_refreshes_its_lock(dataset: Store) -> None:
    with locks.writing(dataset, "d", refresh_every=0.05) as lock:
        first = json.loads(dataset.read(lock.path))["refreshed"]
        until(lambda: json.loads(dataset.read(lock.path))["refreshed"] > first, "a refresh")
        assert json.loads(dataset.read(lock.path))["stale_after"] == 0.05 * locks.STALE_INTERVALS


class LosesItsLock(Silent):
    """Progress that removes the upload's lock file as a removal that took it for stale would."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        for lock in locks.read_locks(self.store, "d"):
            self.store.remove(lock.path, missing_ok=True)


def test_a_writer_whose_lock_was_taken_commits_nothing(dataset: Store, tmp_path: Path) -> None:
    other = write_image_list(tmp_path / "other", 3)
    with pytest.raises(LockLostError, match=r"lock on d .* was lost .* nothing was committed: run the same command"):
        upload(other, "d", store=dataset, progress=LosesItsLock(dataset))
    assert catalog.versions(dataset, "d") == [1]
    assert upload(other, "d", store=dataset).manifest.version == 2


def test_a_commit_without_the_writers_lock_is_refused(dataset: Store) -> None:
    draft = catalog.resolve(dataset, "d")
    draft = type(draft)(**{**draft.__dict__, "version": 0, "created": ""})
    with pytest.raises(RuntimeError, match="cannot commit a version of d without holding its shared lock"):
        catalog.commit(dataset, draft)
    with locks.writing(dataset, "d"):
        assert catalog.commit(dataset, draft).version == 2


def test_a_removal_in_one_thread_waits_for_an_upload_in_another(dataset: Store) -> None:
    removed: list[object] = []
    with locks.writing(dataset, "d"):
        removal = threading.Thread(target=lambda: removed.append(catalog.remove(dataset, "d@1", wait=120)))
        removal.start()
        removal.join(timeout=0.5)
        assert removal.is_alive() and catalog.versions(dataset, "d") == [1]
    removal.join(timeout=120)
    assert removed == [[1]]


def test_a_thread_that_writes_a_dataset_cannot_remove_it(dataset: Store) -> None:
    with locks.writing(dataset, "d"), pytest.raises(DatasetBusyError, match="while this thread writes it"):
        catalog.remove(dataset, "d@1")


def test_a_removal_of_what_is_not_there_makes_nothing(local_store: Store) -> None:
    with pytest.raises(FileNotFoundError, match="no dataset named 'nothing'"):
        catalog.remove(local_store, "nothing")
    assert not Path(local_store.local_path("datasets/nothing")).exists()


def test_a_writer_and_a_removal_never_hold_at_once_on_any_backend(store: Store) -> None:
    """The protocol itself on every backend: a live shared lock keeps the exclusive one from being taken (and the
    other way round), two exclusive locks never hold at once, and each is taken once the other is gone."""
    writer = locks.Lock(store, "d", locks.SHARED, "upload", 60)
    writer.acquire(0)
    remover = locks.Lock(store, "d", locks.EXCLUSIVE, "remove", 60)
    with pytest.raises(DatasetBusyError, match="cannot remove d"):
        remover.acquire(0)
    assert [lock.kind for lock in locks.read_locks(store, "d")] == [locks.SHARED]  # the waiter withdrew
    writer.release()
    remover.acquire(0)
    second = locks.Lock(store, "d", locks.EXCLUSIVE, "remove", 60)
    with pytest.raises(DatasetBusyError):
        second.acquire(0)
    late = locks.Lock(store, "d", locks.SHARED, "upload", 60)
    with pytest.raises(DatasetBusyError, match="cannot upload d"):
        late.acquire(0)
    remover.check()
    remover.release()
    late.acquire(0)
    late.check()
    late.release()
    assert locks.read_locks(store, "d") == []


def test_an_empty_folder_goes_and_one_written_into_stays_on_any_backend(store: Store) -> None:
    """What a lock's release does to the locks folder: a folder a file was written into meanwhile is refused by the
    file system (HDFS with an error of its client's own) and stays, without failing the release."""
    store.write("d/locks/shared-1.json", b"{}")
    store.remove_empty_folder("d/locks")
    assert store.read("d/locks/shared-1.json") == b"{}"
    store.remove("d/locks/shared-1.json")
    store.remove_empty_folder("d/locks")
    store.remove_empty_folder("d")
    assert store.list_folders("") == [] or not store.needs_dirs
