"""Fixtures of the data-center tests: servers inside network namespaces behind a 1 Gb/s link, killed and brought back
mid-pass (``docs/datacenter.md``).

Each cluster is made once per module and removed with it, whatever happened. The tests skip, with the reason, where
the machine cannot make namespaces (not root, no ``ip``/``tc``) or run the servers; with
``$DATAMOUNT_REQUIRE_SERVERS`` they fail instead.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from datamount.storage import Store
from tests.generated import image_rows, write_image_list
from tests.servers._launch import cannot_run
from tests.servers.netns import CappedHost, capped_host, why_netns_cannot_run

#: Where each fault's figures are appended as JSON lines, when set (the tables of ``docs/datacenter.md``).
REPORT_ENV = "DATAMOUNT_DATACENTER_REPORT"


def require_namespaces(what: str) -> None:
    """Skip (or fail, see :func:`cannot_run`) the tests of ``what`` where capped namespaces cannot be made."""
    reason = why_netns_cannot_run()
    if reason is not None:
        cannot_run(what, reason)


@pytest.fixture(scope="module")
def capped() -> Iterator[CappedHost]:
    """A namespace behind a veth link capped at 1 Gb/s each way, for the module's servers."""
    require_namespaces("data-center")
    with capped_host() as host:
        yield host


@dataclass
class LinkBytes:
    """Bytes that crossed a capped link, as this machine's end of it counts them."""

    device: str

    def read(self) -> tuple[int, int]:
        """(received, sent) so far."""
        stats = Path("/sys/class/net") / self.device / "statistics"
        return int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())


@dataclass
class FaultRecord:
    """One fault's figures: what was killed, when, what the client did, how long it took to recover, what was
    repeated."""

    rig: str
    operation: str
    killed: str
    when: str
    outcome: str
    stall_s: float = 0.0
    recovery_s: float | None = None
    retries: float = 0
    requests_repeated: float = 0
    bytes_repeated: int = 0
    verified: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        where = os.environ.get(REPORT_ENV)
        if where:
            with open(where, "a", encoding="utf-8") as out:
                out.write(json.dumps(asdict(self)) + "\n")


@dataclass
class Timed:
    """The rows of a pass, the moment each arrived, and what a fault hook returned."""

    rows: list[Any]
    stamps: list[float]
    fault_at: float | None = None

    def seconds(self) -> float:
        """From the first row to the last."""
        return self.stamps[-1] - self.stamps[0] if self.stamps else 0.0

    def stall_after_fault(self) -> float:
        """The longest wait for a row after the fault (or until the pass ended)."""
        if self.fault_at is None:
            return 0.0
        later = [self.fault_at, *(stamp for stamp in self.stamps if stamp >= self.fault_at)]
        return max((b - a for a, b in itertools.pairwise(later)), default=0.0)


def timed_pass(samples: Callable[[], Any], *, fault_after: int | None = None, fault: Callable[[], None] | None = None
               ) -> Timed:  # fmt: skip
    """Drain one pass of ``samples``, calling ``fault()`` once ``fault_after`` rows have arrived."""
    found = Timed([], [])
    for row in samples():
        found.rows.append(row)
        found.stamps.append(time.monotonic())
        if fault is not None and len(found.rows) == fault_after:
            fault()
            found.fault_at = time.monotonic()
    return found


@dataclass(frozen=True)
class SourceImages:
    """An image list on local disk and the rows a reader of it must yield."""

    list_file: Path
    rows: list[tuple[bytes, str]]


@pytest.fixture(scope="module")
def source_images(tmp_path_factory: pytest.TempPathFactory) -> SourceImages:
    """400 files of ~110 KB random bytes (44 MB) and their list."""
    list_file = write_image_list(tmp_path_factory.mktemp("images"), 400, size=110_000)
    return SourceImages(list_file, image_rows(list_file))


def as_rows(rows: list[Any]) -> list[tuple[bytes, str]]:
    """A reader's image samples as ``(bytes, label)``, for comparing with the source."""
    return [(bytes(row[0]), str(row[1])) for row in rows]


def counts(store: Store) -> dict[str, float]:
    return dict(store.counts())
