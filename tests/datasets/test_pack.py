"""Packed shards: the same tuples as before packing, random access by row, integrity, the local shard cache."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, layout, locks, verify
from datamount.datasets.pack import cut_shards, pack, plan_pack, write_unit
from datamount.datasets.progress import Silent
from datamount.datasets.rows import ShardRows, parse_lines
from datamount.datasets.shard_writer import FIRST_ROW_GROUP_BYTES
from datamount.datasets.upload import upload
from datamount.datasets.verify import repair
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from datamount.storage.cache import ContentCache
from tests.generated import (
    MakeImageList,
    PackedDataset,
    PackedImages,
    SharedDatasets,
    image_rows,
    upload_and_pack,
    write_image_list,
)
from tests.manifests import write_format_6

SMALL = {"shard_bytes": 40_000, "row_group_bytes": 6_000}
#: The dataset of these tests: 60 images of about 1.5 kB in a few shards.
IMAGES = PackedImages("d", count=60, size=1500, **SMALL)


def packed(store: Store, folder: Path) -> tuple[list[tuple[bytes, str]], int]:
    """:data:`IMAGES` on a store of the test's own, for a test that changes it: its samples and shard count."""
    dataset = upload_and_pack(store, IMAGES, folder)
    return dataset.rows, dataset.shards


@pytest.fixture
def packed_images(shared_store: Store, shared_datasets: SharedDatasets) -> PackedDataset:
    """:data:`IMAGES` on the session's shared store of each backend, for tests that only read it."""
    return shared_datasets.packed(shared_store, IMAGES)


@pytest.fixture
def s3_packed_images(s3_shared_store: Store, shared_datasets: SharedDatasets) -> PackedDataset:
    """:data:`IMAGES` on the session's shared store on moto, for tests that only read it."""
    return shared_datasets.packed(s3_shared_store, IMAGES)


def test_packed_reads_yield_the_same_tuples_in_the_same_order(packed_images: PackedDataset) -> None:
    store, expected, shards = packed_images.store, packed_images.rows, packed_images.shards
    assert shards > 1
    samples = reader("d", store)
    assert isinstance(samples.source, ShardRows)
    assert list(samples()) == expected
    assert list(reader("d", store, use_shards=False)()) == expected


def test_text_datasets_pack_too(store: Store, text_list: Path) -> None:
    upload(text_list, "pairs", store=store)
    expected = list(reader("pairs", store)())
    pack("pairs", store=store)
    assert list(reader("pairs", store)()) == expected


def test_shards_keep_text_in_zstd_and_image_bytes_as_they_are(
    local_store: Store, tmp_path: Path, text_list: Path
) -> None:
    upload(text_list, "pairs", store=local_store)
    list_file = write_image_list(tmp_path / "src", 12, size=5_000)
    upload(list_file, "images", store=local_store)
    for name in ("pairs", "images"):
        manifest = pack(name, store=local_store)
        assert layout.pack_folder_of(manifest.shards[0]).endswith("-zstd")
        with local_store.open(layout.shard_path(name, manifest.shards[0])) as shard:
            parquet = pq.ParquetFile(shard)
            group = parquet.metadata.row_group(0)
            codecs = {group.column(i).path_in_schema: group.column(i).compression for i in range(group.num_columns)}
            binary = {field.name for field in parquet.schema_arrow if pa.types.is_binary(field.type)}
        assert binary == ({manifest.columns[0]} if name == "images" else set())
        assert codecs == {column: "UNCOMPRESSED" if column in binary else "ZSTD" for column in codecs}


def test_random_access_by_row(packed_images: PackedDataset) -> None:
    store, expected = packed_images.store, packed_images.rows
    samples = reader("d", store)
    for index in (0, 1, 17, 33, 59, -1):
        assert samples[index] == expected[index]
    with pytest.raises(IndexError, match="60 rows"):
        samples[60]
    assert samples[np.int64(17)] == expected[17]  # a sampler's numpy index
    for wrong in ("3", 2.0, None):
        with pytest.raises(TypeError, match=rf"^a row index must be a whole number, got {re.escape(repr(wrong))}$"):
            samples[wrong]


