"""Helpers shared by the benchmarks: timing as medians, a moto server process, and result tables."""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def moto_server_process() -> Iterator[str]:
    """A moto S3 server in its own process (so it does not share the client's interpreter), on loopback."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the moto server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


@dataclass(frozen=True)
class Row:
    """One line of a comparison: our figure and the reference's, same units."""

    setup: str
    operation: str
    ours: float
    reference: float
    unit: str
    reference_name: str

    @property
    def ratio(self) -> float:
        return self.ours / self.reference if self.reference else float("nan")


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
