"""``dist_reader(name)``: the trainer side of the task master — the same tuples as ``reader(name)``, shared among the
trainers of a job by taking tasks from the master's queue.

The same script runs locally and on a cluster (the seed's ``paddle.dist.reader`` pattern)::

    samples = dist_reader("imagenet")   # on a Ray cluster: tasks from the master; on a laptop: reader("imagenet")
    for sample in samples():
        ...

:func:`use_master` says which: ``local=`` if given, else ``$DATAMOUNT_LOCAL``, else whether a Ray cluster is
configured (``address=``, ``$RAY_ADDRESS``) or this process already runs under Ray.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

from datamount.datasets import catalog
from datamount.datasets.names import parse_ref
from datamount.datasets.ray_cluster import configured_address
from datamount.datasets.reader_creator import ReaderCreator
from datamount.datasets.rows import RowSource, open_rows
from datamount.readers.dataset import DatasetReader, reader
from datamount.readers.errors import MasterFinishedError
from datamount.readers.master.actor import DEFAULT_MASTER_TIMEOUT, DEFAULT_NAMESPACE, MasterClient, connect
from datamount.readers.master.ahead import Fetched, PassOver, TasksAhead, give_back
from datamount.storage import Store, arguments, open_store

log = logging.getLogger(__name__)

#: ``1``/``true``/``yes``: read locally even where a Ray cluster is configured; ``0``/``false``/``no``: always use
#: the master.
LOCAL_ENV = "DATAMOUNT_LOCAL"
#: Longest sleep between two asks while every task of the pass is leased to other trainers.
DEFAULT_POLL_INTERVAL = 0.5
#: Options of ``reader(name)`` that say how rows are read (the master decides which rows, and in what order).
READ_OPTIONS = frozenset({"max_requests", "max_bytes", "use_shards", "cache", "verify"})
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class DistReader(ReaderCreator):
    """A reader creator over the tasks of a task master: each call is one pass of the master, shared with the other
    trainers; the iterator ends when the pass is over (every task done or failed), also for tasks other trainers read.

    A task's rows are read whole before the first is yielded; a read that raises is reported failed (the master
    hands the task out again, or gives up on it) and the trainer goes on with the next task. While a task's rows are
    consumed, the next task is leased and read in a background thread (a trainer holds at most two leases). Leases
    are renewed while rows are consumed, a task is reported finished once all its rows are taken, and the tasks held
    are given back if the iteration stops early. Picklable: the connection is made in the process that iterates.
    """

    def __init__(
        self,
        name: str,
        store: Store | str | None = None,
        *,
        address: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        trainer: str | None = None,
        master_timeout: float = DEFAULT_MASTER_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        **read_options: Any,
    ) -> None:
        self.ref = parse_ref(name)
        self.store = store
        self.address = address
        self.namespace = namespace
        self.trainer = trainer
        self.master_timeout = master_timeout
        self.poll_interval = arguments.positive_number(poll_interval, "poll_interval (seconds)")
        self.read_options = _check_read_options(read_options)
        self._client: MasterClient | None = None
        self._source: RowSource | None = None

    def __repr__(self) -> str:
        return f"DistReader({str(self.ref)!r}, namespace={self.namespace!r})"

    def made_by(self) -> str:
        return f"dist_reader({str(self.ref)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_source": None}

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        return self._one_pass()

    @property
    def client(self) -> MasterClient:
        """The master this reader takes tasks from (connected on first use)."""
        if self._client is None:
            self._client = connect(
                str(self.ref), address=self.address, namespace=self.namespace, timeout=self.master_timeout
            )
        return self._client

    def _rows_source(self) -> RowSource:
        if self._source is None:
            served = self.client.info().dataset
            if self.ref.version is not None and parse_ref(served).version != self.ref.version:
                raise ValueError(
                    f"dist_reader asks for {self.ref} but the task master of {self.ref.name} serves {served}"
                )
            opened = open_store(self.store)
            self._source = open_rows(opened, catalog.resolve(opened, served), **self.read_options)
        return self._source

    def _one_pass(self) -> Iterator[tuple[Any, ...]]:
        source = self._rows_source()
        trainer = self.trainer or f"{socket.gethostname()}:{os.getpid()}"
        ahead = TasksAhead(self.client, source.rows, trainer, poll_interval=self.poll_interval)
        try:
            while True:
                try:
                    fetched = ahead.next()
                except PassOver as over:
                    if not over.joined:
                        raise MasterFinishedError(
                            f"the task master of {self.ref.name} has run all its passes ({over.answer.pass_number}); "
                            "start a new one for more"
                        ) from None
                    return
                yield from self._deliver(fetched, ahead)
        finally:
            ahead.close()

    def _deliver(self, fetched: Fetched, ahead: TasksAhead) -> Iterator[tuple[Any, ...]]:
        """Yield a task's rows, renewing its lease (and the next task's) as time passes; report it finished once
        all are taken, give it back if the consumer stops before."""
        client = self.client
        renew_every = fetched.lease.timeout / 2
        renew_at = time.monotonic() + renew_every
        delivered = False
        try:
            for row in fetched.rows:
                if time.monotonic() >= renew_at:
                    # None: the lease was lost (it expired); the rows go on all the same (at-least-once delivery).
                    fetched.lease = client.renew(fetched.lease) or fetched.lease
                    ahead.renew_upcoming()
                    renew_at = time.monotonic() + renew_every
                yield row
            delivered = True
        finally:
            if not delivered:
                give_back(client, fetched.lease)
        client.finish(fetched.lease)


def use_master(address: str | None = None, local: bool | None = None) -> bool:
    """Whether :func:`dist_reader` takes tasks from a master (``True``) or reads the whole dataset locally.

    ``local`` decides if given; else ``$DATAMOUNT_LOCAL`` (``1``/``true``/``yes`` or ``0``/``false``/``no``); else
    a master is used when a Ray cluster is configured (``address``, ``$RAY_ADDRESS``) or this process already runs
    under Ray (a Ray task or actor, or after ``ray.init``).
    """
    if local is not None:
        return not local
    raw = os.environ.get(LOCAL_ENV, "").strip().lower()
    if raw in _TRUE:
        return False
    if raw in _FALSE:
        return True
    if raw:
        raise ValueError(f"{LOCAL_ENV}={os.environ[LOCAL_ENV]!r} is not a yes or no: set it to 1 or 0")
    if configured_address(address) is not None:
        return True
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def dist_reader(
    name: str,
    store: Store | str | None = None,
    *,
    local: bool | None = None,
    address: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    trainer: str | None = None,
    master_timeout: float = DEFAULT_MASTER_TIMEOUT,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    **read_options: Any,
) -> DistReader | DatasetReader:
    """A reader creator over dataset ``name`` that shares each pass with the other trainers of a job.

    On a cluster (see :func:`use_master`) it is a :class:`DistReader` taking tasks from the master of ``name``
    (started with ``datamount master start NAME``; found in Ray namespace ``namespace`` of the cluster at
    ``address``); elsewhere it is ``reader(name, store)``: the whole dataset in order, or this rank's share where a
    launcher sets ``RANK``/``WORLD_SIZE`` (static sharding). Either way it yields the tuples of ``reader(name)``.
    ``read_options`` (``max_requests``, ``max_bytes``, ``use_shards``, ``cache``) say how rows are read; which rows,
    and in what order, is the master's choice. ``trainer`` names this trainer in the master's leases (default
    ``host:pid``).

    Delivery through a master is at-least-once: rows of a task whose lease expired may come twice.
    """
    options = _check_read_options(read_options)
    if not use_master(address, local):
        log.info("no Ray cluster is configured: reading %s locally", name)
        return reader(name, store, **options)
    return DistReader(
        name,
        store,
        address=address,
        namespace=namespace,
        trainer=trainer,
        master_timeout=master_timeout,
        poll_interval=poll_interval,
        **options,
    )


def _check_read_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - READ_OPTIONS)
    if unknown:
        raise TypeError(
            f"dist_reader takes no {', '.join(unknown)}: the task master decides which rows each trainer reads and "
            f"in what order (datamount master start --seed); its read options are {', '.join(sorted(READ_OPTIONS))}"
        )
    return options