@pytest.mark.parametrize("packed_form", [True, False], ids=["packed", "unpacked"])
def test_spans_cover_the_version_once_and_read_as_a_pass_does(packed_images: PackedDataset, packed_form: bool) -> None:
    store, expected = packed_images.store, packed_images.rows
    samples = reader("d", store, use_shards=packed_form, rows_per_span=7)
    spans = samples.spans()
    assert [row for span in spans for row in range(span.start, span.stop)] == list(range(60))
    if packed_form:
        manifest = catalog.resolve(store, "d")
        assert [len(span) for span in spans] == [rows for shard in manifest.shards for rows in shard.row_groups]
    else:
        assert {len(span) for span in spans[:-1]} == {7}
    assert [row for span in spans for row in samples.rows(span.start, span.stop)] == expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.integers(-5, 70), length=st.integers(0, 70))
@example(start=-1, length=0)
def test_any_row_range_reads_the_same_rows_as_a_slice_of_the_pass(
    local_store: Store, tmp_path: Path, start: int, length: int
) -> None:
    if not catalog.versions(local_store, "d"):
        packed(local_store, tmp_path)
    expected = list(reader("d", local_store, use_shards=False)())
    for form in (True, False):
        rows = list(reader("d", local_store, use_shards=form).rows(start, start + length))
        assert rows == expected[max(start, 0) : max(start + length, 0)]


@pytest.mark.s3
@pytest.mark.slow
def test_random_access_reads_only_the_row_group_that_holds_the_row(s3_store: Store, tmp_path: Path) -> None:
    expected, _ = packed(s3_store, tmp_path)
    manifest = catalog.resolve(s3_store, "d")
    shard = manifest.shards[0]
    path = f"datasets/d/{shard.path}"
    original = s3_store.read(path)
    footer = pq.ParquetFile(pa.BufferReader(original)).metadata
    target_row, target_group = 7, 1  # row groups hold 4 rows each: row 7 is in group 1
    assert shard.row_groups[0] <= target_row < shard.row_groups[0] + shard.row_groups[1]
    damaged = bytearray(original)
    for group in range(footer.num_row_groups):
        if group == target_group:
            continue
        meta = footer.row_group(group)
        for column in range(meta.num_columns):
            chunk = meta.column(column)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            damaged[start : start + chunk.total_compressed_size] = bytes(chunk.total_compressed_size)
    s3_store.write(path, bytes(damaged))
    assert reader("d", s3_store)[target_row] == expected[target_row]


def test_packing_twice_changes_nothing(local_store: Store, tmp_path: Path) -> None:
    packed(local_store, tmp_path)
    first = catalog.resolve(local_store, "d")
    assert pack("d", store=local_store, **SMALL) == first


def test_of_two_packs_cut_otherwise_the_one_recorded_second_leaves_nothing(store: Store, tmp_path: Path) -> None:
    """Two packs of one version with other sizes race: the first to record its shards wins, and the other's shards
    (a pack folder of their own, which nothing can ever read) are removed, not left in the store."""
    list_file = write_image_list(tmp_path / "src", 24, size=5_000)
    manifest = upload(list_file, "d", store=store).manifest
    first = plan_pack(store, manifest, 40_000, 10_000)
    second = plan_pack(store, manifest, 20_000, 10_000)
    assert first[0].folder != second[0].folder
    first_shards = [write_unit(store, manifest, unit) for unit in first]
    second_shards = [write_unit(store, manifest, unit) for unit in second]  # both written before either records
    with locks.writing(store, "d"):  # as the packs hold it
        winner = catalog.add_shards(store, manifest, first_shards)
        assert catalog.add_shards(store, manifest, second_shards) == winner
    packs = {folder.rsplit("/", 1)[-1] for folder in store.list_folders("datasets/d/packs")}
    assert packs == {first[0].folder.rsplit("/", 1)[-1]}
    assert verify(store, catalog.resolve(store, "d")).ok
    assert list(reader("d", store)()) == image_rows(list_file)


