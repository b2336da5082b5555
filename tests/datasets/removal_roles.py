"""What the processes of the removal races do: upload, pack, remove and read one dataset, each role a module-level
function (spawned processes import it) that reports what happened as plain data."""

from __future__ import annotations

import time
from pathlib import Path

from datamount.datasets import catalog, pack, upload
from datamount.datasets.errors import DatasetNotFoundError
from datamount.readers import reader
from datamount.storage import Store

#: What a reader is told when the version it reads is removed meanwhile (``catalog.removed_while_read``).
REMOVED_WHILE_READ = "while it was being read"


def upload_list(store: Store, list_file: str, name: str) -> int:
    """Upload ``list_file`` as a version of ``name``; its number."""
    return upload(list_file, name, store=store, max_requests=4).manifest.version


def remove_version(store: Store, ref: str) -> str:
    """Remove ``ref``; ``"removed"``, or the message when there was nothing to remove (a racing removal took it)."""
    try:
        catalog.remove(store, ref)
    except DatasetNotFoundError as exc:
        return str(exc)
    return "removed"


def pack_latest(store: Store, name: str) -> str:
    """Pack the latest version of ``name``; ``"packed"``, or ``"not found"`` when none was there (removed)."""
    try:
        pack(name, store=store, shard_bytes=4_000, row_group_bytes=1_000)
    except DatasetNotFoundError:
        return "not found"
    return "packed"


def read_latest(store: Store, name: str) -> str:
    """Read the latest version of ``name`` whole: ``"read"``, ``"removed"`` (a removal said it took the version
    while it was read), or ``"missing"`` when there was no version to open; anything else is raised."""
    try:
        for _ in reader(name, store)():
            pass
    except DatasetNotFoundError as exc:
        return "removed" if REMOVED_WHILE_READ in str(exc) else f"missing: {exc}"
    return "read"


def keep_doing(role: str, store: Store, name: str, seconds: float, lists: list[str]) -> dict[str, int]:
    """Do ``role`` over and over for ``seconds``; how often each outcome came (an error's type and message)."""
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < deadline:
        try:
            if role == "upload":
                upload_list(store, lists[turn % len(lists)], name)
                outcome = "uploaded"
            elif role == "pack":
                outcome = pack_latest(store, name)
            elif role == "remove":
                found = catalog.versions(store, name)
                outcome = remove_version(store, f"{name}@{found[0]}") if len(found) > 1 else "waited"
            else:
                outcome = read_latest(store, name)
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        turn += 1
    return outcomes


def lists_in(folder: str) -> list[str]:
    return sorted(str(path) for path in Path(folder).glob("*.list"))
