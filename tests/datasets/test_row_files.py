"""Each row of an unpacked image version and the file (and object) the manifest gives it."""

from __future__ import annotations

import pytest

from datamount.datasets import DatasetNotFoundError, catalog, layout
from datamount.datasets.rows import object_locations, read_lines
from datamount.datasets.rows.listed import row_files
from datamount.datasets.upload import upload
from datamount.storage import Store
from tests.generated import MakeImageList


def test_every_row_has_its_files_entry_and_object(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(12, size=500)
    upload(list_file, "pics", store=local_store)
    manifest = catalog.resolve(local_store, "pics")
    lines = read_lines(local_store, manifest)
    by_path = {entry.path: entry for entry in manifest.files}
    assert row_files(manifest, lines) == [by_path[line[0]] for line in lines]
    for location, line in zip(object_locations(manifest, lines), lines, strict=True):
        entry = by_path[line[0]]
        assert location == (layout.object_path("pics", entry.sha256), entry.size, entry.sha256, entry.xxh3)
        assert local_store.read(location.path) == (list_file.parent / line[0]).read_bytes()


def test_a_row_whose_file_the_manifest_lacks_is_named(local_store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(3, size=100), "pics", store=local_store)
    manifest = catalog.resolve(local_store, "pics")
    lines = [*read_lines(local_store, manifest), ("images/not-uploaded.jpg", "cat")]
    with pytest.raises(DatasetNotFoundError, match=r"pics@1: the manifest has no file for 'images/not-uploaded\.jpg'"):
        row_files(manifest, lines)