@pytest.mark.gluster
def test_a_pack_whose_written_shards_a_losing_pack_removed_in_part_leaves_nothing(
    gluster_store: Store, tmp_path: Path
) -> None:
    """A pack has written all its shards when a losing pack of the same sizes removes some of them (it was removing
    their folder): making them durable finds one missing (a shared mount fsyncs each file), and the pack returns
    the recorded shards and removes the rest of its folder."""
    store = gluster_store
    list_file = write_image_list(tmp_path / "src", 24, size=5_000)
    manifest = upload(list_file, "d", store=store).manifest
    winning = plan_pack(store, manifest, 40_000, 10_000)
    losing = plan_pack(store, manifest, 20_000, 10_000)
    with locks.writing(store, "d"):  # as the packs hold it
        recorded = catalog.add_shards(store, manifest, [write_unit(store, manifest, unit) for unit in winning])
        written = [write_unit(store, manifest, unit) for unit in losing]
        store.remove(f"datasets/d/{written[0].path}")
        assert catalog.add_shards(store, manifest, written) == recorded
    packs = {folder.rsplit("/", 1)[-1] for folder in store.list_folders("datasets/d/packs")}
    assert packs == {winning[0].folder.rsplit("/", 1)[-1]}


def test_a_pack_whose_folder_a_losing_pack_removed_returns_the_winner(store: Store, tmp_path: Path) -> None:
    """Three packs of one version: while the third writes its shards, a pack cut otherwise records its own, and the
    second (the third's sizes) loses and removes the folder the third is writing. The third loses too, returns the
    recorded shards and leaves no folder of its own."""
    list_file = write_image_list(tmp_path / "src", 24, size=5_000)
    manifest = upload(list_file, "d", store=store).manifest
    winning = plan_pack(store, manifest, 40_000, 10_000)
    losing = plan_pack(store, manifest, 20_000, 10_000)
    assert len(losing) > 1 and winning[0].folder != losing[0].folder
    recorded: list[object] = []

    class Meanwhile(Silent):
        def advance(self, *, items: int = 1, size: int = 0) -> None:
            if not recorded:  # the third pack's first shard is written: the other two packs record theirs
                shards = [write_unit(store, manifest, u) for u in winning]
                with locks.writing(store, "d"):
                    recorded.append(catalog.add_shards(store, manifest, shards))
                    second = [write_unit(store, manifest, unit) for unit in losing]
                    assert catalog.add_shards(store, manifest, second) == recorded[0]

    assert pack("d", store=store, shard_bytes=20_000, row_group_bytes=10_000, progress=Meanwhile()) == recorded[0]
    packs = {folder.rsplit("/", 1)[-1] for folder in store.list_folders("datasets/d/packs")}
    assert packs == {winning[0].folder.rsplit("/", 1)[-1]}
    assert list(reader("d", store)()) == image_rows(list_file)


@pytest.mark.parametrize("writer", ["pack", "upload --pack"])
def test_shards_smaller_than_a_row_group_are_refused_naming_both_sizes(
    local_store: Store, tmp_path: Path, writer: str
) -> None:
    """A shard holds whole row groups: asked for less than one, it would be a row group's size (or more), so the
    sizes are refused before anything is read or written."""
    list_file = write_image_list(tmp_path / "src", 10, size=1000)
    named = r"^a shard size of 1,000 bytes is less than one row group of 4,000 bytes: .* at least 4,000 bytes$"
    if writer == "pack":
        upload(list_file, "d", store=local_store)
        with pytest.raises(ValueError, match=named):
            pack("d", store=local_store, shard_bytes=1_000, row_group_bytes=4_000)
        assert catalog.resolve(local_store, "d").shards == []
    else:
        with pytest.raises(ValueError, match=named):
            upload(list_file, "d", store=local_store, packed=True, shard_bytes=1_000, row_group_bytes=4_000)
        assert local_store.list() == {}
    # Shards of a row group's size are what shards of one row group each are asked for with.
    manifest = upload(list_file, "e", store=local_store, packed=True, shard_bytes=4_000, row_group_bytes=4_000).manifest
    assert len(manifest.shards) > 1 and all(len(shard.row_groups) == 1 for shard in manifest.shards)


