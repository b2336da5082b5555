"""Finding, verifying and removing datasets; names and references."""

from __future__ import annotations

import gc
import hashlib
import json
import pickle
from pathlib import Path
from urllib.parse import unquote

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from datamount.datasets import catalog, layout, verify
from datamount.datasets.errors import DatasetNotFoundError, InvalidDatasetNameError, ManifestError
from datamount.datasets.manifest import FORMAT_VERSION, ROW_INDEX_FORMAT_VERSION, Manifest
from datamount.datasets.names import DatasetRef, parse_ref, validate_name
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import Store, open_store
from tests.generated import MakeImageList
from tests.manifests import inline_body
from tests.servers.fault_proxy import FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server


def test_verify_reports_every_missing_and_corrupt_object(store: Store, make_image_list: MakeImageList) -> None:
    manifest = upload(make_image_list(6), "d", store=store).manifest
    folder = layout.dataset_folder("d")
    first, second, third = manifest.files[:3]
    store.remove(f"{folder}/{layout.object_key(first.sha256)}")
    store.write(f"{folder}/{layout.object_key(second.sha256)}", b"\xff\xd8\xff" + b"x" * (second.size - 3))  # same size
    store.write(f"{folder}/{layout.object_key(third.sha256)}", b"short")
    report = verify(store, manifest)
    assert report.checked == 1 + 1 + 1 + 6 and not report.ok  # the list, the entries and row index parts, objects
    assert len(report.problems) == 3
    joined = "\n".join(report.problems)
    assert f"missing: {first.path}" in joined
    assert f"wrong content: {second.path}" in joined
    assert f"wrong size: {third.path}" in joined


