"""Every byte read is the byte uploaded: a damaged object or shard is an IntegrityError in every read mode, never a
sample."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from datamount.datasets import catalog, layout, pack, upload
from datamount.datasets.errors import DatasetNotFoundError
from datamount.datasets.shard_checks import group_range
from datamount.readers import reader
from datamount.storage import IntegrityError, ObjectNotFoundError, Store
from datamount.storage.cache import ContentCache
from tests.generated import MakeImageList, image_rows
from tests.manifests import inline_body

ROWS = 40

#: Every way a reader reads rows: a pass, a shuffled pass, one rank's share, random access.
READ_MODES: dict[str, Callable[..., Any]] = {
    "pass": lambda name, store, **options: list(reader(name, store, **options)()),
    "shuffled": lambda name, store, **options: list(reader(name, store, shuffle=True, seed=3, **options)()),
    "sharded": lambda name, store, **options: list(reader(name, store, rank=0, world_size=2, **options)()),
    "random-access": lambda name, store, **options: [reader(name, store, **options)[i] for i in range(ROWS)],
}


def damage(store: Store, path: str, how: str, position: int | None = None) -> None:
    data = bytearray(store.read(path))
    if how == "flip":
        at = len(data) // 2 if position is None else position
        data[at] ^= 0xFF
        store.write(path, bytes(data))
    else:
        store.write(path, bytes(data[:10]))


def as_before_format_4(store: Store, name: str) -> None:
    """Rewrite version 1 of ``name`` as a datamount before format 4 wrote it: file entries without their xxh3-64."""
    path = layout.manifest_path(name, 1)
    body = inline_body(store, name)
    body["files"] = [entry[:3] for entry in body["files"]]
    body["format_version"] = 2
    store.write(path, json.dumps(body).encode())


@pytest.mark.parametrize("mode", READ_MODES)
@pytest.mark.parametrize("how", ["flip", "truncate"])
@pytest.mark.parametrize("checksum", ["xxh3-64", "sha256"])
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_reads_of_a_damaged_object_are_checked(
    request: pytest.FixtureRequest, backend: str, checksum: str, how: str, mode: str, make_image_list: MakeImageList
) -> None:
    """A version's files are checked against their xxh3-64 (format 4), or their sha256 (a version written before)."""
    store: Store = request.getfixturevalue(f"{backend}_store")
    manifest = upload(make_image_list(ROWS, size=4096), "d", store=store).manifest
    if checksum == "sha256":
        as_before_format_4(store, "d")
    victim = manifest.files[7]
    damage(store, layout.object_path("d", victim.sha256), how)
    expected = f"does not match its {checksum}" if how == "flip" else "has 10 bytes"
    with pytest.raises(IntegrityError, match=rf"d@1, row \d+: the object .*{victim.sha256}.* {expected}"):
        READ_MODES[mode]("d", store)


def data_page_positions(local_shard: bytes, count: int, seed: int) -> list[int]:
    """Byte positions inside the pages of the sample columns (``file``, ``label``) of a Parquet shard, at random."""
    footer = pq.read_metadata(pa.BufferReader(local_shard))
    chunks = []
    for group in range(footer.num_row_groups):
        for column in range(footer.num_columns):
            chunk = footer.row_group(group).column(column)
            if chunk.path_in_schema not in ("file", "label"):
                continue  # the index and path columns are not part of a sample
            first = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            chunks.append((first, first + chunk.total_compressed_size))
    rng = random.Random(seed)
    return [rng.randrange(*rng.choice(chunks)) for _ in range(count)]


@pytest.mark.parametrize("mode", READ_MODES)
@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "cache"])
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_reads_of_a_damaged_shard_are_checked(
    request: pytest.FixtureRequest,
    backend: str,
    cached: bool,
    mode: str,
    make_image_list: MakeImageList,
    tmp_path: Path,
) -> None:
    if backend == "local" and cached:
        pytest.skip("a local store reads its shards in place, with no cache")
    store: Store = request.getfixturevalue(f"{backend}_store")
    upload(make_image_list(ROWS, size=4096), "d", store=store)
    manifest = pack("d", store=store, shard_bytes=60_000, row_group_bytes=20_000)
    expected = READ_MODES[mode]("d", store)
    shard = layout.shard_path("d", manifest.shards[0])
    original = store.read(shard)
    options: dict[str, Any] = {"cache": ContentCache(tmp_path / "cache")} if cached else {}
    # The image of row 3 is stored as it is (image bytes are not compressed): flip one of its bytes in the shard.
    image = reader("d", store)[3][0]
    store.write(shard, original.replace(image, image[:100] + bytes([image[100] ^ 0xFF]) + image[101:]))
    named = r"shard .*shard-00000\.parquet (of d@1 is damaged|does not match the sha256 in d@1's manifest)"
    with pytest.raises(IntegrityError, match=named):
        READ_MODES[mode]("d", store, **options)
    # Anywhere else in the pages of the sample columns: an IntegrityError, or (the byte was one no sample is made of,
    # e.g. a page's statistics) the same samples; never a wrong one.
    caught = 0
    for position in data_page_positions(original, 6, seed=list(READ_MODES).index(mode)):
        store.write(shard, original)
        damage(store, shard, "flip", position)
        if cached:
            options["cache"] = ContentCache(tmp_path / f"cache-{position}")
        try:
            assert READ_MODES[mode]("d", store, **options) == expected
        except IntegrityError:
            caught += 1
    assert caught >= 3


