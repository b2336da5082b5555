"""Format 6: a version's file entries in Parquet parts its manifest names (datasets/file_parts.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import random
from collections.abc import Iterator, Sequence
from typing import overload

import pytest
import xxhash

from datamount.datasets import catalog, layout, locks, upload
from datamount.datasets.errors import MissingPartError
from datamount.datasets.file_parts import FileParts
from datamount.datasets.file_parts_writer import write_file_parts
from datamount.datasets.manifest import FileEntry
from datamount.datasets.verify import repair, verify
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from tests.generated import MakeImageList, image_rows


class OnePass(Sequence[FileEntry]):
    """Entries that can be iterated once, and not indexed: what a writer that reads them from disk gives."""

    def __init__(self, entries: list[FileEntry]) -> None:
        self._entries = entries
        self.passes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> FileEntry: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[FileEntry]: ...
    def __getitem__(self, index: int | slice) -> FileEntry | Sequence[FileEntry]:
        raise AssertionError("the commit indexed the entries")

    def __iter__(self) -> Iterator[FileEntry]:
        self.passes += 1
        if self.passes > 1:
            raise AssertionError("the commit iterated the entries twice")
        return iter(self._entries)


def entries(count: int, seed: int = 0) -> list[FileEntry]:
    """``count`` entries of distinct paths, in random order, half of them with an xxh3-64."""
    rng = random.Random(seed)
    made = [
        FileEntry(
            f"d{i % 7}/f{i:07d}.jpg", rng.randrange(1 << 20), rng.randbytes(32).hex(), rng.randbytes(8).hex() * (i % 2)
        )
        for i in range(count)
    ]
    made = [entry if i % 2 else entry._replace(xxh3="") for i, entry in enumerate(made)]
    rng.shuffle(made)
    return made


def test_a_commit_stores_the_entries_in_sorted_parts_iterating_them_once(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(30)
    first = upload(list_file, "d", store=local_store).manifest
    shuffled = list(first.files)
    random.Random(1).shuffle(shuffled)
    given = OnePass(shuffled)
    draft = dataclasses.replace(first, version=0, files=given, source="again")
    with locks.writing(local_store, "d"):
        committed = catalog.commit(local_store, draft)
    assert given.passes == 1
    read = catalog.resolve(local_store, "d@2")
    assert isinstance(read.files, FileParts) and read.format_version == 7
    assert list(read.files) == sorted(shuffled) == list(first.files)
    assert read.files == committed.files and read.files_size == sum(entry.size for entry in shuffled)
    assert list(reader("d@2", local_store)()) == image_rows(list_file)


@pytest.mark.parametrize("run_rows", [10_000, 97], ids=["in-memory", "spilled-and-merged"])
def test_entries_are_sorted_in_runs_and_cut_into_parts(memory_store: Store, run_rows: int) -> None:
    given = entries(1_000)
    parts = write_file_parts(memory_store, "d", iter(given), rows_per_part=128, run_rows=run_rows)
    files = FileParts(memory_store, layout.dataset_folder("d"), parts, "d@1")
    assert [part.rows for part in parts] == [128] * 7 + [104]
    assert list(files) == sorted(given) and len(files) == 1_000
    assert [part.first for part in parts] == [files[128 * n].path for n in range(8)]
    assert files.files_size == sum(entry.size for entry in given)


def test_runs_given_in_order_are_read_one_after_the_other(memory_store: Store) -> None:
    given = sorted(entries(500))
    parts = write_file_parts(memory_store, "d", given, rows_per_part=64, run_rows=50)
    assert list(FileParts(memory_store, layout.dataset_folder("d"), parts, "d@1")) == given


def test_two_entries_of_one_path_are_refused(memory_store: Store) -> None:
    given = [*entries(10), FileEntry("d0/f0000000.jpg", 1, "ab" * 32)]
    with pytest.raises(ValueError, match=r"two file entries have the path 'd0/f0000000\.jpg'"):
        write_file_parts(memory_store, "d", given, run_rows=4)


def test_entry_i_and_the_entry_of_a_path_are_read_from_their_part_alone(local_store: Store) -> None:
    """Every part but one is removed: what that part holds is still found, by position and by path."""
    given = sorted(entries(2_000))
    parts = write_file_parts(local_store, "d", given, rows_per_part=256)
    folder = layout.dataset_folder("d")
    for part in parts[:3] + parts[4:]:
        local_store.remove(f"{folder}/{part.path}")
    files = FileParts(local_store, folder, parts, "d@1")
    assert files[3 * 256] == given[3 * 256] and files[4 * 256 - 1] == given[4 * 256 - 1]
    assert files[-len(given) + 3 * 256 + 5] == given[3 * 256 + 5]
    assert files.stored_entry(given[3 * 256 + 7].path) == given[3 * 256 + 7]
    assert files.stored_entry(given[3 * 256 + 7].path + "x") is None
    assert len(files) == 2_000
    with pytest.raises(
        MissingPartError, match=r"the part of its file entries file://.*/entries/[0-9a-f]{64}\.parquet is missing"
    ):
        files[0]
    with pytest.raises(IndexError):
        files[2_000]


def test_a_damaged_part_is_an_integrity_error(local_store: Store, make_image_list: MakeImageList) -> None:
    manifest = upload(make_image_list(5), "d", store=local_store).manifest
    assert isinstance(manifest.files, FileParts)
    path = f"{layout.dataset_folder('d')}/{manifest.files.parts[0].path}"
    data = bytearray(local_store.read(path))
    data[len(data) // 2] ^= 0xFF
    local_store.write(path, bytes(data))
    files = catalog.resolve(local_store, "d").files
    assert isinstance(files, FileParts)
    with pytest.raises(IntegrityError, match=r"file entries .*entries/[0-9a-f]{64}\.parquet does not match its size"):
        files.stored_entry("data/img0001.jpg")


def test_a_manifest_sent_to_another_process_carries_the_parts_names_not_the_entries(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(200)
    upload(list_file, "d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    sent = pickle.dumps(manifest)
    assert len(sent) < 5_000 and manifest.files[-1].sha256.encode() not in sent  # 200 sha256 alone are 12,800 B
    received = pickle.loads(sent)
    assert list(received.files) == list(manifest.files) and len(received.files) == 200


def test_info_reads_the_manifest_alone(local_store: Store, make_image_list: MakeImageList) -> None:
    """The number of files and their size come from the manifest's JSON: with its parts gone, they are still known."""
    uploaded = upload(make_image_list(7), "d", store=local_store).manifest
    size = sum(entry.size for entry in uploaded.files)
    local_store.remove(f"{layout.dataset_folder('d')}/{layout.ENTRIES}", recursive=True)
    manifest = catalog.resolve(local_store, "d")
    assert len(manifest.files) == 7 and manifest.files_size == size


