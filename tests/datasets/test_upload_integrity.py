"""What an upload stores is what it hashed, and running it again repairs what the store lost."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, upload, verify
from datamount.datasets.upload import STALE_TEMPORARY_SECONDS
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from datamount.storage.store import TEMP_PREFIX
from tests.generated import MakeImageList, image_rows


class ChangeAfterHashing:
    """Progress that rewrites a source file as soon as the hash phase is over, before anything is sent."""

    def __init__(self, victim: Path) -> None:
        self.victim = victim
        self.phase = ""

    def start(self, phase: str, *, items: int, size: int) -> None:
        self.phase = phase

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        pass

    def finish(self) -> None:
        if self.phase == "hash":
            self.victim.write_bytes(b"\xff\xd8\xff" + b"changed after hashing" * 20)


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_file_changed_between_hashing_and_sending_is_never_stored_under_its_old_hash(
    request: pytest.FixtureRequest, backend: str, make_image_list: MakeImageList
) -> None:
    """Files are hashed before they are sent where the store cannot name an object after writing it (S3), and on
    every store when the latest version has the same list (to tell whether it holds these very files)."""
    store: Store = request.getfixturevalue(f"{backend}_store")
    list_file = make_image_list(8)
    victim = list_file.parent / "data" / "img0003.jpg"
    if store.names_after_writing:  # a version of the same list, then the victim's bytes are new to the store
        upload(list_file, "d", store=store)
        victim.write_bytes(b"\xff\xd8\xff" + b"a new image" * 20)
    before = catalog.versions(store, "d")
    original = victim.read_bytes()
    with pytest.raises(IntegrityError, match=r"img0003\.jpg changed while it was being uploaded"):
        upload(list_file, "d", store=store, progress=ChangeAfterHashing(victim))
    assert catalog.versions(store, "d") == before
    victim.write_bytes(original)
    result = upload(list_file, "d", store=store)
    assert result.created
    assert list(reader("d", store)()) == image_rows(list_file)
    assert verify(store, result.manifest).ok


class ChangeBeforeSending:
    """Progress that rewrites a source file when the upload phase starts, after the list was checked."""

    def __init__(self, victim: Path, content: bytes) -> None:
        self.victim = victim
        self.content = content

    def start(self, phase: str, *, items: int, size: int) -> None:
        if phase == "upload":
            self.victim.write_bytes(self.content)

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        pass

    def finish(self) -> None:
        pass


def test_a_file_hashed_as_it_is_stored_is_named_and_recorded_by_the_bytes_stored(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    """On a store that names objects after writing them each file is read once: the version holds the bytes read,
    under their own sha256 and size, even those of a file that changed after the list was checked."""
    list_file = make_image_list(8)
    victim = list_file.parent / "data" / "img0003.jpg"
    grown = victim.read_bytes() + b"appended after the list was checked" * 30
    result = upload(list_file, "d", store=local_store, progress=ChangeBeforeSending(victim, grown))
    [entry] = [e for e in result.manifest.files if e.path == "data/img0003.jpg"]
    assert (entry.size, entry.sha256) == (len(grown), hashlib.sha256(grown).hexdigest())
    assert verify(local_store, result.manifest).ok
    assert list(reader("d", local_store)()) == image_rows(list_file)


class RemoveAfterSending:
    """Progress that removes every object of the dataset when the first upload phase is over, as a removal racing
    the upload would, before the version is committed."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.phase = ""
        self.removed = False

    def start(self, phase: str, *, items: int, size: int) -> None:
        self.phase = phase

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        pass

    def finish(self) -> None:
        if self.phase == "upload" and not self.removed:
            self.store.remove(f"{layout.dataset_folder(self.name)}/{layout.OBJECTS}", recursive=True)
            self.removed = True


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_objects_a_racing_removal_takes_before_the_commit_are_sent_again(
    request: pytest.FixtureRequest, backend: str, make_image_list: MakeImageList
) -> None:
    store: Store = request.getfixturevalue(f"{backend}_store")
    list_file = make_image_list(6)
    result = upload(list_file, "d", store=store, progress=RemoveAfterSending(store, "d"))
    assert result.created and result.sent_files == 2 * 6  # each sent, then each sent again
    assert verify(store, result.manifest).ok
    assert list(reader("d", store)()) == image_rows(list_file)


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_the_documented_repair_sends_again_what_the_store_lost(
    request: pytest.FixtureRequest, backend: str, make_image_list: MakeImageList
) -> None:
    store: Store = request.getfixturevalue(f"{backend}_store")
    list_file = make_image_list(10)
    manifest = upload(list_file, "d", store=store).manifest
    lost = manifest.files[2:5]
    for entry in lost:
        store.remove(layout.object_path("d", entry.sha256))
    assert not verify(store, manifest).ok
    again = upload(list_file, "d", store=store)
    assert not again.created and again.manifest.version == 1
    assert again.repaired_files == len(lost)
    assert verify(store, manifest).ok
    assert list(reader("d", store)()) == image_rows(list_file)
    assert upload(list_file, "d", store=store).repaired_files == 0


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_upload(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(4)
    upload(list_file, "d", store=local_store)
    objects = Path(local_store.local_path("datasets/d/objects"))
    stale = objects / "ab" / f"{TEMP_PREFIX}abcdef.0123456789ab"
    fresh = objects / "cd" / f"{TEMP_PREFIX}cdef01.0123456789ab"
    for left in (stale, fresh):
        left.parent.mkdir(parents=True, exist_ok=True)
        left.write_bytes(b"half of an object")
    day_ago = time.time() - STALE_TEMPORARY_SECONDS - 60
    os.utime(stale, (day_ago, day_ago))
    (list_file.parent / "data" / "img0000.jpg").write_bytes(b"\xff\xd8\xff changed")
    upload(list_file, "d", store=local_store)
    assert not stale.exists()  # left by a writer killed long ago
    assert fresh.exists()  # may belong to a writer that is still running
