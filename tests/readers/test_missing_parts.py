"""A part of a version the store lost (an object, a shard, the list) is named as a damaged one is: the version, the
row, the part's URL and the command that puts it back; on every reading path and in worker processes. A version
removed while it is read is still named as removed."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from datamount.datasets import MissingPartError, catalog, layout, pack, repair, upload
from datamount.datasets.errors import DatasetNotFoundError
from datamount.readers import DataLoader, DatasetReader, multiprocess_reader, reader
from datamount.storage import ObjectNotFoundError, Store
from datamount.storage.cache import ContentCache
from tests.generated import MakeImageList, image_rows

ROWS = 40

#: Every way a reader reads rows: a pass, a shuffled pass, one rank's share, random access, a range of rows.
READ_MODES: dict[str, Callable[..., Any]] = {
    "pass": lambda name, store, **options: list(reader(name, store, **options)()),
    "shuffled": lambda name, store, **options: list(reader(name, store, shuffle=True, seed=3, **options)()),
    "sharded": lambda name, store, **options: list(reader(name, store, rank=0, world_size=2, **options)()),
    "random-access": lambda name, store, **options: [reader(name, store, **options)[i] for i in range(ROWS)],
    "rows": lambda name, store, **options: list(reader(name, store, **options).rows(0, ROWS)),
}


def object_missing(ref: str, row: int, url: str) -> str:
    return (
        rf"^{ref}, row {row}: the object {re.escape(url)} is missing from the store "
        rf"\(datamount verify {ref} --repair --from LIST puts it back\)$"
    )


@pytest.mark.parametrize("mode", READ_MODES)
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_missing_object_is_named_with_its_row_and_repair(
    request: pytest.FixtureRequest, backend: str, mode: str, make_image_list: MakeImageList
) -> None:
    store: Store = request.getfixturevalue(f"{backend}_store")
    list_file = make_image_list(ROWS, size=2000)
    manifest = upload(list_file, "d", store=store).manifest
    lost = layout.object_path("d", manifest.files[7].sha256)
    store.remove(lost)
    with pytest.raises(MissingPartError, match=object_missing("d@1", 7, store.url_for(lost))) as caught:
        READ_MODES[mode]("d", store)
    assert isinstance(caught.value, ObjectNotFoundError) and isinstance(caught.value, FileNotFoundError)
    # What the message says puts it back does.
    assert repair(store, manifest, source=list_file).ok
    assert len(READ_MODES[mode]("d", store)) == (ROWS // 2 if mode == "sharded" else ROWS)
    assert list(reader("d", store)()) == image_rows(list_file)


def test_pack_names_a_missing_object_as_a_reader_does(local_store: Store, make_image_list: MakeImageList) -> None:
    manifest = upload(make_image_list(ROWS, size=2000), "d", store=local_store).manifest
    lost = layout.object_path("d", manifest.files[23].sha256)
    local_store.remove(lost)
    with pytest.raises(MissingPartError, match=object_missing("d@1", 23, local_store.url_for(lost))):
        pack("d", store=local_store, shard_bytes=30_000, row_group_bytes=10_000)
    assert catalog.resolve(local_store, "d").shards == []


@pytest.mark.parametrize("mode", READ_MODES)
@pytest.mark.parametrize(
    ("backend", "cached"), [("local", False), ("s3", False), ("s3", True)], ids=["local", "s3", "s3-cache"]
)
def test_a_missing_shard_is_named_with_its_rows_and_repair(
    request: pytest.FixtureRequest,
    backend: str,
    cached: bool,
    mode: str,
    make_image_list: MakeImageList,
    tmp_path: Path,
) -> None:
    """A shard ``pack`` made from the version's objects is made again by ``verify --repair``."""
    store: Store = request.getfixturevalue(f"{backend}_store")
    list_file = make_image_list(ROWS, size=2000)
    upload(list_file, "d", store=store)
    manifest = pack("d", store=store, shard_bytes=30_000, row_group_bytes=10_000)
    assert len(manifest.shards) > 1
    shard = manifest.shards[0]
    lost = layout.shard_path("d", shard)
    store.remove(lost)
    options: dict[str, Any] = {"cache": ContentCache(tmp_path / "cache")} if cached else {}
    named = (
        rf"^d@1, rows 0 to {shard.rows - 1}: the shard {re.escape(store.url_for(lost))} is missing from the store "
        r"\(datamount verify d@1 --repair makes it again from the version's objects\)$"
    )
    with pytest.raises(MissingPartError, match=named):
        READ_MODES[mode]("d", store, **options)
    assert repair(store, manifest).ok
    assert list(reader("d", store)()) == image_rows(list_file)


