"""A file's content digest: a file held only in shards (``upload --pack``, manifest format 8) records its xxh3-64 and
no sha256, and two entries of one path hold the same bytes by the digest both record (``same_content``), in
``diff`` and in the upload that finds a version holds its list already
(``test_upload_packed.py``: running it again creates nothing, packed or not)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from datamount.datasets import catalog
from datamount.datasets.diff import diff_manifests
from datamount.datasets.file_entry import FileEntry, same_content
from datamount.datasets.manifest import Manifest
from datamount.storage import Store
from datamount.storage.checksums import xxh3
from tests.datasets.test_diff import CONTENTS_A, CONTENTS_B, IMAGES_A, IMAGES_B, image_version

A, B = b"first bytes", b"other bytes"
SHA_A, SHA_B = hashlib.sha256(A).hexdigest(), hashlib.sha256(B).hexdigest()
XXH_A, XXH_B = xxh3(A), xxh3(B)


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (FileEntry("p", 11, SHA_A, XXH_A), FileEntry("p", 11, SHA_A, XXH_A), True),
        (FileEntry("p", 11, SHA_A, XXH_A), FileEntry("p", 11, "", XXH_A), True),  # unpacked against packed
        (FileEntry("p", 11, "", XXH_A), FileEntry("p", 11, "", XXH_A), True),  # packed against packed
        (FileEntry("p", 11, SHA_A, ""), FileEntry("p", 11, SHA_A, XXH_A), True),  # before format 4 against after
        (FileEntry("p", 11, "", XXH_A), FileEntry("p", 11, "", XXH_B), False),
        (FileEntry("p", 11, SHA_A, XXH_A), FileEntry("p", 11, SHA_B, XXH_A), False),  # the sha256 decides
        (FileEntry("p", 11, SHA_A, XXH_A), FileEntry("p", 12, SHA_A, XXH_A), False),  # another size
        (FileEntry("p", 11, SHA_A, ""), FileEntry("p", 11, "", XXH_A), False),  # no digest in common
    ],
)
def test_two_entries_hold_the_same_bytes_by_the_digest_both_record(
    first: FileEntry, second: FileEntry, same: bool
) -> None:
    assert same_content(first, second) is same and same_content(second, first) is same


def test_a_packed_upload_records_each_files_xxh3_and_no_sha256(local_store: Store, tmp_path: Path) -> None:
    ref = image_version(local_store, tmp_path / "a", "cats", IMAGES_A, CONTENTS_A, "packed at upload")
    manifest = _manifest(local_store, ref)
    assert manifest.format_version == 8
    assert sorted(manifest.files) == sorted(FileEntry(p, len(data), "", xxh3(data)) for p, data in CONTENTS_A.items())


def test_files_that_share_no_digest_are_counted_changed_and_said(local_store: Store, tmp_path: Path) -> None:
    """A version whose entries record only sha256s (packed before format 8) against one whose entries record only
    xxh3-64s: a file of one size in both cannot be compared, so it counts as changed, and the diff's notes say why;
    a file of another size is changed without a note."""
    a = _manifest(local_store, image_version(local_store, tmp_path / "a", "cats", IMAGES_A, CONTENTS_A, "objects"))
    packed = image_version(local_store, tmp_path / "b", "cats", IMAGES_B, CONTENTS_B, "packed at upload")
    b = _manifest(local_store, packed)
    before = diff_manifests(local_store, a, b)
    assert before.files.changed == 2 and before.files.unchanged == 5 and before.notes == []
    sha256_only = dataclasses.replace(a, files=[entry._replace(xxh3="") for entry in a.files])
    found = diff_manifests(local_store, sha256_only, b)
    # c.png and e.png have other bytes; a, b, d, g, h the same, of the same size, but not comparable.
    assert (found.files.changed, found.files.unchanged, found.files.added, found.files.removed) == (7, 0, 1, 1)
    (note,) = found.notes
    assert note.startswith("5 files of the same size in both versions could not be compared by content")
    assert "cats@1 is of format 7, cats@2 of format 8" in note


def _manifest(store: Store, ref: str) -> Manifest:
    return catalog.resolve(store, ref)