def test_a_cached_shard_damaged_after_it_was_cached_is_fetched_again(
    s3_store: Store, make_image_list: MakeImageList, tmp_path: Path
) -> None:
    """Damaged in the cache after this process hashed it: caught by its row groups' checksums when it is opened, and
    fetched again (the store's copy is intact: nothing is named as damaged)."""
    upload(make_image_list(ROWS, size=4096), "d", store=s3_store)
    manifest = pack("d", store=s3_store, shard_bytes=60_000, row_group_bytes=20_000)
    cache = ContentCache(tmp_path / "cache")
    expected = list(reader("d", s3_store, cache=cache)())
    cached = cache.path_for(manifest.shards[0].sha256)
    data = bytearray(cached.read_bytes())
    data[data_page_positions(bytes(data), 1, seed=7)[0]] ^= 0xFF
    cached.write_bytes(bytes(data))
    shuffled = list(reader("d", s3_store, cache=cache, shuffle=True)())
    assert sorted(shuffled) == sorted(expected)
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == manifest.shards[0].sha256
    assert list(reader("d", s3_store, cache=ContentCache(tmp_path / "cache"))()) == expected


def test_a_truncated_local_shard_is_caught_before_it_is_mapped(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(ROWS, size=4096), "d", store=local_store)
    manifest = pack("d", store=local_store, shard_bytes=60_000, row_group_bytes=20_000)
    shard = layout.shard_path("d", manifest.shards[0])
    local_store.write(shard, local_store.read(shard)[:-100])
    with pytest.raises(IntegrityError, match=r"has [\d,]+ bytes, not"):
        list(reader("d", local_store)())
    assert catalog.resolve(local_store, "d").shards == manifest.shards


@pytest.mark.parametrize("group", [0, 1], ids=["first-group", "later-group"])
@pytest.mark.parametrize("mode", ["pass", "sharded"])
def test_a_row_group_unlike_its_manifest_entry_is_caught(
    local_store: Store, make_image_list: MakeImageList, group: int, mode: str
) -> None:
    """A shard's row groups hold the rows its entry says: one more in a group (one fewer in the last) is an
    IntegrityError naming the group, whether the group is streamed batch by batch (the first) or decoded whole."""
    upload(make_image_list(ROWS, size=4096), "d", store=local_store)
    pack("d", store=local_store, shard_bytes=60_000, row_group_bytes=20_000)
    record = "datasets/d/versions/1.pack.json"
    body = json.loads(local_store.read(record))
    counts = body["shards"][0]["row_groups"]
    assert len(counts) > 2
    counts[group] += 1
    counts[-1] -= 1
    local_store.write(record, json.dumps(body).encode())
    with pytest.raises(IntegrityError, match=rf"row group {group} of shard .*shard-00000\.parquet of d@1 is damaged"):
        READ_MODES[mode]("d", local_store)


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_a_version_removed_while_it_is_read_is_named_as_removed(
    store: Store, make_image_list: MakeImageList, packed: bool
) -> None:
    """``datamount rm`` of the version a pass is reading: the pass ends with one DatasetNotFoundError saying the
    version was removed (not a bare "not found" of an object), or, where the reader holds what it reads (a local
    shard memory-mapped), yields every row as uploaded."""
    list_file = make_image_list(200, size=3000)
    upload(list_file, "d", store=store, packed=packed, row_group_bytes=20_000)
    expected = image_rows(list_file)
    samples = reader("d", store)()
    first = next(samples)
    catalog.remove(store, "d@1")
    try:
        rest = list(samples)
    except DatasetNotFoundError as removed:
        assert str(removed).startswith(f"d@1 was removed from {store.url} while it was being read (cannot read ")
        assert isinstance(removed.__cause__, ObjectNotFoundError)
    else:
        assert packed and store.local_path() is not None, "an unpacked or remote pass read objects already removed"
        assert [first, *rest] == expected


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_a_row_of_a_version_removed_since_its_reader_opened_is_named_as_removed(
    store: Store, make_image_list: MakeImageList, packed: bool
) -> None:
    upload(make_image_list(60, size=3000), "d", store=store, packed=packed, row_group_bytes=20_000)
    rows = reader("d", store)
    assert rows[0][1] == "0"
    catalog.remove(store, "d@1")
    with pytest.raises(DatasetNotFoundError, match=rf"^d@1 was removed from {re.escape(store.url)} while it was being"):
        rows[59]