def test_a_missing_shard_of_a_version_stored_only_in_shards_says_so(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    manifest = upload(
        make_image_list(ROWS, size=2000),
        "d",
        store=local_store,
        packed=True,
        shard_bytes=30_000,
        row_group_bytes=10_000,
    ).manifest
    last = manifest.shards[-1]
    lost = layout.shard_path("d", last)
    local_store.remove(lost)
    named = (
        rf"^d@1, rows {ROWS - last.rows} to {ROWS - 1}: the shard {re.escape(local_store.url_for(lost))} is missing "
        r"from the store \(the store holds its rows nowhere else: datamount verify d@1 names every part lost; write "
        r"the data again as a new version\)$"
    )
    with pytest.raises(MissingPartError, match=named):
        reader("d", local_store)[ROWS - 1]


@pytest.mark.parametrize("kind", ["image", "text"])
def test_a_missing_list_is_named_with_its_repair(
    local_store: Store, make_image_list: MakeImageList, text_list: Path, kind: str
) -> None:
    list_file = make_image_list(ROWS) if kind == "image" else text_list
    manifest = upload(list_file, "d", store=local_store).manifest
    lost = layout.list_path(manifest)
    local_store.remove(lost)
    named = (
        rf"^d@1: its list {re.escape(local_store.url_for(lost))}, which every row needs, is missing from the store "
        r"\(datamount verify d@1 --repair --from LIST puts it back\)$"
    )
    with pytest.raises(MissingPartError, match=named):
        list(reader("d", local_store)())
    assert repair(local_store, manifest, source=list_file).ok
    assert len(list(reader("d", local_store)())) == manifest.rows


def through_process_loader(samples: DatasetReader) -> list[Any]:
    loader = DataLoader.from_generator(capacity=4, use_multiprocess=True, mp_context="spawn")
    loader.set_sample_generator(samples, batch_size=5, drop_last=False)
    return list(loader())


WORKER_MODES: dict[str, Callable[[DatasetReader], list[Any]]] = {
    "process-dataloader-spawn": through_process_loader,
    "multiprocess-reader-fork": lambda samples: list(multiprocess_reader([samples, samples], mp_context="fork")()),
}


@pytest.mark.parametrize("packed", [False, True], ids=["objects", "shards"])
@pytest.mark.parametrize("mode", WORKER_MODES)
def test_a_part_missing_in_a_worker_process_is_named_there(
    local_store: Store, make_image_list: MakeImageList, mode: str, packed: bool
) -> None:
    """The worker names the row and the repair (the reader's own rule ran there), and so does the parent."""
    manifest = upload(make_image_list(ROWS, size=2000), "d", store=local_store).manifest
    if packed:
        manifest = pack("d", store=local_store, shard_bytes=30_000, row_group_bytes=10_000)
        lost = layout.shard_path("d", manifest.shards[-1])
        named = rf"^d@1, rows \d+ to {ROWS - 1}: the shard {re.escape(local_store.url_for(lost))} is missing"
    else:
        lost = layout.object_path("d", manifest.files[31].sha256)
        named = object_missing("d@1", 31, local_store.url_for(lost))
    samples = reader("d", local_store)
    local_store.remove(lost)
    with pytest.raises(MissingPartError, match=named):
        WORKER_MODES[mode](samples)


def test_a_version_removed_while_a_worker_reads_it_is_named_as_removed(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(ROWS, size=2000), "d", store=local_store)
    samples = reader("d", local_store)
    catalog.remove(local_store, "d@1")
    with pytest.raises(DatasetNotFoundError, match=r"^d@1 was removed from .* while it was being read \(cannot read "):
        through_process_loader(samples)


@pytest.mark.parametrize("mode", ["pass", "random-access", "rows"])
def test_a_version_removed_is_named_as_removed_not_as_missing(
    local_store: Store, make_image_list: MakeImageList, mode: str
) -> None:
    """The removal is told from a lost part whatever the reading path: no repair is offered for a removed version."""
    upload(make_image_list(ROWS, size=2000), "d", store=local_store)
    opened = reader("d", local_store)
    catalog.remove(local_store, "d@1")
    reads = {
        "pass": lambda: list(opened()),
        "random-access": lambda: opened[5],
        "rows": lambda: list(opened.rows(0, 9)),
    }
    with pytest.raises(DatasetNotFoundError) as caught:
        reads[mode]()
    assert str(caught.value).startswith(f"d@1 was removed from {local_store.url} while it was being read (cannot read ")
    assert "--repair" not in str(caught.value)
