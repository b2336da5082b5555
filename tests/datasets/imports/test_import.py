"""``import --from-format``, end to end on WebDataset shards written by WebDataset's own writer: a sample of one
image and one class becomes an image version that ``reader()`` and ``datamount://`` show as the ``.list`` view, any
other a table version of its fields; the mapping chosen by options; a killed import (SIGKILL) resumed from its last
shard; a damaged source, a bad mapping or two samples that make one file with other bytes commit nothing; a source
on S3 read by its brace pattern."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import catalog
from datamount.datasets.imports import MappingError, SourceError, import_dataset
from datamount.datasets.manifest import Kind
from datamount.readers import reader
from datamount.storage import Store, open_store
from datamount.urlfs import DatamountFileSystem
from tests.datasets.imports.killing import killed_then_resumed
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

webdataset = pytest.importorskip("webdataset")

#: A JPEG's first bytes: WebDataset and datamount take the rest as they are.
JPEG_START = b"\xff\xd8\xff\xe0"


def image(number: int, size: int = 600) -> bytes:
    return JPEG_START + random.Random(number).randbytes(size)


def write_shards(folder: Path, samples: list[dict[str, Any]], per_shard: int) -> str:
    """``samples`` in WebDataset shards written by its ``ShardWriter``; the brace pattern that names them."""
    folder.mkdir(parents=True, exist_ok=True)
    with webdataset.ShardWriter(str(folder / "shards-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for sample in samples:
            sink.write(sample)
    last = (len(samples) - 1) // per_shard
    return str(folder / f"shards-{{000000..{last:06d}}}.tar")


def read_back(pattern: str) -> list[dict[str, Any]]:
    """What WebDataset's own reader yields from ``pattern``, in order, bytes as they are."""
    return [
        {k: v for k, v in sample.items() if not k.startswith("__") or k == "__key__"}
        for sample in webdataset.WebDataset(pattern, shardshuffle=False, empty_check=False)
    ]


def labelled(count: int, size: int = 600) -> list[dict[str, Any]]:
    return [
        {"__key__": f"class{n % 3}/{n:05d}", "jpg": image(n, size), "cls": f"{n % 3}\n".encode()} for n in range(count)
    ]


def test_an_image_and_a_class_become_an_image_version_read_as_the_list_view(local_store: Store, tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "wds", labelled(45), per_shard=10)
    done = import_dataset(pattern, "cats", format="webdataset", store=local_store)
    manifest = done.manifest
    assert (manifest.kind, manifest.columns, manifest.rows) == (Kind.IMAGE, ["file", "label"], 45)
    expected = [(sample["jpg"], sample["cls"].decode().strip()) for sample in read_back(pattern)]
    assert list(reader("cats", local_store)()) == expected
    fs = DatamountFileSystem(store=local_store.url, cache=str(tmp_path / "cache"), skip_instance_cache=True)
    assert fs.cat("datamount://_/cats@1/class1/00004.jpg") == image(4)
    assert len(fs.find("datamount://_/cats@1/class0")) == 15
    assert {path.rsplit("/", 1)[-1] for path in fs.ls("datamount://_/cats@1", detail=False)} >= {"class0", "class2"}
    assert manifest.source == "webdataset:shards-{000000..000004}.tar"


def test_other_samples_become_a_table_version_of_their_fields(local_store: Store, tmp_path: Path) -> None:
    samples = [
        {"__key__": f"{n:04d}", "jpg": image(n), "txt": f"caption {n}".encode(), "json": json.dumps({"n": n}).encode()}
        for n in range(25)
    ]
    pattern = write_shards(tmp_path / "wds", samples, per_shard=7)
    manifest = import_dataset(pattern, "captions", format="webdataset", store=local_store).manifest
    written = read_back(pattern)
    assert (manifest.kind, manifest.columns) == (Kind.TABLE, list(written[0]))  # the members' order in the tars
    assert set(manifest.columns) == {"__key__", "jpg", "txt", "json"}
    expected = [tuple(sample.values()) for sample in written]
    assert list(reader("captions", local_store)()) == expected
    chosen = import_dataset(
        pattern, "pairs", format="webdataset", store=local_store, image_field="jpg", label_field="txt"
    )
    assert chosen.manifest.kind is Kind.IMAGE
    assert list(reader("pairs", local_store)()) == [(s["jpg"], s["txt"].decode()) for s in read_back(pattern)]