def as_packed_before_format_5(store: Store, name: str) -> None:
    """Rewrite the pack record of version 1 of ``name`` as a datamount before format 5 wrote it: shard entries
    without the xxh3-64 of their row groups and footer."""
    record = layout.pack_record_path(name, 1)
    body = json.loads(store.read(record))
    for shard in body["shards"]:
        del shard["xxh3"]
    body["format"] = 1
    store.write(record, json.dumps(body).encode())


def test_a_shards_entry_records_the_xxh3_of_its_row_groups_and_footer(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(ROWS, size=4096), "d", store=local_store)
    manifest = pack("d", store=local_store, shard_bytes=60_000, row_group_bytes=20_000)
    for shard in manifest.shards:
        data = local_store.read(layout.shard_path("d", shard))
        footer = pq.read_metadata(pa.BufferReader(data))
        groups = [group_range(footer, group) for group in range(footer.num_row_groups)]
        footer_length = int.from_bytes(data[-8:-4], "little")
        expected = [xxhash.xxh3_64_hexdigest(data[start:end]) for start, end in groups]
        expected.append(xxhash.xxh3_64_hexdigest(data[len(data) - 8 - footer_length :]))
        assert shard.xxh3 == expected and len(expected) == len(shard.row_groups) + 1
    assert json.loads(local_store.read(layout.pack_record_path("d", 1)))["format"] == 2


@pytest.mark.parametrize("mode", READ_MODES)
@pytest.mark.parametrize("where", ["row-group", "footer"])
@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_damaged_row_group_or_footer_is_caught_by_its_xxh3(
    request: pytest.FixtureRequest, backend: str, where: str, mode: str, make_image_list: MakeImageList
) -> None:
    """A byte flipped in a row group (in an image, in the pages' headers, anywhere) or in the footer is caught by the
    xxh3-64 its shard's entry records, before the bytes are decoded: an IntegrityError naming the part and the
    shard, in every read mode."""
    store: Store = request.getfixturevalue(f"{backend}_store")
    upload(make_image_list(ROWS, size=4096), "d", store=store)
    manifest = pack("d", store=store, shard_bytes=60_000, row_group_bytes=20_000)
    shard = layout.shard_path("d", manifest.shards[0])
    original = store.read(shard)
    footer = pq.read_metadata(pa.BufferReader(original))
    if where == "footer":
        position, named = len(original) - 8 - footer.serialized_size // 2, "the footer of "
    else:
        # In the first page's header, which no page CRC covers.
        position, named = group_range(footer, 0)[0] + 3, "row group 0 of "
    damage(store, shard, "flip", position)
    message = rf"{named}shard .*shard-00000\.parquet of d@1 is damaged: its bytes do not match the xxh3-64"
    with pytest.raises(IntegrityError, match=message):
        READ_MODES[mode]("d", store)


@pytest.mark.parametrize("mode", READ_MODES)
def test_a_shard_packed_before_format_5_is_checked_by_its_pages_crcs(
    local_store: Store, mode: str, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(ROWS, size=4096), "d", store=local_store)
    manifest = pack("d", store=local_store, shard_bytes=60_000, row_group_bytes=20_000)
    expected = READ_MODES[mode]("d", local_store)
    as_packed_before_format_5(local_store, "d")
    assert not any(shard.xxh3 for shard in catalog.resolve(local_store, "d").shards)
    assert READ_MODES[mode]("d", local_store) == expected
    image = reader("d", local_store)[3][0]
    shard = layout.shard_path("d", manifest.shards[0])
    original = local_store.read(shard)
    local_store.write(shard, original.replace(image, image[:100] + bytes([image[100] ^ 0xFF]) + image[101:]))
    with pytest.raises(IntegrityError, match=r"shard .*shard-00000\.parquet of d@1 is damaged: (?!its bytes)"):
        READ_MODES[mode]("d", local_store)
