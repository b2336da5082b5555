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

Every test of ``AbstractGetTests`` runs as fsspec wrote it. ``test_get_directory_recursive`` makes its source in its
body, with ``mkdir`` and ``touch`` of ``fs_path``'s folder: the filesystem under test (:class:`_Uploading`) takes
those two as its source's upload, a new version of ``_/written``, which it then reads as ``_/written@latest``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fsspec.tests.abstract import AbstractFixtures, AbstractGetTests

from datamount.datasets import upload
from datamount.storage import Store
from datamount.urlfs import DatamountFileSystem, parse
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET

BULK = ["file1", "file2", "subdir/subfile1", "subdir/subfile2", "subdir/nesteddir/nestedfile"]
GLOB_EDGE_CASES = ["file1", "file2"] + [
    f"subdir{index}/{name}" for index in range(2) for name in ("subfile1", "subfile2", "nesteddir/nestedfile")
]
SAME_NAME_PREFIX = ["subdir.txt", "subdir/subfile.txt"]
HASHED = {f"{hashlib.md5(str(i).encode()).hexdigest()}.txt": str(i).encode() for i in range(10)}


class _Uploading(DatamountFileSystem):
    """``datamount://`` with ``mkdir`` and ``touch`` of ``_/<name>@latest/<path>`` taken as an upload: a folder and an
    empty file staged under ``staging/<name>``, each ``touch`` uploading what is staged as the next version of
    ``<name>`` to ``uploads_to`` (the store ``_`` names), whose ``latest`` is then resolved again. Everything else is
    :class:`DatamountFileSystem`'s own, which writes nothing."""

    def __init__(self, *, staging: Path, uploads_to: Store, **options: Any) -> None:
        super().__init__(**options)
        self._staging = staging
        self._uploads_to = uploads_to

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        where = parse(path)
        (self._staging / where.name / where.inner).mkdir(parents=True, exist_ok=True)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        where = parse(path)
        folder = self._staging / where.name
        (folder / where.inner).parent.mkdir(parents=True, exist_ok=True)
        (folder / where.inner).write_bytes(b"")
        listed = folder / "staged.list"
        files = sorted(file.relative_to(folder).as_posix() for file in folder.rglob("*") if file.is_file())
        listed.write_text("".join(f"{file}\t0\n" for file in files if file != listed.name), encoding="utf-8")
        upload(listed, where.name, store=self._uploads_to)
        self.invalidate_cache()


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
        return "_/written@latest"  # test_get_directory_recursive's source, made by _Uploading

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False  # a version's folders are those of its files' paths

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
        return _Uploading(
            staging=tmp_path / "written",
            uploads_to=local_store,
            store=local_store.url,
            cache=str(tmp_path / "cache"),
            skip_instance_cache=True,
        )


@pytest.mark.s3
class TestGetFromS3(_Scenarios, AbstractGetTests):
    @pytest.fixture
    def fs(self, s3_store: Store, s3_server, tmp_path: Path) -> DatamountFileSystem:
        self.store = s3_store
        options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
        return _Uploading(
            staging=tmp_path / "written",
            uploads_to=s3_store,
            store=s3_store.url,
            options=options,
            cache=str(tmp_path / "cache"),
            skip_instance_cache=True,
        )
