"""``upload --pack`` of an image list: the files go straight into shards, with no object per file, and every
promise of an upload holds (the bytes read are the bytes uploaded, checked; nothing half-made is committed; running
it again creates nothing)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import struct
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import catalog, layout, list_windows, listfile, spool, upload, upload_marker, verify
from datamount.datasets.manifest import FORMAT_VERSION, SHARD_BLOCK_BYTES
from datamount.readers import DataLoader, reader
from datamount.storage import IntegrityError, Store
from datamount.storage.checksums import xxh3
from tests.generated import MakeImageList, image_rows


class ChangeOnceWritingStarts:
    """Progress that rewrites a source file when the first row group has been written to a shard."""

    def __init__(self, victim: Path) -> None:
        self.victim = victim
        self.changed = False
        self.phase = ""

    def start(self, phase: str, *, items: int, size: int) -> None:
        self.phase = phase

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        if not self.changed and self.phase == "pack":
            self.victim.write_bytes(b"\xff\xd8\xff" + b"changed while it was uploaded" * 20)
            self.changed = True

    def finish(self) -> None:
        pass


def test_the_files_go_straight_into_shards_and_read_back_exactly(store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(40, size=3_000)
    result = upload(list_file, "d", store=store, packed=True, row_group_bytes=20_000, shard_bytes=60_000)
    manifest = result.manifest
    assert result.created and not manifest.objects and len(manifest.shards) >= 2
    assert store.list(f"{layout.dataset_folder('d')}/{layout.OBJECTS}") == {}
    # Format 3 (files only in shards), 5 (the shards carry their row groups', footer's and blocks' checksums), 6
    # (the files' entries in parts) and 8 (those entries record an xxh3-64 and no sha256).
    assert json.loads(store.read(layout.manifest_path("d", 1)))["format_version"] == FORMAT_VERSION == 8
    assert all(not entry.sha256 and len(entry.xxh3) == 16 for entry in manifest.files)
    assert all(len(shard.blocks) == -(-shard.size // SHARD_BLOCK_BYTES) for shard in manifest.shards)
    assert all(len(shard.xxh3) == len(shard.row_groups) + 1 for shard in manifest.shards)
    assert list(reader("d", store)()) == image_rows(list_file)
    samples = reader("d", store, shuffle=True, seed=3)
    assert sorted(samples()) == sorted(image_rows(list_file))
    assert reader("d", store)[17] == image_rows(list_file)[17]
    assert verify(store, manifest).ok


def test_running_it_again_creates_nothing_packed_or_not(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(12)
    first = upload(list_file, "d", store=local_store, packed=True)
    for packed in (True, False):  # the latest version already holds exactly this list
        again = upload(list_file, "d", store=local_store, packed=packed)
        assert not again.created and again.manifest.version == first.manifest.version and again.sent_files == 0
    assert catalog.versions(local_store, "d") == [1]


def test_the_bytes_stored_are_the_bytes_hashed_even_when_a_file_changes(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(30, size=2_000)
    lines = list_file.read_text().splitlines()
    first = lines[0].split("\t")[0]
    victim = list_file.parent / first
    result = upload(list_file, "d", store=local_store, packed=True, row_group_bytes=10_000)
    stored = {entry.path: entry.xxh3 for entry in result.manifest.files}
    assert stored[os.path.normpath(first)] == xxh3(victim.read_bytes())
    # The same file named twice, changed between its two reads (rows 0 and 25, five row groups apart): refused.
    lines[25] = f"{first}\t{lines[25].split(chr(9))[1]}"
    list_file.write_text("\n".join(lines) + "\n")
    with pytest.raises(IntegrityError, match=r"changed while it was being uploaded"):
        upload(
            list_file, "e", store=local_store, packed=True, row_group_bytes=10_000,
            progress=ChangeOnceWritingStarts(victim),
        )  # fmt: skip
    assert catalog.versions(local_store, "e") == []
    assert local_store.list(f"{layout.dataset_folder('e')}/{layout.PACKS}") == {}


def test_reading_its_objects_is_refused_with_the_way_out(local_store: Store, make_image_list: MakeImageList) -> None:
    upload(make_image_list(5), "d", store=local_store, packed=True)
    with pytest.raises(ValueError, match=r"d@1 is stored only as Parquet shards; read it with use_shards=True"):
        reader("d", local_store, use_shards=False)


def test_a_lost_shard_is_reported_and_a_new_upload_brings_the_files_back(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(20, size=2_000)
    sizes = {"row_group_bytes": 8_000, "shard_bytes": 16_000}
    manifest = upload(list_file, "d", store=local_store, packed=True, **sizes).manifest
    lost = manifest.shards[1]
    local_store.remove(layout.shard_path("d", lost))
    done = CliRunner().invoke(cli, ["verify", "d", "--repair", "--store", local_store.url, "-q"])
    assert done.exit_code == 1
    assert f"shard {lost.path} holds files stored nowhere else: upload the list again" in done.output
    again = upload(list_file, "d", store=local_store, packed=True)
    assert again.created and again.manifest.version == 2
    assert list(reader("d", local_store)()) == image_rows(list_file)


def test_the_command_says_where_the_files_went(local_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(8)
    done = CliRunner().invoke(cli, ["upload", str(list_file), "d", "--pack", "--store", local_store.url, "-q"])
    assert done.exit_code == 0, done.output
    assert "d@1 is packed in 1 shard(s), its files stored only there" in done.output
    assert "uploaded d@1: image, 8 rows, 8 files in" in done.output
    info = CliRunner().invoke(cli, ["info", "d", "--store", local_store.url])
    assert "1 shard(s), the files stored only there" in info.output


@pytest.mark.s3
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes_read_it_from_s3(s3_store: Store, make_image_list: MakeImageList, method: str) -> None:
    list_file = make_image_list(24, size=1_000)
    upload(list_file, "d", store=s3_store, packed=True, row_group_bytes=4_000)
    loader = DataLoader.from_generator(capacity=4, use_multiprocess=True, mp_context=method)
    loader.set_sample_generator(reader("d", s3_store), batch_size=5, drop_last=False)
    rows = [row for images, labels in loader() for row in zip(images, labels, strict=True)]
    assert sorted(rows) == sorted(image_rows(list_file))


class KilledAfter:
    """Progress that kills its own process with SIGKILL (as the out-of-memory killer or a lost node does) once
    ``rows`` rows are written into shards."""

    def __init__(self, rows: int) -> None:
        self.rows, self.done, self.phase = rows, 0, ""

    def start(self, phase: str, *, items: int, size: int) -> None:
        self.phase = phase

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        self.done += items if self.phase == "pack" else 0
        if self.done >= self.rows:
            os.kill(os.getpid(), signal.SIGKILL)

    def finish(self) -> None:
        pass


SMALL_SHARDS = {"row_group_bytes": 20_000, "shard_bytes": 60_000}


def _upload_killed(store: Store, list_file: Path, rows: int) -> None:
    upload(list_file, "d", store=store, packed=True, progress=KilledAfter(rows), **SMALL_SHARDS)


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
def test_a_killed_upload_goes_on_from_the_shards_it_wrote(store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(80, size=3_000)
    child = multiprocessing.get_context("spawn").Process(target=_upload_killed, args=(store, list_file, 50))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    assert catalog.versions(store, "d") == []
    packs = f"{layout.dataset_folder('d')}/{layout.PACKS}"
    before = store.list(packs)
    left = sorted(path for path in before if path.endswith(".parquet"))
    assert len(left) == 2 and len([path for path in before if path.endswith(".done")]) == 2

    result = upload(list_file, "d", store=store, packed=True, **SMALL_SHARDS)
    manifest = result.manifest
    assert manifest.version == 1 and len(manifest.shards) >= 4
    resumed = manifest.shards[0].rows + manifest.shards[1].rows
    assert (result.reused_files, result.sent_files) == (resumed, 80 - resumed)
    assert result.sent_bytes == sum(shard.size for shard in manifest.shards[2:])
    paths = [layout.shard_path("d", shard) for shard in manifest.shards]
    assert paths[:2] == left  # the shards the killed run finished are the version's own, not written again
    assert not set(paths[2:]) & set(before)
    assert list(reader("d", store)()) == image_rows(list_file)
    assert verify(store, manifest).ok
    after = store.list(packs)
    assert not [path for path in after if path.endswith(".done")]  # the markers went with the commit
    assert [path for path in after if path.endswith("/taken")]


@pytest.mark.parametrize("damage", ["cut short", "another format", "records of another shard", "an earlier release's"])
def test_a_marker_that_is_not_whole_counts_as_none(
    local_store: Store, make_image_list: MakeImageList, damage: str
) -> None:
    """A killed run's marker cut short, left by another release (one of JSON; one whose records held each row's
    sha256), or holding records for another number of rows: that shard is written again, the others are taken as
    written."""
    list_file = make_image_list(80, size=3_000)
    child = multiprocessing.get_context("spawn").Process(target=_upload_killed, args=(local_store, list_file, 50))
    child.start()
    child.join(timeout=120)
    packs = f"{layout.dataset_folder('d')}/{layout.PACKS}"
    first = sorted(path for path in local_store.list(packs) if path.endswith(".done"))[0]
    marker = local_store.read(first)
    spoiled = {
        "cut short": marker[: len(marker) - 7],
        "another format": json.dumps({"entry": {}, "files": []}).encode(),
        "records of another shard": marker + marker[-upload_marker.RECORD_BYTES :],
        "an earlier release's": _sha256_marker(marker),
    }[damage]
    local_store.write(first, spoiled)
    result = upload(list_file, "d", store=local_store, packed=True, **SMALL_SHARDS)
    second = result.manifest.shards[1].rows
    assert (result.reused_files, result.sent_files) == (second, 80 - second)
    assert list(reader("d", local_store)()) == image_rows(list_file)


def _sha256_marker(marker: bytes) -> bytes:
    """``marker`` as the release before manifest format 8 wrote it: ``DMSHARD1``, each row's size and sha256."""
    (length,) = struct.unpack_from("<Q", marker, len(upload_marker.MAGIC))
    records_at = len(upload_marker.MAGIC) + 8 + length
    rows = json.loads(marker[len(upload_marker.MAGIC) + 8 : records_at])["rows"]
    sizes = struct.iter_unpack("<q8s", marker[records_at:])
    records = b"".join(struct.pack("<q32s", size, bytes(32)) for size, _ in sizes)
    assert len(records) == 40 * rows
    return b"DMSHARD1" + marker[len(upload_marker.MAGIC) : records_at] + records


