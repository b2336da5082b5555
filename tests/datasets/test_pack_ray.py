"""Packing with Ray: shards written as Ray tasks, byte for byte a local pack, and readable by Ray Data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import catalog, layout
from datamount.datasets.manifest import Manifest
from datamount.datasets.pack import pack
from datamount.datasets.pack_ray import pack_ray
from datamount.datasets.rows import object_locations, read_lines
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import ObjectNotFoundError, Store, open_store
from tests.generated import MakeImageList

SMALL = {"shard_bytes": 20_000, "row_group_bytes": 5_000}


def shard_bytes(store: Store, manifest: Manifest) -> list[bytes]:
    return [store.read(layout.shard_path(manifest.name, shard)) for shard in manifest.shards]


def without_time(manifest: Manifest) -> Manifest:
    return dataclasses.replace(manifest, created="")


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("kind", ["image", "text"])
def test_a_ray_pack_is_byte_for_byte_the_local_pack(
    kind: str, make_image_list: MakeImageList, tmp_path: Path, local_store: Store
) -> None:
    if kind == "image":
        source = make_image_list(50, size=1200)
    else:
        source = tmp_path / "text.list"
        source.write_text("".join(f"source line {i} {'x' * (i % 37)}\ttarget {i}\n" for i in range(2000)))
    ray_store = open_store(tmp_path / "ray-store")
    for store in (local_store, ray_store):
        upload(source, "d", store=store)
    local = pack("d", store=local_store, **SMALL)
    distributed = pack_ray("d", store=ray_store, **SMALL)
    assert len(local.shards) > 2
    assert without_time(distributed) == without_time(local)
    assert shard_bytes(ray_store, distributed) == shard_bytes(local_store, local)
    assert list(reader("d", ray_store)()) == list(reader("d", local_store, use_shards=False)())
    assert pack_ray("d", store=ray_store, **SMALL) == distributed


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_ray_data_reads_the_shards(make_image_list: MakeImageList, local_store: Store) -> None:
    ray_data = pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'ray[data]')")
    upload(make_image_list(30, size=1000), "d", store=local_store)
    manifest = pack_ray("d", store=local_store, **SMALL)
    expected = list(reader("d", local_store)())
    ray_data.DataContext.get_current().enable_progress_bars = False
    urls = [local_store.url_for(f"datasets/d/{shard.path}") for shard in manifest.shards]
    rows = sorted(ray_data.read_parquet(urls).take_all(), key=lambda row: row["index"])
    assert [row["index"] for row in rows] == list(range(30))
    assert [(row["file"], row["label"]) for row in rows] == expected


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_failing_shard_task_raises_its_error_and_commits_nothing(
    make_image_list: MakeImageList, local_store: Store
) -> None:
    upload(make_image_list(30, size=1000), "d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    missing = object_locations(manifest, read_lines(local_store, manifest))[17].path
    local_store.remove(missing)
    with pytest.raises(ObjectNotFoundError, match=missing.rsplit("/", 1)[-1]):
        pack_ray("d", store=local_store, **SMALL)
    assert catalog.resolve(local_store, "d").shards == []


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_the_pack_command_takes_ray(make_image_list: MakeImageList, local_store: Store) -> None:
    upload(make_image_list(20, size=1000), "d", store=local_store)
    expected = list(reader("d", local_store)())
    runner = CliRunner()
    done = runner.invoke(cli, ["pack", "d", "--ray", "--shard-size", "8MiB", "--store", local_store.url, "-q"])
    assert done.exit_code == 0, done.output
    assert "d@1 is packed in 1 shard(s)" in done.output
    assert list(reader("d", local_store)()) == expected


def test_a_memory_store_is_refused_before_ray_is_reached(memory_store: Store, text_list: Path) -> None:
    upload(text_list, "pairs", store=memory_store)
    with pytest.raises(ValueError, match="memory"):
        pack_ray("pairs", store=memory_store)