def test_removing_a_version_removes_the_parts_no_other_version_uses(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(4), "d", store=local_store)
    upload(make_image_list(5, name="more.list"), "d", store=local_store)
    area = f"{layout.dataset_folder('d')}/{layout.ENTRIES}"
    assert len(local_store.list(area)) == 4  # each version's entries and row index
    catalog.remove(local_store, "d@1")
    kept = catalog.resolve(local_store, "d@2")
    assert isinstance(kept.files, FileParts)
    assert set(local_store.list(area)) == set(catalog.file_part_paths(kept))


@pytest.mark.parametrize("format_version", [4, 5])
def test_a_manifest_with_its_files_in_its_json_still_reads(local_store: Store, format_version: int) -> None:
    """The bytes of a manifest as formats 4 and 5 wrote it (its files in its JSON), beside its list and objects."""
    contents = {"a.bin": b"first", "b/c.bin": b"second!"}
    listed = b"a.bin\tx\nb/c.bin\ty\n"
    list_sha = hashlib.sha256(listed).hexdigest()
    local_store.write(f"datasets/old/lists/{list_sha}.list", listed)
    files = []
    for path, data in contents.items():
        digest = hashlib.sha256(data).hexdigest()
        local_store.write(layout.object_path("old", digest), data)
        files.append([path, len(data), digest, xxhash.xxh3_64_hexdigest(data)])
    stored = (
        '{"name":"old","kind":"image","columns":["file","label"],"rows":2,"files":FILES,"list_sha256":"SHA",'
        '"list_size":SIZE,"shards":[],"source":"old.list","extra":{},"objects":true,"version":1,'
        '"created":"2026-11-01T10:00:00+00:00","datamount_version":"0.1.0","format_version":VERSION}\n'
    )
    stored = stored.replace("FILES", json.dumps(files, separators=(",", ":"))).replace("SHA", list_sha)
    stored = stored.replace("SIZE", str(len(listed))).replace("VERSION", str(format_version))
    local_store.write(layout.manifest_path("old", 1), stored.encode())
    manifest = catalog.resolve(local_store, "old")
    assert manifest.format_version == format_version and not isinstance(manifest.files, FileParts)
    assert [tuple(entry) for entry in manifest.files] == [tuple(file) for file in files]
    assert list(reader("old", local_store)()) == [(b"first", "x"), (b"second!", "y")]


def test_verify_checks_the_parts_and_reports_a_damaged_one(local_store: Store, make_image_list: MakeImageList) -> None:
    manifest = upload(make_image_list(5), "d", store=local_store).manifest
    assert isinstance(manifest.files, FileParts)
    report = verify(local_store, manifest)
    assert report.ok and report.checked == 1 + 1 + 1 + 5  # the list, the part, the row index's part, the objects
    path = f"{layout.dataset_folder('d')}/{manifest.files.parts[0].path}"
    local_store.write(path, local_store.read(path)[:-1] + b"!")
    report = verify(local_store, catalog.resolve(local_store, "d"))
    assert [problem.split(":")[0] for problem in report.problems] == ["wrong content"]
    assert f"file entries {manifest.files.parts[0].path}" in report.problems[0]
    repaired = repair(local_store, catalog.resolve(local_store, "d"))
    assert not repaired.ok and "holds the only copy of those entries" in repaired.unrepaired[0][1]


def test_a_packed_version_is_opened_and_read_without_its_parts(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(6)
    upload(list_file, "d", store=local_store, packed=True)
    local_store.remove(f"{layout.dataset_folder('d')}/{layout.ENTRIES}", recursive=True)
    samples = reader("d", local_store)
    assert list(samples()) == image_rows(list_file) and samples[4] == image_rows(list_file)[4]
