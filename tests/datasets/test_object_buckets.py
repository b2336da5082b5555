"""The objects versions name, compared with a store a folder of ``objects/`` at a time (datasets/object_buckets.py),
and the walkers that use them: ``catalog.missing``, ``verify``, ``catalog.remove_unused``."""

from __future__ import annotations

import hashlib
import random

import pytest

from datamount.datasets import catalog, layout, locks
from datamount.datasets.manifest import FileEntry, Kind, Manifest
from datamount.datasets.object_buckets import ObjectBuckets, absent, unused
from datamount.datasets.verify import verify
from datamount.storage import Store
from datamount.storage.testing import write_all


def contents(count: int, start: int = 0) -> list[bytes]:
    return [b"object %d" % i for i in range(start, start + count)]


def entry_of(path: str, data: bytes) -> FileEntry:
    return FileEntry(path, len(data), hashlib.sha256(data).hexdigest(), "")


def stored(store: Store, name: str, datas: list[bytes]) -> list[FileEntry]:
    """Store ``datas`` as objects of ``name``; their entries (one path each)."""
    entries = [entry_of(f"img/{i:06d}.jpg", data) for i, data in enumerate(datas)]
    write_all(store, {layout.object_path(name, entry.sha256): data for entry, data in zip(entries, datas, strict=True)})
    return entries


def committed(store: Store, name: str, entries: list[FileEntry]) -> Manifest:
    draft = Manifest(name=name, kind=Kind.IMAGE, columns=["image", "label"], rows=len(entries), files=entries)
    with locks.writing(store, name):
        catalog.commit(store, draft)
    return catalog.resolve(store, name)


@pytest.mark.parametrize("held", [1, 7, 1 << 16], ids=["each-spilled", "some-spilled", "held"])
def test_buckets_hold_each_object_once_by_its_folder_in_memory_or_on_disk(held: int) -> None:
    rng = random.Random(held)
    datas = contents(500)
    entries = [entry_of(f"p{i}", rng.choice(datas)) for i in range(2000)]  # contents named by several paths
    expected: dict[str, dict[str, int]] = {}
    for entry in entries:
        expected.setdefault(entry.sha256[:2], {})[entry.sha256] = entry.size
    with ObjectBuckets(iter(entries), held_records=held) as buckets:
        assert buckets.folders == sorted(expected)
        assert {folder: buckets.bucket(folder) for folder in buckets.folders} == expected
        assert buckets.bucket("zz") == buckets.bucket("abc") == {}


def test_absent_names_each_object_missing_or_of_another_size(store: Store) -> None:
    entries = stored(store, "d", contents(40))
    gone = [entry_of("lost.jpg", b"never stored")]
    resized = entries[3]
    store.write(layout.object_path("d", resized.sha256), b"shorter")
    named = [*entries, *gone, entries[0]]
    expected = {layout.object_path("d", e.sha256) for e in [*gone, resized]}
    found = list(absent(store, "d", named))
    assert sorted(found) == sorted(expected)


def test_unused_lists_each_stored_object_no_entry_names(store: Store) -> None:
    kept = stored(store, "d", contents(30))
    dropped = stored(store, "d", contents(30, start=30))
    store.write(f"{layout.dataset_folder('d')}/{layout.OBJECTS}/stray", b"x")
    found = [path for paths in unused(store, "d", kept) for path in paths]
    expected = {layout.object_path("d", e.sha256) for e in dropped} | {f"{layout.dataset_folder('d')}/objects/stray"}
    assert sorted(found) == sorted(expected)


def test_commit_names_the_objects_missing_from_a_draft(store: Store) -> None:
    entries = stored(store, "d", contents(20))
    store.remove(layout.object_path("d", entries[5].sha256))
    draft = Manifest(name="d", kind=Kind.IMAGE, columns=["image", "label"], rows=20, files=entries)
    with locks.writing(store, "d"), pytest.raises(FileNotFoundError, match="1 of the files it names are not stored"):
        catalog.commit(store, draft)


def test_verify_and_removal_walk_the_objects_folder_by_folder(store: Store) -> None:
    first = committed(store, "d", stored(store, "d", contents(50)))
    second = committed(store, "d", stored(store, "d", contents(50, start=25)))
    shared = {e.sha256 for e in first.files}
    lost, damaged = [e for e in second.files if e.sha256 not in shared][:2]
    store.remove(layout.object_path("d", lost.sha256))
    store.write(layout.object_path("d", damaged.sha256), b"not it")
    report = verify(store, second)
    assert report.checked == 50 + len(catalog.file_part_paths(second))
    assert sorted((d.path, d.missing) for d in report.damaged) == sorted(
        [(layout.object_path("d", lost.sha256), True), (layout.object_path("d", damaged.sha256), False)]
    )
    assert any(d.reason.startswith("wrong size") for d in report.damaged)
    catalog.remove(store, "d@2")
    area = f"{layout.dataset_folder('d')}/{layout.OBJECTS}"
    assert set(store.list(area)) == {layout.object_path("d", e.sha256) for e in first.files}
    assert verify(store, first).ok
