"""Uploading ``.list`` datasets to every store backend, reading them back, versions, and what a failure leaves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from datamount.datasets import catalog, verify
from datamount.datasets.errors import DatasetNotFoundError, InvalidDatasetNameError, ListFormatError
from datamount.datasets.upload import upload
from datamount.readers.dataset import reader
from datamount.storage import Store
from tests.generated import MakeImageList, image_rows


def test_image_round_trip_on_every_backend(store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(30)
    result = upload(list_file, "cats", store=store)
    assert result.created and result.sent_files == 30 and result.manifest.rows == 30
    assert list(reader("cats", store)()) == image_rows(list_file)
    assert verify(store, result.manifest).ok


def test_text_round_trip_on_every_backend(store: Store, text_list: Path) -> None:
    result = upload(text_list, "pairs", store=store)
    assert result.manifest.kind == "text" and result.manifest.columns == ["source", "target"]
    assert list(reader("pairs", store)()) == [("bonjour", "hello"), ("le chat", "the cat"), ("merci", "thank you")]


def test_the_same_upload_twice_is_up_to_date(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(5)
    upload(list_file, "d", store=local_store)
    again = upload(list_file, "d", store=local_store)
    assert not again.created and again.manifest.version == 1 and again.sent_files == 0
    assert catalog.versions(local_store, "d") == [1]


def test_a_changed_list_is_a_new_version_and_old_readers_keep_theirs(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(6)
    upload(list_file, "d", store=local_store)
    before = reader("d", local_store)
    first_pass = list(before())
    changed = list_file.parent / "data" / "img0002.jpg"
    changed.write_bytes(b"new bytes for one file")
    result = upload(list_file, "d", store=local_store)
    assert result.manifest.version == 2
    assert (result.sent_files, result.reused_files) == (1, 5)
    assert list(before()) == first_pass  # the running reader keeps version 1
    assert reader("d", local_store).manifest.version == 2
    assert list(reader("d@1", local_store)()) == first_pass
    assert list(reader("d", local_store)())[2][0] == b"new bytes for one file"


def test_a_bad_list_writes_nothing(store: Store, tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"A")
    bad = tmp_path / "bad.list"
    bad.write_text("a.jpg\t1\nmissing.jpg\t2\na.jpg\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        upload(bad, "d", store=store)
    assert [p.line for p in caught.value.problems] == [2, 3]
    assert store.list() == {}


@pytest.mark.parametrize("name", ["", "../x", "a/b/c", "-dash", "has space", "public", "x@1", "a/..", "é"])
def test_invalid_names_are_refused_before_anything_is_read(local_store: Store, tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidDatasetNameError):
        upload(tmp_path / "does-not-matter.list", name, store=local_store)
    assert local_store.list() == {}


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (-3, ValueError), (2.5, TypeError)])
def test_max_requests_is_checked_before_anything_is_read(
    local_store: Store, tmp_path: Path, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=rf"^max_requests must be (at least 1|a whole number), got {value}$"):
        upload(tmp_path / "does-not-matter.list", "d", store=local_store, max_requests=value)
    assert local_store.list() == {}


def test_a_killed_upload_is_invisible_then_resumed(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(200, size=2000)
    # A progress receiver that kills its own process mid-upload, as a power cut or an OOM kill would.
    script = textwrap.dedent(
        f"""
        import os, signal
        from datamount.datasets.upload import upload

        class DieMidUpload:
            def start(self, phase, *, items, size):
                self.phase, self.done = phase, 0
            def advance(self, *, items=1, size=0):
                self.done += items
                if self.phase == "upload" and self.done == 15:
                    os.kill(os.getpid(), signal.SIGKILL)
            def finish(self):
                pass

        upload({str(list_file)!r}, "big", store={str(local_store.root)!r}, progress=DieMidUpload(), max_requests=2)
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert killed.returncode == -9, killed.stderr.decode()
    partial = local_store.list("datasets/big/objects")
    assert 15 <= len(partial) < 200
    with pytest.raises(DatasetNotFoundError):
        reader("big", local_store)
    result = upload(list_file, "big", store=local_store)
    assert result.sent_files == 200 - len(partial) and result.reused_files == len(partial)
    assert list(reader("big", local_store)()) == image_rows(list_file)


def _bytes_read_by_this_process() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no rchar")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_an_upload_to_a_file_system_reads_each_file_once(local_store: Store, make_image_list: MakeImageList) -> None:
    """Hashed as they are stored: hashing every file first and then copying it read each byte twice."""
    list_file = make_image_list(64, size=256 << 10)
    total = sum(path.stat().st_size for path in (list_file.parent / "data").iterdir())
    before = _bytes_read_by_this_process()
    result = upload(list_file, "d", store=local_store)
    read = _bytes_read_by_this_process() - before
    assert result.sent_bytes == total
    assert total <= read < 1.25 * total


def test_duplicate_files_are_stored_once(local_store: Store, tmp_path: Path) -> None:
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / name).write_bytes(b"same bytes")
    list_file = tmp_path / "x.list"
    list_file.write_text("a.jpg\t1\nb.jpg\t2\na.jpg\t3\n", encoding="utf-8")
    result = upload(list_file, "dupes", store=local_store)
    assert result.sent_files == 1
    assert len(local_store.list("datasets/dupes/objects")) == 1
    assert [label for _, label in reader("dupes", local_store)()] == ["1", "2", "3"]


def test_unreachable_store_fails_before_sending(
    make_image_list: MakeImageList, monkeypatch: pytest.MonkeyPatch
) -> None:
    list_file = make_image_list(2)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:9"):
        upload(list_file, "d", store="s3://bucket")


def test_namespaced_and_public_names(local_store: Store, text_list: Path) -> None:
    upload(text_list, "team/pairs", store=local_store)
    upload(text_list, "public/mt", store=local_store)
    assert catalog.dataset_names(local_store) == ["team/pairs", "public/mt"]
    assert reader("mt", local_store).manifest.name == "public/mt"
    assert os.path.isdir(Path(local_store.root) / "datasets" / "team" / "pairs" / "versions")