def test_shards_are_plain_parquet(local_store: Store, tmp_path: Path) -> None:
    expected, _ = packed(local_store, tmp_path)
    manifest = catalog.resolve(local_store, "d")
    files = [str(Path(local_store.root) / "datasets" / "d" / s.path) for s in manifest.shards]
    table = pa.concat_tables(pq.read_table(f) for f in files)
    assert table.column_names == ["file", "label", "index", "path"]
    assert table.column("index").to_pylist() == list(range(60))
    assert list(zip(table.column("file").to_pylist(), table.column("label").to_pylist(), strict=True)) == expected
    duckdb = pytest.importorskip("duckdb")
    counts = duckdb.sql(f"SELECT label, count(*) FROM read_parquet({files!r}) GROUP BY label ORDER BY label").fetchall()
    assert counts == [("0", 20), ("1", 20), ("2", 20)]


@pytest.mark.s3
@pytest.mark.slow
def test_a_damaged_remote_shard_is_named(s3_store: Store, tmp_path: Path) -> None:
    packed(s3_store, tmp_path)
    shard = catalog.resolve(s3_store, "d").shards[1]
    path = f"datasets/d/{shard.path}"
    data = bytearray(s3_store.read(path))
    data[100] ^= 0xFF
    s3_store.write(path, bytes(data))
    with pytest.raises(IntegrityError, match=shard.path.replace(".", r"\.")):
        list(reader("d", s3_store)())
    report = verify(s3_store, catalog.resolve(s3_store, "d"))
    assert [p for p in report.problems if "wrong content" in p] == [
        f"wrong content: shard {shard.path} ({s3_store.url_for(path)}) does not match its sha256"
    ]


@pytest.mark.s3
def test_the_cache_serves_the_second_epoch_and_refetches_a_damaged_copy(
    s3_packed_images: PackedDataset, tmp_path: Path
) -> None:
    s3_store, expected, shards = s3_packed_images.store, s3_packed_images.rows, s3_packed_images.shards
    cache = ContentCache(tmp_path / "cache")
    samples = reader("d", s3_store, cache=cache)
    assert list(samples()) == expected
    assert (cache.misses, cache.hits) == (shards, 0)
    assert list(samples()) == expected
    assert (cache.misses, cache.hits) == (shards, shards)
    victim = cache.path_for(catalog.resolve(s3_store, "d").shards[0].sha256)
    victim.write_bytes(b"X" * victim.stat().st_size)
    fresh = ContentCache(tmp_path / "cache")  # a new process verifies what it finds
    assert list(reader("d", s3_store, cache=fresh)()) == expected
    assert fresh.misses == 1


@pytest.mark.slow
def test_shuffled_and_sharded_passes_fill_and_use_the_cache(s3_store: Store, tmp_path: Path) -> None:
    expected, shards = packed(s3_store, tmp_path)
    cache = ContentCache(tmp_path / "cache")
    ranks = [reader("d", s3_store, cache=cache, shuffle=True, seed=3, rank=r, world_size=2) for r in (0, 1)]
    first = [sample for rank in ranks for sample in rank()]
    assert sorted(first) == sorted(expected) and first != expected
    assert cache.misses == shards  # each shard fetched whole once, however many row groups were read from it
    s3_store.remove(layout.dataset_folder("d") + "/packs", recursive=True)
    assert sorted(sample for rank in ranks for sample in rank()) == sorted(expected)  # from the cache alone
    assert cache.misses == shards


def test_the_cache_evicts_the_least_recently_used(tmp_path: Path) -> None:
    import hashlib

    cache = ContentCache(tmp_path / "cache", max_bytes=2500)
    blobs = [bytes([i]) * 1000 for i in range(3)]
    keys = [hashlib.sha256(b).hexdigest() for b in blobs]
    for key, blob in zip(keys[:2], blobs[:2], strict=True):
        cache.get(key, 1000, lambda out, blob=blob: out.write(blob))
    cache.get(keys[0], 1000, lambda out: pytest.fail("a hit must not fetch"))  # keys[0] is now the most recent
    cache.get(keys[2], 1000, lambda out: out.write(blobs[2]))
    assert cache.path_for(keys[0]).exists() and cache.path_for(keys[2]).exists()
    assert not cache.path_for(keys[1]).exists()
    assert cache.usage() <= 2500


