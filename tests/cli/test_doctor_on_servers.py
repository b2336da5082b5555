"""``datamount doctor`` as a real process against real servers: HDFS 2.7.3 and Ceph RGW on loopback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from datamount.storage import Store
from tests.servers.ceph import CephServer

CHECKS = ("open", "list", "write", "read back", "exclusive create", "small objects", "large object", "delete")


def run_doctor(url: str, *options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "datamount.cli.main", "doctor", url, "--quick", *options]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "160", **(env or {})}
    )


def assert_usable(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    for check in CHECKS:
        assert check in result.stdout
    assert "objects/s" in result.stdout and "MB/s" in result.stdout
    assert "the store is usable" in result.stdout


@pytest.mark.hdfs
@pytest.mark.slow
def test_doctor_passes_on_hdfs(hdfs_store: Store) -> None:
    result = run_doctor(hdfs_store.url)
    assert_usable(result)
    assert "HDFSStore" in result.stdout
    assert hdfs_store.list() == {}


@pytest.mark.ceph
def test_doctor_passes_on_ceph_rgw_with_keys_from_the_environment(ceph_server: CephServer, ceph_store: Store) -> None:
    keys = {"AWS_ACCESS_KEY_ID": ceph_server.key, "AWS_SECRET_ACCESS_KEY": ceph_server.secret}
    result = run_doctor(ceph_store.url, "-o", f"endpoint_url={ceph_server.endpoint_url}", env=keys)
    assert_usable(result)
    assert ceph_server.endpoint_url in result.stdout
    assert ceph_server.secret not in result.stdout + result.stderr
    assert ceph_store.list() == {}
