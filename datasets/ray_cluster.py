"""Ray, imported lazily (the ``datamount[ray]`` extra): connecting to a cluster, with clear errors instead of hangs."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from datamount.datasets.errors import RayUnreachableError
from datamount.storage import arguments
from datamount.storage.errors import BackendNotInstalledError

#: Seconds a cluster's address may take to accept a connection before it is reported unreachable.
PROBE_TIMEOUT = 5.0
ADDRESS_ENV = "RAY_ADDRESS"


def ray_module() -> ModuleType:
    """The ``ray`` module; a :class:`BackendNotInstalledError` naming the extra when it is not installed."""
    try:
        import ray
    except ImportError as exc:
        raise BackendNotInstalledError(
            f"this needs Ray, which is not installed ({exc.name} is missing): pip install 'datamount[ray]'"
        ) from exc
    return ray


def configured_address(address: str | None = None) -> str | None:
    """The cluster to use: ``address``, else ``$RAY_ADDRESS``, else ``None``."""
    return address or os.environ.get(ADDRESS_ENV) or None


def connect_ray(address: str | None = None, *, start_local: bool = False) -> tuple[ModuleType, bool]:
    """Connect this process to Ray, unless it already is; return ``ray`` and whether this call connected it.

    ``address`` (else ``$RAY_ADDRESS``) names the cluster: ``host:port`` of its head, ``ray://host:port``, or
    ``auto`` (the cluster ``ray start`` started on this machine). With neither, ``start_local`` starts a Ray
    instance for this process alone; otherwise the local cluster is looked for and its absence is an error.
    """
    ray = ray_module()
    if ray.is_initialized():
        return ray, False
    target = configured_address(address)
    if target is None and not start_local:
        target = "auto"
    if target not in (None, "auto", "local"):
        probe(target)
    try:
        ray.init(address=target, logging_level=logging.WARNING, configure_logging=True)
    except ConnectionError as exc:
        raise RayUnreachableError(
            f"no Ray cluster to connect to ({exc}); pass its address (--address / address=), set {ADDRESS_ENV}, "
            "or start one with 'ray start --head'"
        ) from exc
    return ray, True


def probe(address: str) -> None:
    """Make sure something accepts connections at ``address`` (``host:port`` or ``ray://host:port``)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    number = arguments.whole_number_text(port)
    if not host or number is None or number > 65535:
        raise RayUnreachableError(f"{address!r} is not a Ray address: write host:port, ray://host:port or auto")
    try:
        with socket.create_connection((host.strip("[]"), number), timeout=PROBE_TIMEOUT):
            pass
    except OSError as exc:
        raise RayUnreachableError(f"no Ray cluster answers at {address}: {exc.strerror or exc}") from exc


def gather(ray: ModuleType, tasks: Sequence[Any], on_done: Callable[[int], None]) -> list[Any]:
    """The results of Ray ``tasks`` (object refs), in their order; ``on_done(i)`` as task ``i`` finishes. The first
    failure cancels the tasks still running and is raised as the task raised it."""
    from ray.exceptions import RayTaskError

    numbers = {task: number for number, task in enumerate(tasks)}
    results: list[Any] = [None] * len(tasks)
    waiting = list(tasks)
    try:
        while waiting:
            finished, waiting = ray.wait(waiting, num_returns=1)
            for ref in finished:
                results[numbers[ref]] = ray.get(ref)
                on_done(numbers[ref])
    except RayTaskError as exc:
        for ref in waiting:
            ray.cancel(ref)
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from exc
        raise
    return results