def test_a_fill_that_does_not_match_is_refused(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path / "cache")
    with pytest.raises(IntegrityError, match="do not match"):
        cache.get("0" * 64, 3, lambda out: out.write(b"abc"), name="shard-x")
    assert cache.usage() == 0


@pytest.mark.s3
@pytest.mark.slow
def test_processes_sharing_a_cache_fetch_each_shard_once(s3_packed_images: PackedDataset, tmp_path: Path) -> None:
    s3_store, shards = s3_packed_images.store, s3_packed_images.shards
    script = textwrap.dedent(
        f"""
        import sys
        from datamount.readers import reader
        from datamount.storage import open_store
        from datamount.storage.cache import ContentCache
        cache = ContentCache({str(tmp_path / "cache")!r})
        store = open_store({s3_store.url!r}, endpoint_url={s3_store.endpoint!r}, key="k", secret="s")
        rows = sum(1 for _ in reader("d", store, cache=cache)())
        print(rows, cache.misses)
        """
    )
    children = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [child.communicate(timeout=120)[0].split() for child in children]
    assert all(child.returncode == 0 for child in children)
    assert [int(rows) for rows, _ in outputs] == [60, 60, 60]
    assert sum(int(misses) for _, misses in outputs) == shards


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3_000), max_size=80),
    shard_bytes=st.integers(1, 20_000),
    group_bytes=st.integers(1, 5_000),
    first_bytes=st.integers(1, 6_000),
)
def test_each_shards_first_row_group_is_cut_at_the_first_group_size(
    sizes: list[int], shard_bytes: int, group_bytes: int, first_bytes: int
) -> None:
    """Every row once, in order; each row group closes at the first row that brings it to its size (a shard's first
    at ``min(first, group)``), the version's last may hold less; each shard but the last at least ``shard_bytes``."""
    plans = cut_shards(sizes, shard_bytes, group_bytes, first_bytes)
    groups = [group for plan in plans for group in plan]
    assert [row for start, stop in groups for row in range(start, stop)] == list(range(len(sizes)))

    def size(group: tuple[int, int]) -> int:
        return sum(sizes[group[0] : group[1]])

    for plan in plans:
        for position, group in enumerate(plan):
            wanted = min(first_bytes, group_bytes) if position == 0 else group_bytes
            assert size(group) - sizes[group[1] - 1] < wanted
            assert size(group) >= wanted or group == groups[-1]
        assert sum(size(group) for group in plan[:-1]) < shard_bytes
    assert all(sum(size(group) for group in plan) >= shard_bytes for plan in plans[:-1])


def test_a_packs_shards_start_with_a_small_row_group_and_are_made_again_byte_for_byte(
    local_store: Store, tmp_path: Path
) -> None:
    list_file = write_image_list(tmp_path / "src", 60, size=100_000)
    upload(list_file, "d", store=local_store)
    manifest = pack("d", store=local_store, shard_bytes=3_000_000, row_group_bytes=2_000_000)
    sizes = [e.size + 1 for e in manifest.files]  # the file and its one-character label
    assert [shard.row_groups for shard in manifest.shards] == [
        [stop - start for start, stop in plan] for plan in cut_shards(sizes, 3_000_000, 2_000_000)
    ]
    assert len(manifest.shards) >= 2
    assert all(shard.row_groups[0] == 11 for shard in manifest.shards[:-1])  # 11 x ~100 KB reach 1 MiB
    assert layout.pack_folder_of(manifest.shards[0]).endswith(f"-{FIRST_ROW_GROUP_BYTES}-zstd")
    damaged = layout.shard_path("d", manifest.shards[1])
    local_store.write(damaged, local_store.read(damaged)[:-9])
    assert [d.path for d in repair(local_store, manifest).repaired] == [damaged]
    assert verify(local_store, manifest).ok
    assert list(reader("d", local_store)()) == image_rows(list_file)


