"""Shared fixtures: isolated configuration, and stores on every backend of ``STORE_BACKENDS`` (``tests/stores.py``):
a fresh one for each test (``store``) and one for the session (``shared_store``).

The servers (moto S3, GlusterFS, GCS, HDFS, Ceph, the fault proxy, Ray) and the generated datasets come from the
plugin modules listed in :data:`pytest_plugins`; tests import their helpers from those modules, never from here.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# A plugin module imported here, before pytest loads the plugins: its asserts are rewritten all the same.
pytest.register_assert_rewrite("tests.servers.moto")

from datamount.storage import Store, open_store  # noqa: E402
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET  # noqa: E402
from tests.stores import STORE_BACKENDS  # noqa: E402

#: Fixtures that start real servers, one module per server (each skips, with its reason, where it cannot run), the
#: generated datasets, the closing summary of what was skipped, and pytest's own ``pytester`` (to test that summary).
pytest_plugins: list[str] = [
    "tests.servers.moto",
    "tests.servers.gluster",
    "tests.servers.gcs",
    "tests.servers.hdfs",
    "tests.servers.ceph",
    "tests.servers.fault_proxy",
    "tests.servers.ray_cluster",
    "tests.generated",
    "tests.skip_summary",
    "tests.parallel",
    "tests.matrix",
    "pytester",
]


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep every test away from the user's configuration, data and credentials."""
    home = tmp_path_factory.mktemp("home")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache")):
        monkeypatch.setenv(var, str(home / sub))
    for var in ("DATAMOUNT_STORE", "DATAMOUNT_CONFIG", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_TEST_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_TEST_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "aws-credentials"))
    return home


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs, to fill up (needs root)."""
    point = tmp_path / "tiny"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(point)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)


@pytest.fixture
def local_store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store")


@pytest.fixture
def memory_store() -> Iterator[Store]:
    store = open_store(f"memory://datamount-test-{uuid.uuid4().hex}")
    yield store
    store.remove("", recursive=True, missing_ok=True)


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store on each backend of :data:`STORE_BACKENDS`."""
    return request.getfixturevalue(f"{request.param}_store")


@pytest.fixture(scope="session")
def local_shared_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return open_store(tmp_path_factory.mktemp("shared") / "store")


@pytest.fixture(scope="session")
def memory_shared_store() -> Iterator[Store]:
    store = open_store(f"memory://datamount-shared-{uuid.uuid4().hex}")
    yield store
    store.remove("", recursive=True, missing_ok=True)


@pytest.fixture(scope="session", params=STORE_BACKENDS)
def shared_store(request: pytest.FixtureRequest) -> Store:
    """A store on each backend of :data:`STORE_BACKENDS` kept for the whole session: for the datasets that tests
    only read, built once (see ``tests/generated.py``). A test that changes what it reads builds its own."""
    return request.getfixturevalue(f"{request.param}_shared_store")