def test_verify_reports_a_file_whose_recorded_xxh3_is_not_its_content(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    """Reads check a file's xxh3-64, so a manifest whose xxh3 is wrong (its objects right) fails every read of that
    file: verify says so, rather than finding nothing wrong."""
    upload(make_image_list(3), "d", store=local_store)
    body = inline_body(local_store, "d")
    body["files"][1][3] = "0" * 16
    local_store.write("datasets/d/versions/1.json", json.dumps(body).encode())
    report = verify(local_store, catalog.resolve(local_store, "d"))
    assert [problem.split(":")[0] for problem in report.problems] == ["wrong checksum"]
    assert body["files"][1][0] in report.problems[0] and "0" * 16 in report.problems[0]


def test_uploaded_files_carry_their_xxh3_in_parts_of_format_7(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(4)
    manifest = upload(list_file, "d", store=local_store).manifest
    body = json.loads(local_store.read("datasets/d/versions/1.json"))
    assert body["format_version"] == manifest.format_version == ROW_INDEX_FORMAT_VERSION == 7
    # Empty files: an older datamount reads them before the format number, then refuses the number.
    assert body["files"] == [] and [part["rows"] for part in body["file_parts"]] == [4]
    for path, size, sha256, fast in catalog.resolve(local_store, "d").files:
        data = (list_file.parent / path).read_bytes()
        assert (size, sha256, fast) == (len(data), hashlib.sha256(data).hexdigest(), xxhash.xxh3_64_hexdigest(data))


def test_a_version_from_before_format_4_reads_and_is_not_uploaded_again(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    """File entries of three values (no xxh3-64) are read as they are, checked against their sha256, and an upload
    of the same list finds the version holds it already."""
    list_file = make_image_list(4)
    upload(list_file, "d", store=local_store)
    body = inline_body(local_store, "d")
    body["files"] = [entry[:3] for entry in body["files"]]
    body["format_version"] = 2
    local_store.write("datasets/d/versions/1.json", json.dumps(body).encode())
    manifest = catalog.resolve(local_store, "d")
    assert manifest.format_version == 2 and all(entry.xxh3 == "" for entry in manifest.files)
    assert json.loads(manifest.to_json())["files"] == body["files"]
    assert len(list(reader("d", local_store)())) == 4
    again = upload(list_file, "d", store=local_store)
    assert not again.created and catalog.versions(local_store, "d") == [1]


def test_resolve_versions_and_unknown_ones(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(3)
    upload(list_file, "d", store=local_store)
    (list_file.parent / "data" / "img0000.jpg").write_bytes(b"changed")
    upload(list_file, "d", store=local_store)
    assert catalog.resolve(local_store, "d").version == 2
    assert catalog.resolve(local_store, "d@1").version == 1
    with pytest.raises(DatasetNotFoundError, match=r"no version 7.*versions: 1, 2"):
        catalog.resolve(local_store, "d@7")
    with pytest.raises(DatasetNotFoundError, match="no dataset named 'nope'"):
        catalog.resolve(local_store, "nope")


def test_a_misspelt_name_is_answered_with_the_names_close_to_it(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(2)
    for name in ("shapes", "shaped", "team/shapes", "public/digits", "zebra-stripes"):
        upload(list_file, name, store=local_store)
    catalog.remove(local_store, "shaped")  # its folder stays, with its numbers taken: not a name to offer
    where = local_store.url
    misspelt = {
        "shapez": f"no dataset named 'shapez' in {where} (nor in the public area); did you mean 'shapes'?",
        "team/shapez": f"no dataset named 'team/shapez' in {where}; did you mean 'team/shapes'?",
        "digts": f"no dataset named 'digts' in {where} (nor in the public area); did you mean 'digits'?",
        "public/digts": f"no dataset named 'public/digts' in {where}; did you mean 'public/digits'?",
        "giraffe": f"no dataset named 'giraffe' in {where} (nor in the public area); see 'datamount ls'",
    }
    for name, message in misspelt.items():
        with pytest.raises(DatasetNotFoundError) as raised:
            catalog.resolve(local_store, name)
        assert str(raised.value) == message
    with pytest.raises(FileNotFoundError, match=r"did you mean 'shapes'\?$"):
        reader("shapez", local_store)
    with pytest.raises(DatasetNotFoundError, match=rf"^no dataset named 'team/shapez' in {where}; did you mean"):
        catalog.remove(local_store, "team/shapez")
    assert catalog.close_names(local_store, "digts", public_fallback=False) == []


@pytest.mark.s3
def test_a_misspelt_name_costs_the_same_requests_whatever_the_store_holds(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, make_image_list: MakeImageList
) -> None:
    """One listing of the area the name would be in (and of the public area), then one of the versions of each
    close name: never a listing of every dataset."""
    proxy = fault_proxy(s3_server.endpoint_url)
    store = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=proxy.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    upload(make_image_list(2), "shapes", store=store)
    requests = []
    for others in (1, 40):
        for number in range(others):  # a name far from 'shapez', with a version
            store.write(f"{layout.dataset_folder(f'other-{number:02}')}/versions/1.json", b"{}")
        before = len(proxy.requests)
        with pytest.raises(DatasetNotFoundError, match=r"did you mean 'shapes'\?$"):
            catalog.resolve(store, "shapez")
        asked = [unquote(request.target) for request in proxy.requests[before:]]
        assert not [target for target in asked if "other-" in target]
        requests.append(len(asked))
    assert requests[0] == requests[1], requests


def test_removing_one_version_keeps_the_objects_others_use(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(4)
    v1 = upload(list_file, "d", store=local_store).manifest
    (list_file.parent / "data" / "img0000.jpg").write_bytes(b"changed")
    v2 = upload(list_file, "d", store=local_store).manifest
    gone = {layout.object_key(e.sha256) for e in v1.files} - {layout.object_key(e.sha256) for e in v2.files}
    assert catalog.remove(local_store, "d@1") == [1]  # its file entries' part too: read them before
    assert catalog.versions(local_store, "d") == [2]
    assert verify(local_store, v2).ok
    assert len(gone) == 1
    assert not local_store.exists(f"datasets/d/{gone.pop()}")
    assert catalog.remove(local_store, "d") == [2]
    assert sorted(local_store.list()) == ["datasets/d/versions/1.removed", "datasets/d/versions/2.removed"]


def test_a_damaged_manifest_is_named(local_store: Store, text_list: Path) -> None:
    upload(text_list, "d", store=local_store)
    local_store.write("datasets/d/versions/1.json", b"{not json")
    with pytest.raises(ManifestError, match=r"versions/1\.json is damaged"):
        catalog.resolve(local_store, "d")


@pytest.mark.parametrize(
    ("entry", "cause"),
    [
        (["data/a.jpg", 12], r"Expected `array` of length 3 to 4 - at `\$\[0\]`"),
        (["data/a.jpg", "12", "ab" * 32], r"Expected `int`, got `str` - at `\$\[0\]\[1\]`"),
        (["data/a.jpg", True, "ab" * 32], r"Expected `int`, got `bool` - at `\$\[0\]\[1\]`"),
    ],
)
def test_a_damaged_file_entry_is_named_when_the_files_are_used(
    local_store: Store, make_image_list: MakeImageList, entry: list[object], cause: str
) -> None:
    upload(make_image_list(2), "d", store=local_store)
    body = inline_body(local_store, "d")
    body["files"][0] = entry
    local_store.write("datasets/d/versions/1.json", json.dumps(body).encode())
    manifest = catalog.resolve(local_store, "d")
    with pytest.raises(ManifestError, match=rf"versions/1\.json is damaged: its files: {cause}"):
        list(manifest.files)
    with pytest.raises(ManifestError, match=rf"versions/1\.json is damaged: its files: {cause}"):
        list(reader("d", local_store)())


def test_a_packed_read_does_not_decode_the_files(local_store: Store, make_image_list: MakeImageList) -> None:
    """Opening a version leaves its file list as the manifest's bytes until something uses it: a packed read never
    does, and a worker process is sent those bytes."""
    upload(make_image_list(3), "d", store=local_store, packed=True)
    body = inline_body(local_store, "d")
    body["files"][0][1] = "not a size"
    local_store.write("datasets/d/versions/1.json", json.dumps(body).encode())
    manifest = catalog.resolve(local_store, "d")
    assert [sample[1] for sample in reader("d", local_store)()] == ["0", "1", "2"]
    sent = pickle.loads(pickle.dumps(manifest))
    with pytest.raises(ManifestError, match="its files: Expected `int`, got `str`"):
        len(sent.files)


def test_a_manifest_that_is_not_a_json_object_is_named(local_store: Store, text_list: Path) -> None:
    upload(text_list, "d", store=local_store)
    local_store.write("datasets/d/versions/1.json", b'["name", "d"]')
    with pytest.raises(ManifestError, match=r"versions/1\.json is damaged: Expected `object`, got `array`"):
        catalog.resolve(local_store, "d")


@pytest.mark.parametrize("collecting", [True, False])
def test_reading_a_manifest_leaves_garbage_collection_as_it_was(
    local_store: Store, make_image_list: MakeImageList, collecting: bool
) -> None:
    manifest = upload(make_image_list(3), "d", store=local_store).manifest
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        assert Manifest.from_json(manifest.to_json(), "d@1") == manifest
        with pytest.raises(ManifestError):
            Manifest.from_json(b"{not json", "d@1")
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_a_manifest_from_a_newer_datamount_asks_for_an_upgrade(local_store: Store, text_list: Path) -> None:
    manifest = upload(text_list, "d", store=local_store).manifest
    newer = manifest.to_json().replace(b'"format_version":%d' % manifest.format_version, b'"format_version":99')
    assert newer != manifest.to_json() and FORMAT_VERSION < 99
    local_store.write("datasets/d/versions/1.json", newer)
    with pytest.raises(ManifestError, match="newer datamount"):
        catalog.resolve(local_store, "d")


def test_manifest_json_round_trip(local_store: Store, make_image_list: MakeImageList) -> None:
    manifest = upload(make_image_list(3), "d", store=local_store).manifest
    assert Manifest.from_json(manifest.to_json(), "x") == manifest
    assert manifest.total_bytes == sum(f.size for f in manifest.files) + manifest.list_size
    assert manifest.shards == []


@pytest.mark.parametrize("text", ["mnist", "team/mnist", "public/mnist", "a.b-c_d", "x" * 128])
def test_valid_names(text: str) -> None:
    assert validate_name(text) == text


@pytest.mark.parametrize("text", ["..", "a..b", "x" * 129, "a/b/c", "/abs", "a/", "datasets", "team/latest", ""])
def test_invalid_names(text: str) -> None:
    with pytest.raises(InvalidDatasetNameError):
        validate_name(text)


def test_references() -> None:
    assert parse_ref("mnist") == DatasetRef("mnist")
    assert parse_ref("mnist@12") == DatasetRef("mnist", 12)
    for bad in ("mnist@", "mnist@0", "mnist@x", "mnist@1@2"):
        with pytest.raises(InvalidDatasetNameError):
            parse_ref(bad)


@given(st.text(max_size=40))
def test_a_valid_name_never_leaves_its_area(text: str) -> None:
    try:
        folder = layout.dataset_folder(text)
    except InvalidDatasetNameError:
        return
    assert folder.startswith(("datasets/", "public/"))
    assert ".." not in folder.split("/") and not folder.startswith("/")