def test_the_command_takes_columns_and_prints_a_json_summary(local_store: Store, tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "wds", labelled(12), per_shard=5)
    args = ["import", "--from-format", "webdataset", pattern, "only", "--columns", "cls,__key__"]
    result = CliRunner().invoke(cli, [*args, "--store", local_store.url, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["dataset"], summary["version"], summary["kind"], summary["rows"], summary["columns"]) == (
        "only",
        1,
        "table",
        12,
        ["cls", "__key__"],
    )
    assert list(reader("only", local_store)()) == [(s["cls"], s["__key__"]) for s in read_back(pattern)]


def test_a_mapping_that_does_not_fit_is_refused_and_commits_nothing(local_store: Store, tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "wds", labelled(6), per_shard=5)
    with pytest.raises(MappingError, match=r"'png'.*no such field"):
        import_dataset(pattern, "cats", format="webdataset", store=local_store, image_field="png")
    result = CliRunner().invoke(
        cli,
        ["import", "--from-format", "webdataset", pattern, "cats", "--columns", "jpg,nope", "--store", local_store.url],
    )
    assert result.exit_code == 2 and "'nope'" in result.output
    samples = labelled(6)
    samples[4]["cls"] = b"a\tb"
    pattern = write_shards(tmp_path / "tabbed", samples, per_shard=5)
    with pytest.raises(SourceError, match=r"shards-000000.tar, sample 4: its label 'a\\tb'"):
        import_dataset(pattern, "cats", format="webdataset", store=local_store)
    assert catalog.versions(local_store, "cats") == []


def test_two_samples_that_make_one_file_with_other_bytes_are_refused(local_store: Store, tmp_path: Path) -> None:
    samples = labelled(8)
    samples[6]["__key__"] = samples[1]["__key__"]  # another shard, the same key, other bytes
    pattern = write_shards(tmp_path / "wds", samples, per_shard=4)
    with pytest.raises(SourceError, match=r"rows 1 and 6 .* class1/00001.jpg"):
        import_dataset(pattern, "cats", format="webdataset", store=local_store)
    assert catalog.versions(local_store, "cats") == []


def test_a_damaged_source_is_an_error_naming_its_shard_and_commits_nothing(local_store: Store, tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "wds", labelled(30, size=4000), per_shard=10)
    shard = tmp_path / "wds" / "shards-000001.tar"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    result = CliRunner().invoke(
        cli, ["import", "--from-format", "webdataset", pattern, "cats", "--store", local_store.url]
    )
    assert result.exit_code == 2, result.output
    assert "shards-000001.tar" in result.output
    assert catalog.versions(local_store, "cats") == []


def test_an_import_killed_part_way_goes_on_from_its_last_shard(local_store: Store, tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "wds", labelled(120, size=2000), per_shard=16)
    options = {"format": "webdataset", "shard_bytes": 40_000, "row_group_bytes": 10_000}
    done = killed_then_resumed(pattern, local_store, tmp_path, 80, **options)
    assert done.written_rows > 0  # the second run wrote the rest
    expected = [(sample["jpg"], sample["cls"].decode().strip()) for sample in read_back(pattern)]
    assert list(reader("killed", local_store)()) == expected


@pytest.mark.s3
def test_a_source_on_s3_is_read_by_its_brace_pattern(s3_server: S3Server, s3_store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "wds"
    write_shards(folder, labelled(22), per_shard=8)
    for shard in sorted(folder.iterdir()):
        s3_store.put_file(str(shard), f"source/{shard.name}")
    pattern = s3_store.url_for("source/shards-{000000..000002}.tar")
    options = [f"endpoint_url={s3_server.endpoint_url}", f"key={S3_TEST_KEY}", f"secret={S3_TEST_SECRET}"]
    args = ["import", "--from-format", "webdataset", pattern, "cats"]
    for option in options:
        args += ["--from-option", option]
    for option in options:
        args += ["-o", option]
    result = CliRunner().invoke(cli, [*args, "--store", s3_store.url_for("store")])
    assert result.exit_code == 0, result.output
    assert "imported cats@1: 22 rows" in result.output
    assert S3_TEST_SECRET not in result.output
    store = open_store(
        s3_store.url_for("store"), endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    rows = list(reader("cats", store)())
    assert rows == [
        (s["jpg"], s["cls"].decode().strip()) for s in read_back(str(folder / "shards-{000000..000002}.tar"))
    ]
