"""fsspec's own contract tests (``fsspec.tests.abstract``) on ``datamount://``, on a local store and on moto's S3.

The scenarios those tests read are written there with ``touch``, ``makedirs`` and ``pipe``; a read-only filesystem
takes them as dataset versions instead: each scenario's files uploaded as an image version whose list names them
under ``source/``, and the test reads ``_/<scenario>@1/source``.

Left out, and why (each writes to the filesystem under test, which is read-only: every write is ``EROFS``, tested
in ``test_urlfs.py``):

- ``AbstractOpenTests.test_open_exclusive``: opens for writing (``wb``, ``xb``);
- ``AbstractCopyTests`` (all): ``cp`` inside the filesystem;
- ``AbstractMvTests`` (all): ``mv`` inside the filesystem;
- ``AbstractPipeTests`` (all): ``pipe``;
- ``AbstractPutTests`` (all): ``put`` from the local filesystem.

Every test of ``AbstractGetTests`` runs; ``test_get_directory_recursive``, which makes its source with ``mkdir``
and ``touch`` in its body, runs as fsspec writes it with that source a version instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from fsspec.tests.abstract import AbstractFixtures, AbstractGetTests

from datamount.datasets import upload
from datamount.storage import Store
from datamount.urlfs import DatamountFileSystem
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET

BULK = ["file1", "file2", "subdir/subfile1", "subdir/subfile2", "subdir/nesteddir/nestedfile"]
GLOB_EDGE_CASES = ["file1", "file2"] + [
    f"subdir{index}/{name}" for index in range(2) for name in ("subfile1", "subfile2", "nesteddir/nestedfile")
]
SAME_NAME_PREFIX = ["subdir.txt", "subdir/subfile.txt"]
HASHED = {f"{hashlib.md5(str(i).encode()).hexdigest()}.txt": str(i).encode() for i in range(10)}


class _Scenarios(AbstractFixtures):
    """The scenarios as versions on ``self.store`` (set by the ``fs`` fixture of each backend)."""

    def version(self, tmp_path: Path, name: str, files: dict[str, bytes]) -> str:
        """Upload ``files`` (their paths under ``source/``) as version 1 of ``name``; the path of ``source``."""
        root = tmp_path / name
        lines = []
        for path, data in files.items():
            (root / "source" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / "source" / path).write_bytes(data)
            lines.append(f"source/{path}\t0\n")
        (root / "train.list").write_text("".join(lines), encoding="utf-8")
        upload(root / "train.list", name, store=self.store)
        return f"_/{name}@1/source"

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return lambda *parts: "/".join(part.rstrip("/") for part in parts)

    @pytest.fixture
    def fs_path(self) -> str:
        return "_/unused@1"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False  # a version's folders are those of its files' paths

    def test_get_directory_recursive(self, fs, fs_join, local_fs, local_join, local_target, tmp_path) -> None:
        # fsspec's test (filesystem_spec issue 1062), its source a version rather than made by mkdir and touch.
        src = self.version(tmp_path, "recursive", {"file": b""})
        target = local_target
        assert not local_fs.exists(target)
        for loop in range(2):
            fs.get(src, target, recursive=True)
            assert local_fs.isdir(target)
            if loop == 0:
                assert local_fs.isfile(local_join(target, "file"))
                assert not local_fs.exists(local_join(target, "source"))
            else:
                assert local_fs.isfile(local_join(target, "file"))
                assert local_fs.isdir(local_join(target, "source"))
                assert local_fs.isfile(local_join(target, "source", "file"))
        local_fs.rm(target, recursive=True)
        assert not local_fs.exists(target)
        for _ in range(2):
            fs.get(src + "/", target, recursive=True)
            assert local_fs.isdir(target)
            assert local_fs.isfile(local_join(target, "file"))
            assert not local_fs.exists(local_join(target, "source"))

    @pytest.fixture
    def fs_bulk_operations_scenario_0(self, fs: DatamountFileSystem, tmp_path: Path) -> str:
        return self.version(tmp_path, "bulk", dict.fromkeys(BULK, b""))

    @pytest.fixture
    def fs_glob_edge_cases_files(self, fs: DatamountFileSystem, tmp_path: Path) -> str:
        return self.version(tmp_path, "globs", dict.fromkeys(GLOB_EDGE_CASES, b""))

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(self, fs: DatamountFileSystem, tmp_path: Path) -> str:
        return self.version(tmp_path, "prefix", dict.fromkeys(SAME_NAME_PREFIX, b""))

    @pytest.fixture
    def fs_10_files_with_hashed_names(self, fs: DatamountFileSystem, tmp_path: Path) -> str:
        return self.version(tmp_path, "hashed", HASHED)


class TestGetFromALocalStore(_Scenarios, AbstractGetTests):
    @pytest.fixture
    def fs(self, local_store: Store, tmp_path: Path) -> DatamountFileSystem:
        self.store = local_store
        return DatamountFileSystem(store=local_store.url, cache=str(tmp_path / "cache"), skip_instance_cache=True)


@pytest.mark.s3
class TestGetFromS3(_Scenarios, AbstractGetTests):
    @pytest.fixture
    def fs(self, s3_store: Store, s3_server, tmp_path: Path) -> DatamountFileSystem:
        self.store = s3_store
        options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
        return DatamountFileSystem(
            store=s3_store.url, options=options, cache=str(tmp_path / "cache"), skip_instance_cache=True
        )