@pytest.mark.parametrize(
    ("first_group_bytes", "folder"),
    [(400_000, "packs/1-1000000-400000"), (200_000, "packs/1-1000000-400000-200000")],
    ids=["row-groups-cut-alike", "smaller-first-row-group"],
)
def test_a_shard_of_a_pack_made_before_zstd_is_made_again_byte_for_byte(
    local_store: Store, tmp_path: Path, first_group_bytes: int, folder: str
) -> None:
    """Packs made before zstd name no codec in their folder (their shards are Snappy), and those made before shards
    began with a smaller row group name three numbers: a lost shard of either is made again as it was written."""
    list_file = write_image_list(tmp_path / "src", 30, size=100_000)
    manifest = upload(list_file, "d", store=local_store).manifest
    units = plan_pack(local_store, manifest, 1_000_000, 400_000, first_group_bytes, compression="snappy")
    with locks.writing(local_store, "d"):
        manifest = catalog.add_shards(local_store, manifest, [write_unit(local_store, manifest, u) for u in units])
    assert layout.pack_folder_of(manifest.shards[0]) == folder
    damaged = layout.shard_path("d", manifest.shards[1])
    with local_store.open(damaged) as shard:
        assert pq.ParquetFile(shard).metadata.row_group(0).column(1).compression == "SNAPPY"
    local_store.remove(damaged)
    assert [d.path for d in repair(local_store, manifest).repaired] == [damaged]
    assert verify(local_store, manifest).ok


_TEXT_CELL = st.text(alphabet=st.characters(exclude_characters="\t\n\r", exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.tuples(_TEXT_CELL, _TEXT_CELL).filter(lambda r: "\t".join(r).strip(" ")), min_size=1, max_size=60),
    block=st.integers(min_value=1, max_value=64),
)
def test_a_text_version_is_planned_from_its_list_read_as_a_stream_as_it_was_read_whole(
    local_store: Store, tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str]], block: int
) -> None:
    """The plan (row groups, and the bytes of the list each shard reads) of the list read a few bytes at a time is
    the one made from the whole list: the rows' characters, the lines' starts."""
    folder = tmp_path_factory.mktemp("plan")
    (folder / "x.list").write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    name = f"t{len(list(folder.parent.iterdir()))}"
    manifest = upload(folder / "x.list", name, store=local_store, kind="text").manifest
    raw = local_store.read(layout.list_path(manifest))
    lines, starts = parse_lines(raw)
    starts.append(len(raw))
    whole = cut_shards([sum(len(value) for value in row) for row in lines], 40, 16, 8)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(importlib.import_module("datamount.datasets.pack"), "LIST_BLOCK_BYTES", block)
        units = plan_pack(local_store, manifest, 40, 16, 8)
        assert [list(unit.row_groups) for unit in units] == whole
        assert [unit.list_range for unit in units] == [(starts[g[0][0]], starts[g[-1][1]]) for g in whole]
        for unit in units:  # and each shard is written from its stretch of the list, a block at a time
            write_unit(local_store, manifest, unit)


def test_an_indexed_image_version_is_planned_from_its_list_and_row_index_alone(
    store: Store, make_image_list: MakeImageList
) -> None:
    """The plan of a format-7 version is the plan of the same version from before format 7 (which reads every
    file's entry), unit for unit; with its entries by path removed, the version still packs and reads the same."""
    list_file = make_image_list(40, size=900)
    upload(list_file, "d", store=store)
    old = write_format_6(store, "d")
    new = catalog.resolve(store, "d@1")
    planned = plan_pack(store, new, 12_000, 3_000)
    before = plan_pack(store, old, 12_000, 3_000)
    assert len(planned) > 2 and all(unit.indexed and not unit.objects for unit in planned)
    assert [(u.row_groups, u.list_range, u.files_size) for u in planned] == [
        (u.row_groups, u.list_range, sum(o.size for o in u.objects)) for u in before
    ]
    for part in new.files.parts:  # type: ignore[attr-defined]
        store.remove(f"{layout.dataset_folder('d')}/{part.path}")
    pack("d@1", store=store, shard_bytes=12_000, row_group_bytes=3_000)
    assert list(reader("d@1", store, use_shards=True)()) == image_rows(list_file)
