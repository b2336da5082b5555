"""The task master on Ray: a named, detached actor holding a :class:`~datamount.readers.master.tasks.TaskQueue`.

Ray restarts the actor when its process dies (``max_restarts=-1``); its state is snapshotted to the dataset's store
(``masters/NAMESPACE/NAME.json``, written atomically) at most ``snapshot_interval`` seconds after each change, and
a restarted actor continues from the snapshot. Ray is imported only when a master is started or reached
(``pip install 'datamount[ray]'``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from datamount.datasets import catalog
from datamount.datasets.names import parse_ref, validate_name
from datamount.datasets.ray_cluster import configured_address, connect_ray, ray_module
from datamount.datasets.rows import DEFAULT_ROWS_PER_SPAN, open_rows
from datamount.readers.errors import (
    MasterExistsError,
    MasterNotFoundError,
    MasterUnavailableError,
    TaskQueueSnapshotError,
)
from datamount.readers.master.tasks import Answer, Lease, QueueStatus, TaskQueue
from datamount.storage import ObjectNotFoundError, Store, arguments, open_store
from datamount.storage.errors import DatamountError

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "datamount"
DEFAULT_LEASE_TIMEOUT = 60.0
DEFAULT_MAX_FAILURES = 3
DEFAULT_SNAPSHOT_INTERVAL = 0.5
#: Seconds a trainer keeps retrying a master that does not answer (restarting, overloaded) before giving up.
DEFAULT_MASTER_TIMEOUT = 60.0
SNAPSHOT_FOLDER = "masters"
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class MasterConfig:
    """What the actor is constructed with, kept small so that Ray holds it with the actor (a restart needs it):
    the queue itself comes from the store. ``master_id`` tells this master's snapshot from one an earlier master
    of the same name left behind."""

    name: str
    namespace: str
    master_id: str
    snapshot_interval: float

    @property
    def snapshot_path(self) -> str:
        return snapshot_path(self.name, self.namespace)

    @property
    def start_path(self) -> str:
        """Where :func:`start_master` leaves the new queue for the actor's first start."""
        return f"{self.snapshot_path.removesuffix('.json')}.{self.master_id}.start.json"


