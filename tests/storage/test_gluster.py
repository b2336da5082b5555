"""The GlusterFS mount guard and ``datamount doctor`` on a real GlusterFS volume mounted through FUSE."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from datamount.storage import MountError, open_store
from tests.servers.gluster import GlusterServer

pytestmark = pytest.mark.gluster


def _datamount(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "datamount.cli.main", *args]
    env = {**os.environ, "COLUMNS": "200"}  # long URLs stay on one line of the report
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)


def test_the_mount_guard_follows_the_real_mount(
    gluster_server: GlusterServer, gluster_folder: Path, tmp_path: Path
) -> None:
    store = open_store(gluster_folder, mount="glusterfs")
    store.write("before", b"on the volume")
    local = tmp_path / "local.bin"
    local.write_bytes(b"local bytes")

    gluster_server.unmount()
    with pytest.raises(MountError) as caught:
        open_store(gluster_folder, mount="glusterfs")
    message = str(caught.value)
    assert f"{gluster_folder} must be on a glusterfs mount" in message
    assert "mount -t glusterfs" in message
    with pytest.raises(MountError, match="must be on a glusterfs mount"):
        store.write("after", b"x")
    with pytest.raises(MountError, match="must be on a glusterfs mount"):
        store.put_many([(local, "copied.bin")])
    doctor = _datamount("doctor", str(gluster_folder), "-o", "mount=glusterfs", "--quick")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "mount the shared volume first" in doctor.stdout
    assert os.listdir(gluster_server.mount_point) == []  # nothing landed on the local disk under the mount point

    gluster_server.mount()
    reopened = open_store(gluster_folder, mount="glusterfs")
    reopened.write("after", b"x")
    reopened.put_many([(local, "copied.bin")])
    assert reopened.list() == {"after": 1, "before": 13, "copied.bin": 11}
    assert reopened.read("before") == b"on the volume"


def test_doctor_finds_the_volume_usable_and_cleans_up(gluster_folder: Path) -> None:
    result = _datamount("doctor", str(gluster_folder), "-o", "mount=glusterfs", "--quick")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"datamount doctor file://{gluster_folder}" in result.stdout
    assert "the store is usable" in result.stdout
    assert "FAILED" not in result.stdout
    assert open_store(gluster_folder, mount="glusterfs").list() == {}
