"""``name@N`` names one version for the life of a store: a removed version's number is never given again, not even
after every version of the name is removed, and a version's identity is its manifest's sha256."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import catalog, layout, upload
from datamount.datasets.errors import DatasetNotFoundError
from datamount.readers import reader
from datamount.storage import Store, open_store
from tests.generated import MakeImageList, image_rows
from tests.stores import STORE_BACKENDS

LOCAL_AND_S3 = pytest.mark.parametrize("store", [STORE_BACKENDS[0], STORE_BACKENDS[2]], indirect=True)


def _changed(list_file: Path, content: bytes) -> Path:
    (list_file.parent / "data" / "img0000.jpg").write_bytes(content)
    return list_file


@LOCAL_AND_S3
def test_a_name_s_next_version_continues_its_numbers_after_every_version_is_removed(
    store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(4)
    first = upload(list_file, "d", store=store).manifest
    second = upload(_changed(list_file, b"\xff\xd8\xffsecond"), "d", store=store).manifest
    assert catalog.remove(store, "d") == [1, 2]
    third = upload(_changed(list_file, b"\xff\xd8\xffthird"), "d", store=store).manifest
    assert third.version == 3
    assert list(reader("d@3", store)()) == image_rows(list_file)
    for gone in (first, second):
        said = rf"d@{gone.version} \(manifest sha256 {gone.manifest_sha256[:16]}…\) was removed .*; versions: 3"
        with pytest.raises(DatasetNotFoundError, match=said):
            catalog.resolve(store, gone.ref)


@LOCAL_AND_S3
def test_a_removal_mark_records_the_removed_manifest_s_sha256(store: Store, make_image_list: MakeImageList) -> None:
    manifest = upload(make_image_list(3), "d", store=store).manifest
    stored = store.read(layout.manifest_path("d", 1))
    assert manifest.manifest_sha256 == hashlib.sha256(stored).hexdigest()
    assert catalog.resolve(store, "d@1").manifest_sha256 == manifest.manifest_sha256
    catalog.remove(store, "d@1")
    mark = catalog.removal(store, "d", 1)
    assert mark is not None and mark.manifest_sha256 == manifest.manifest_sha256 and mark.removed
    assert json.loads(store.read(layout.removed_path("d", 1)))["manifest_sha256"] == manifest.manifest_sha256
    with pytest.raises(DatasetNotFoundError, match=r"every version of d .* was removed \(1\); its next upload is @2"):
        catalog.resolve(store, "d")
    assert upload(make_image_list(3), "d", store=store).manifest.version == 2


def test_a_name_whose_every_version_was_removed_is_not_listed(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(3), "gone", store=local_store)
    upload(make_image_list(3), "kept", store=local_store)
    catalog.remove(local_store, "gone")
    assert [summary.name for summary in catalog.summaries(local_store)] == ["kept"]
    with pytest.raises(DatasetNotFoundError, match=r"every version of gone .* was removed already"):
        catalog.remove(local_store, "gone")


def test_a_mark_written_before_marks_recorded_the_sha256_still_counts(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(3), "d", store=local_store)
    catalog.remove(local_store, "d")
    local_store.write(layout.removed_path("d", 1), b"2026-01-01T00:00:00+00:00")  # as marks were before
    assert catalog.removal(local_store, "d", 1) == catalog.Removal(1, "2026-01-01T00:00:00+00:00")
    assert upload(make_image_list(3), "d", store=local_store).manifest.version == 2


def test_the_command_line_says_a_removed_number_was_removed_and_uploads_the_next(
    tmp_path: Path, make_image_list: MakeImageList
) -> None:
    store_dir = tmp_path / "store"
    list_file = make_image_list(3)
    runner = CliRunner()
    target = ["--store", str(store_dir)]
    assert runner.invoke(cli, ["upload", str(list_file), "cats", *target]).exit_code == 0
    assert runner.invoke(cli, ["rm", "cats", "--yes", *target]).exit_code == 0
    again = runner.invoke(cli, ["upload", str(list_file), "cats", *target])
    assert again.exit_code == 0 and "cats@2" in again.output, again.output
    info = runner.invoke(cli, ["info", "cats@1", *target])
    assert info.exit_code != 0 and "cats@1" in info.output and "was removed" in info.output, info.output
    assert "Traceback" not in info.output
    listed = runner.invoke(cli, ["ls", "--json", *target])
    assert [found["versions"] for found in json.loads(listed.output)["datasets"]] == [[2]]
    assert catalog.versions(open_store(store_dir), "cats") == [2]
