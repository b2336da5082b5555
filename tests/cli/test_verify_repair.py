"""``datamount verify --repair``: what a store lost or damaged comes back, checked, or is named."""

from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
from click.testing import CliRunner, Result

from datamount.cli.main import cli
from datamount.datasets import catalog, layout, pack, upload, verify
from datamount.readers import reader
from datamount.storage import Store
from tests.generated import MakeImageList, image_rows


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_repair_puts_back_lost_and_damaged_objects_from_the_source_list(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(10)
    manifest = upload(list_file, "d", store=local_store).manifest
    lost, damaged = manifest.files[1], manifest.files[6]
    local_store.remove(layout.object_path("d", lost.sha256))
    local_store.write(layout.object_path("d", damaged.sha256), b"\xff\xd8\xff" + b"x" * (damaged.size - 3))
    local_store.remove(layout.list_path(manifest))
    assert run("verify", "d", "--store", local_store.url, "-q").exit_code == 1
    done = run("verify", "d", "--repair", "--from", str(list_file), "--store", local_store.url, "-q")
    assert done.exit_code == 0, done.output
    assert f"repaired: {lost.path}" in done.output and f"repaired: {damaged.path}" in done.output
    assert "repaired: the list" in done.output and "all match now" in done.output
    assert verify(local_store, manifest).ok
    assert list(reader("d", local_store)()) == image_rows(list_file)


def test_repair_names_what_it_cannot_put_back_and_writes_nothing_wrong(
    local_store: Store, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(6)
    manifest = upload(list_file, "d", store=local_store).manifest
    lost = manifest.files[2]
    local_store.remove(layout.object_path("d", lost.sha256))
    (list_file.parent / lost.path).write_bytes(b"\xff\xd8\xff edited since")
    done = run("verify", "d", "--repair", "--from", str(list_file), "--store", local_store.url, "-q")
    assert done.exit_code == 1
    assert f"not repaired: {lost.path}: {lost.path}: no file of the source list has its sha256" in done.output
    assert not local_store.exists(layout.object_path("d", lost.sha256))
    assert run("verify", "d", "--repair", "--store", local_store.url, "-q").exit_code == 1


def test_repair_of_a_packed_version_needs_no_source(s3_store: Store, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(30, size=2000)
    upload(list_file, "d", store=s3_store)
    manifest = pack("d", store=s3_store, shard_bytes=20_000, row_group_bytes=5_000)
    assert len(manifest.shards) > 2
    lost = manifest.files[4]
    s3_store.remove(layout.object_path("d", lost.sha256))
    shard = layout.shard_path("d", manifest.shards[1])
    s3_store.write(shard, s3_store.read(shard)[:-7])
    done = run(
        "verify", "d", "--repair", "--store", s3_store.url, "-o", f"endpoint_url={s3_store.settings.address}", "-q"
    )
    assert done.exit_code == 0, done.output
    assert f"repaired: {lost.path}" in done.output and f"repaired: shard {manifest.shards[1].path}" in done.output
    assert verify(s3_store, catalog.resolve(s3_store, "d")).ok
    assert list(reader("d", s3_store)()) == image_rows(list_file)
    assert list(reader("d", s3_store, use_shards=False)()) == image_rows(list_file)


def test_a_shard_made_again_with_other_bytes_is_not_stored(local_store: Store, make_image_list: MakeImageList) -> None:
    """A shard whose recorded bytes today's writer does not make (written with another codec, as by an earlier
    datamount or pyarrow): repair makes it again, finds another sha256, and stores nothing."""
    list_file = make_image_list(12, size=2000)
    upload(list_file, "d", store=local_store)
    manifest = pack("d", store=local_store, shard_bytes=10_000, row_group_bytes=3_000)
    shard = manifest.shards[1]
    where = local_store.local_path(layout.shard_path("d", shard))
    old = pq.ParquetFile(where)
    groups = [old.read_row_group(group) for group in range(old.num_row_groups)]
    with pq.ParquetWriter(where, old.schema_arrow, compression="snappy", write_page_checksum=True) as writer:
        for group in groups:
            writer.write_table(group)
    record_path = layout.pack_record_path("d", manifest.version)
    record = json.loads(local_store.read(record_path))
    data = local_store.read(layout.shard_path("d", shard))
    record["shards"][1].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    local_store.write(record_path, json.dumps(record).encode())
    assert verify(local_store, catalog.resolve(local_store, "d")).ok  # a sound version, its shard as recorded
    local_store.remove(layout.shard_path("d", shard))

    done = run("verify", "d", "--repair", "--store", local_store.url, "-q")
    assert done.exit_code == 1
    assert not local_store.exists(layout.shard_path("d", shard))
    assert f"not repaired: shard {shard.path}: shard {shard.path} of d made again has sha256" in done.output
    assert "nothing was stored" in done.output
    assert [damage.path for damage in verify(local_store, catalog.resolve(local_store, "d")).damaged] == [
        layout.shard_path("d", shard)
    ]