def test_an_upload_never_writes_into_the_shards_of_a_version(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(30, size=3_000)
    first = upload(list_file, "d", store=local_store, packed=True, **SMALL_SHARDS).manifest
    rows = image_rows(list_file)
    victim = list_file.parent / list_file.read_text().splitlines()[3].split("\t")[0]
    victim.write_bytes(bytes(b ^ 0xFF for b in victim.read_bytes()))  # other bytes, the same size: the same plan
    second = upload(list_file, "d", store=local_store, packed=True, **SMALL_SHARDS).manifest
    assert second.version == 2
    assert {layout.pack_folder_of(s) for s in first.shards}.isdisjoint(layout.pack_folder_of(s) for s in second.shards)
    assert list(reader("d@1", local_store)()) == rows and verify(local_store, first).ok
    assert list(reader("d@2", local_store)()) == image_rows(list_file) != rows


def test_the_memory_held_does_not_grow_with_a_shards_rows(
    local_store: Store, make_image_list: MakeImageList, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 rows in one shard of small row groups: what the upload holds is a row group's rows and the bounded
    window of the sort of their entries, not a record per row of the shard (its marker's records go to disk). It
    held 2.6 MB; 8.4 MB while the marker's records were a JSON list in memory (19.5 and 2.8 MB at 60,000 rows)."""
    monkeypatch.setattr(listfile, "READ_BYTES", 1 << 16)  # the windows of the list's reads and sort, small beside
    monkeypatch.setattr(list_windows, "LIST_READ_BYTES", 1 << 16)
    monkeypatch.setattr(spool, "RUN_RECORDS", 2048)  # the rows
    monkeypatch.setattr(spool, "BLOCK_RECORDS", 256)
    source = make_image_list(200, size=16)
    upload(source, "warm-up", store=local_store, packed=True)  # the imports of a first upload are not the rows'
    list_file = source.with_name("many.list")
    list_file.write_text(source.read_text() * 100)
    tracemalloc.start()
    try:
        result = upload(list_file, "d", store=local_store, packed=True, row_group_bytes=4096, shard_bytes=1 << 30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.manifest.rows == 20_000 and len(result.manifest.shards) == 1
    assert peak < 4 * 1024**2, f"{peak / 1024**2:.1f} MB held for 20,000 rows"
    assert reader("d", local_store)[19_999] == image_rows(list_file)[19_999]
