"""What every test of ``datamount mount`` needs: FUSE (skipped with its reason where it cannot run, a failure under
``DATAMOUNT_REQUIRE_SERVERS``), and a mount point that is unmounted whatever the test did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.mount import check_fuse, unmount
from datamount.storage import MountError
from datamount.storage.mounts import read_mounts
from tests.servers._launch import cannot_run


@pytest.fixture(scope="module")
def fuse() -> None:
    try:
        check_fuse()
    except MountError as exc:
        cannot_run("FUSE mount", str(exc))


@pytest.fixture
def mountpoint(tmp_path: Path, fuse: None) -> Iterator[Path]:
    """An empty folder, unmounted at the end whatever the test did."""
    folder = tmp_path / "mnt"
    folder.mkdir()
    yield folder
    if any(entry.target == str(folder) for entry in read_mounts()):
        unmount(folder)