@dataclass(frozen=True)
class MasterInfo:
    """A running master: what it serves, where it snapshots, how often Ray restarted it."""

    name: str
    namespace: str
    dataset: str
    tasks: int
    store: str
    snapshot: str
    restarts: int
    lease_timeout: float
    max_failures: int
    passes: int | None
    shuffle_seed: int | None
    snapshot_error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_path(name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """Where in its store the master ``name`` of Ray namespace ``namespace`` keeps its snapshot."""
    return f"{SNAPSHOT_FOLDER}/{_check_namespace(namespace)}/{validate_name(name)}.json"


def snapshot_document(config: MasterConfig, queue_snapshot: dict[str, Any], starts: int) -> bytes:
    """A master's snapshot as stored: who wrote it, how many times an actor started from it, and its queue."""
    master = {"id": config.master_id, "name": config.name, "namespace": config.namespace, "starts": starts}
    return json.dumps({"master": master, "queue": queue_snapshot}, separators=(",", ":")).encode()


class TaskMaster:
    """The actor's body: a task queue behind a lock, and a thread that snapshots it after changes.

    Plain Python; :func:`start_master` runs it as a Ray actor. Every public method is one remote call. The first
    start reads the queue :func:`start_master` stored; a restart reads the last snapshot.
    """

    def __init__(self, config: MasterConfig, store: Store) -> None:
        self._config = config
        self._store = store
        self._lock = threading.Condition()
        self._closing = False
        self._snapshot_error = ""
        self._queue, self._starts = self._load()
        self._written = -1
        self._last_write = 0.0
        self._write_snapshot()
        if self._snapshot_error:
            raise OSError(f"the task master {config.name} cannot write its snapshot: {self._snapshot_error}")
        self._store.remove(config.start_path, missing_ok=True)
        self._flusher = threading.Thread(target=self._flush_loop, name="datamount-master-snapshot", daemon=True)
        self._flusher.start()

    def get_task(self, trainer: str, pass_number: int | None = None) -> Answer:
        with self._lock:
            return self._changed(self._queue.get_task(trainer, pass_number))

    def finish(self, lease: Lease) -> bool:
        with self._lock:
            return self._changed(self._queue.finish(lease))

    def fail(self, lease: Lease, reason: str) -> bool:
        with self._lock:
            log.warning("task %s of %s failed on %s: %s", lease.task.id, lease.task.dataset, lease.owner, reason)
            return self._changed(self._queue.fail(lease, reason))

    def renew(self, lease: Lease) -> Lease | None:
        with self._lock:
            return self._changed(self._queue.renew(lease))

    def release(self, lease: Lease) -> bool:
        with self._lock:
            return self._changed(self._queue.release(lease))

    def status(self) -> QueueStatus:
        with self._lock:
            return self._changed(self._queue.status())

    def info(self) -> MasterInfo:
        queue = self._queue
        return MasterInfo(
            name=self._config.name,
            namespace=self._config.namespace,
            dataset=queue.dataset,
            tasks=len(queue.tasks),
            store=self._store.url,
            snapshot=self._store.url_for(self._config.snapshot_path),
            restarts=self._starts - 1,
            lease_timeout=queue.lease_timeout,
            max_failures=queue.max_failures,
            passes=queue.passes,
            shuffle_seed=queue.shuffle_seed,
            snapshot_error=self._snapshot_error,
        )

    def shutdown(self, remove_snapshot: bool = False) -> QueueStatus:
        """Stop the snapshot thread; write a last snapshot, or remove it (the master is being stopped for good)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._flusher.join()
        if remove_snapshot:
            self._store.remove(self._config.snapshot_path, missing_ok=True)
        else:
            self._write_snapshot()
        with self._lock:
            return self._queue.status()

    # -- snapshots -------------------------------------------------------------------------------------------------

    def _load(self) -> tuple[TaskQueue, int]:
        """The queue to serve and how many times an actor has started with it, this start included."""
        config = self._config
        for path in (config.snapshot_path, config.start_path):
            where = self._store.url_for(path)
            try:
                document = json.loads(self._store.read(path))
            except ObjectNotFoundError:
                continue
            except ValueError as exc:
                raise TaskQueueSnapshotError(f"{where} is damaged: {exc}") from exc
            master = document.get("master", {}) if isinstance(document, dict) else {}
            if master.get("id") != config.master_id:
                continue  # an earlier master's snapshot: this master's first start overwrites it
            queue = TaskQueue.from_snapshot(document.get("queue"), where=where)
            starts = int(master.get("starts", 0)) + 1
            if starts > 1:
                log.warning(
                    "task master %s restarted: continuing pass %d from %s", config.name, queue.pass_number, where
                )
            return queue, starts
        raise TaskQueueSnapshotError(
            f"the task master {config.name} finds neither its snapshot nor its starting queue in "
            f"{self._store.url_for(SNAPSHOT_FOLDER)}; start it again with 'datamount master start {config.name}'"
        )

    def _write_snapshot(self) -> None:
        with self._lock:
            queue_snapshot, changes = self._queue.snapshot(), self._queue.changes
        data = snapshot_document(self._config, queue_snapshot, self._starts)
        try:
            self._store.write(self._config.snapshot_path, data)
        except (DatamountError, OSError) as exc:
            # A store hiccup must not stop the master: the snapshot thread tries again one interval later.
            self._snapshot_error = f"{type(exc).__name__}: {exc}"
            log.warning("task master %s: cannot write its snapshot: %s", self._config.name, exc)
            return
        finally:
            self._last_write = time.monotonic()
        self._snapshot_error = ""
        with self._lock:
            self._written = max(self._written, changes)

    def _flush_loop(self) -> None:
        """Write a snapshot after each change, at most one per ``snapshot_interval`` (a failed write is retried)."""
        interval = self._config.snapshot_interval
        while True:
            with self._lock:
                while not self._closing and self._written >= self._queue.changes:
                    self._lock.wait()
                not_before = self._last_write + interval
                while not self._closing and (pause := not_before - time.monotonic()) > 0:
                    self._lock.wait(timeout=pause)
                if self._closing:
                    return
            self._write_snapshot()

    def _changed(self, result: Any) -> Any:
        """Wake the snapshot thread if the call changed the queue; pass ``result`` through."""
        if self._queue.changes > self._written:
            self._lock.notify_all()
        return result


class MasterClient:
    """A trainer's or operator's handle on a running master. Calls retry while Ray restarts the actor, for up to
    ``timeout`` seconds, then raise :class:`MasterUnavailableError`."""

    def __init__(self, handle: Any, name: str, namespace: str, *, timeout: float = DEFAULT_MASTER_TIMEOUT) -> None:
        self.handle = handle
        self.name = name
        self.namespace = namespace
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"MasterClient({self.name!r}, namespace={self.namespace!r})"

    def get_task(self, trainer: str, pass_number: int | None = None) -> Answer:
        answer: Answer = self._call("get_task", trainer, pass_number)
        return answer

    def finish(self, lease: Lease) -> bool:
        return bool(self._call("finish", lease))

    def fail(self, lease: Lease, reason: str) -> bool:
        return bool(self._call("fail", lease, reason))

    def renew(self, lease: Lease) -> Lease | None:
        renewed: Lease | None = self._call("renew", lease)
        return renewed

    def release(self, lease: Lease, *, timeout: float | None = None) -> bool:
        return bool(self._call("release", lease, timeout=timeout))

    def status(self) -> QueueStatus:
        status: QueueStatus = self._call("status")
        return status

    def info(self) -> MasterInfo:
        info: MasterInfo = self._call("info")
        return info

    def shutdown(self, *, remove_snapshot: bool = True, timeout: float | None = None) -> QueueStatus:
        """Stop the master's snapshot thread and write its last snapshot, or remove it; the last state.

        The actor keeps answering afterwards; :func:`stop_master` kills it."""
        status: QueueStatus = self._call("shutdown", remove_snapshot, timeout=timeout)
        return status

    def _call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        ray = ray_module()
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        delay = 0.05
        while True:
            try:
                return ray.get(
                    getattr(self.handle, method).remote(*args), timeout=max(deadline - time.monotonic(), 0.1)
                )
            except (RayActorError, GetTimeoutError) as exc:
                if getattr(exc, "actor_init_failed", False):
                    raise MasterUnavailableError(
                        f"the task master {self.name!r} failed to start: {_last_line(exc)}"
                    ) from exc
                if isinstance(exc, ActorDiedError) and not self._exists():
                    raise MasterNotFoundError(f"the task master {self.name!r} is gone (stopped, or it failed)") from exc
                if time.monotonic() + delay >= deadline:
                    raise MasterUnavailableError(
                        f"the task master {self.name!r} did not answer within {limit:g} s: {type(exc).__name__}"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _exists(self) -> bool:
        ray = ray_module()
        try:
            ray.get_actor(self.name, namespace=self.namespace)
        except ValueError:
            return False
        return True


def start_master(
    name: str,
    store: Store | str | None = None,
    *,
    address: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    lease_timeout: float = DEFAULT_LEASE_TIMEOUT,
    max_failures: int = DEFAULT_MAX_FAILURES,
    passes: int | None = None,
    shuffle_seed: int | None = None,
    rows_per_task: int = DEFAULT_ROWS_PER_SPAN,
    snapshot_interval: float = DEFAULT_SNAPSHOT_INTERVAL,
) -> MasterClient:
    """Start the task master of dataset ``name`` (``name@N`` pins a version; else the latest is pinned now).

    The master is a detached Ray actor named after the dataset (without version) in Ray namespace ``namespace``;
    it outlives this process, until :func:`stop_master`. Its tasks are the version's row groups when it is packed,
    else runs of ``rows_per_task`` list lines. ``address`` (else ``$RAY_ADDRESS``, else the cluster ``ray start``
    runs on this machine) names the Ray cluster. The store must be reachable from every node: not ``memory://``.

    Raises
    ------
    MasterExistsError
        A master of that name already runs in the namespace.
    DatasetNotFoundError, RayUnreachableError, BackendNotInstalledError
    """
    ref = parse_ref(name)
    opened = open_store(store)
    if not opened.shareable:
        raise ValueError(
            f"the task master needs a store every Ray node can reach; {opened.url} lives in one process's memory"
        )
    arguments.positive_number(snapshot_interval, "snapshot_interval (seconds)")
    source = open_rows(opened, catalog.resolve(opened, ref), rows_per_span=rows_per_task)
    queue = TaskQueue(
        source.manifest.ref,
        source.spans(),
        lease_timeout=lease_timeout,
        max_failures=max_failures,
        passes=passes,
        shuffle_seed=shuffle_seed,
    )
    config = MasterConfig(ref.name, _check_namespace(namespace), uuid.uuid4().hex, float(snapshot_interval))
    ray, _ = connect_ray(address)
    if _lookup(ray, ref.name, config.namespace) is not None:
        raise _exists_error(ref.name, config.namespace)
    opened.write(config.start_path, snapshot_document(config, queue.snapshot(), starts=0))
    try:
        handle = (
            ray.remote(TaskMaster)
            .options(
                name=ref.name,
                namespace=config.namespace,
                lifetime="detached",
                max_restarts=-1,
                max_concurrency=1,
                num_cpus=0,
            )
            .remote(config, opened)
        )
    except ValueError as exc:  # ray.exceptions.ActorAlreadyExistsError: another process won the race
        opened.remove(config.start_path, missing_ok=True)
        raise _exists_error(ref.name, config.namespace) from exc
    client = MasterClient(handle, ref.name, config.namespace)
    try:
        client.info()
    except BaseException:
        ray.kill(handle, no_restart=True)
        opened.remove(config.start_path, missing_ok=True)
        raise
    return client


def connect(
    name: str,
    *,
    address: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    timeout: float = DEFAULT_MASTER_TIMEOUT,
) -> MasterClient:
    """The running master of dataset ``name`` (a version in ``name`` is ignored: a master is named by its dataset)."""
    ref = parse_ref(name)
    ray, _ = connect_ray(address)
    handle = _lookup(ray, ref.name, _check_namespace(namespace))
    if handle is None:
        where = configured_address(address) or "the local Ray cluster"
        raise MasterNotFoundError(
            f"no task master for {ref.name!r} runs in Ray namespace {namespace!r} ({where}); "
            f"start one with 'datamount master start {ref.name}'"
        )
    return MasterClient(handle, ref.name, namespace, timeout=timeout)


def stop_master(
    name: str, *, address: str | None = None, namespace: str = DEFAULT_NAMESPACE, timeout: float = 30.0
) -> QueueStatus | None:
    """Stop the master of dataset ``name`` for good and remove its snapshot; return its last state (``None`` when
    it did not answer within ``timeout`` seconds: it is killed all the same)."""
    client = connect(name, address=address, namespace=namespace, timeout=timeout)
    ray = ray_module()
    status: QueueStatus | None
    try:
        status = client.shutdown(remove_snapshot=True)
    except MasterUnavailableError:
        status = None
    ray.kill(client.handle, no_restart=True)
    return status


def _last_line(exc: BaseException) -> str:
    """The last line of a Ray error's text (the remote exception's type and message), without terminal colours."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _lookup(ray: Any, name: str, namespace: str) -> Any:
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def _exists_error(name: str, namespace: str) -> MasterExistsError:
    return MasterExistsError(
        f"a task master for {name!r} already runs in Ray namespace {namespace!r}; "
        f"stop it first ('datamount master stop {name}') or use another namespace"
    )


def _check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValueError(
            f"invalid Ray namespace {namespace!r}: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return namespace
