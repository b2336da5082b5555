"""``export --format webdataset``: tar shards that WebDataset's own reader (and ``tar -t``) reads back equal, sample
for sample, to what ``reader()`` yields, for image (unpacked and packed), text and table versions; shards cut by
size and count; the same bytes when run again; a damaged object leaves nothing behind, in a folder or at a store's
URL (moto's S3), and a URL that holds anything else is refused."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import export_webdataset, import_batches, layout, upload
from datamount.datasets.manifest import Manifest
from datamount.datasets.webdataset_export import MARKER
from datamount.readers import reader
from datamount.storage import IntegrityError, Store, open_store
from tests.generated import write_image_list
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

webdataset = pytest.importorskip("webdataset")

ROWS = 40


@pytest.fixture
def at(s3_server: S3Server, s3_store: Store) -> Callable[[str], Store]:
    """A store at a prefix of ``s3_store``'s, on moto's endpoint with the test credentials."""

    def store(prefix: str) -> Store:
        url = s3_store.url_for(prefix)
        return open_store(url, endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET)

    return store


def read_back(pattern: str) -> list[dict[str, Any]]:
    """The samples WebDataset's reader yields from ``pattern``, in order, each file's bytes as they are."""
    return [
        {key: value for key, value in sample.items() if not key.startswith("__") or key == "__key__"}
        for sample in webdataset.WebDataset(pattern, shardshuffle=False, empty_check=False)
    ]


def image_version(store: Store, folder: Path, *, packed: bool) -> tuple[Manifest, Path]:
    list_file = write_image_list(folder, ROWS, size=3000, labels=5)
    # A list may name a file twice: each row is a sample of its own.
    list_file.write_text(list_file.read_text() + "./data/img0003.jpg\tagain\n", encoding="utf-8")
    return upload(list_file, "cats", store=store, packed=packed).manifest, list_file


@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
def test_an_image_version_reads_back_sample_for_sample(local_store: Store, tmp_path: Path, packed: bool) -> None:
    manifest, _ = image_version(local_store, tmp_path / "src", packed=packed)
    done = export_webdataset("cats", tmp_path / "out", store=local_store, shard_samples=16)
    assert done.shards == ["cats-000000.tar", "cats-000001.tar", "cats-000002.tar"] and done.samples == ROWS + 1
    assert done.pattern == f"{tmp_path / 'out'}/cats-{{000000..000002}}.tar"
    expected = list(reader("cats", local_store)())
    samples = read_back(done.pattern)
    assert [(sample["jpg"], sample["label.txt"].decode()) for sample in samples] == expected
    assert [sample["__key__"] for sample in samples] == [f"{row:06d}" for row in range(ROWS + 1)]
    decoded = next(iter(webdataset.WebDataset(done.pattern, shardshuffle=False).decode()))
    assert decoded["label.txt"] == expected[0][1]  # WebDataset's decoders take .txt as text
    listed = subprocess.run(["tar", "-tf", tmp_path / "out" / "cats-000002.tar"], capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stdout.splitlines()[-2:] == ["000040.jpg", "000040.label.txt"]
    assert manifest.rows == ROWS + 1


def test_text_and_table_versions_name_each_column(local_store: Store, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.list"
    pairs.write_text("bonjour\thello\nle chat\tthe cat\nmerci\tthank you\n", encoding="utf-8")
    upload(pairs, "pairs", store=local_store, kind="text")
    done = export_webdataset("pairs", tmp_path / "pairs", store=local_store)
    samples = read_back(done.pattern)
    assert [(s["source.txt"].decode(), s["target.txt"].decode()) for s in samples] == list(
        reader("pairs", local_store)()
    )
    table = pa.table({"image": [b"\x00\x01", b"\x02", None], "caption": ["a", "b c", "d"], "score": [1.5, 2.0, 3.0]})
    import_batches(table.to_batches(), table.schema, "scored", store=local_store)
    done = export_webdataset("scored", tmp_path / "scored", store=local_store)
    samples = read_back(done.pattern)
    assert [sorted(sample) for sample in samples] == [
        ["__key__", "caption.txt", "image.bin", "score.json"],
        ["__key__", "caption.txt", "image.bin", "score.json"],
        ["__key__", "caption.txt", "score.json"],  # a null writes no file
    ]
    assert [json.loads(sample["score.json"]) for sample in samples] == [1.5, 2.0, 3.0]
    assert samples[0]["image.bin"] == b"\x00\x01" and samples[1]["caption.txt"] == b"b c"


def test_shards_close_before_their_size_and_the_same_export_gives_the_same_bytes(
    local_store: Store, tmp_path: Path
) -> None:
    image_version(local_store, tmp_path / "src", packed=False)
    size = 20_000
    first = export_webdataset("cats", tmp_path / "a", store=local_store, shard_bytes=size)
    again = export_webdataset("cats", tmp_path / "b", store=local_store, shard_bytes=size)
    assert len(first.shards) > 5 and first.shards == again.shards
    for name in first.shards:
        data = (tmp_path / "a" / name).read_bytes()
        # Each shard's members (headers and padded bytes) fit its size; the tar's closing blocks come beyond it.
        with tarfile.open(fileobj=io.BytesIO(data)) as shard:
            members = shard.getmembers()
        assert sum(512 + -(-member.size // 512) * 512 for member in members) <= size
        assert hashlib.sha256(data).digest() == hashlib.sha256((tmp_path / "b" / name).read_bytes()).digest()
    assert sum(len(read_back(str(tmp_path / "a" / name))) for name in first.shards) == ROWS + 1


def test_a_folder_that_holds_anything_is_refused_and_left_as_it_was(local_store: Store, tmp_path: Path) -> None:
    image_version(local_store, tmp_path / "src", packed=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(FileExistsError, match=r"out is not empty: give a folder that does not exist yet"):
        export_webdataset("cats", out, store=local_store)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


def test_a_damaged_object_leaves_no_folder(local_store: Store, tmp_path: Path) -> None:
    manifest, _ = image_version(local_store, tmp_path / "src", packed=False)
    entry = manifest.files[30]
    (Path(local_store.local_path() or "") / layout.object_path("cats", entry.sha256)).write_bytes(b"x" * entry.size)
    with pytest.raises(IntegrityError, match=r"^cats@1, row 30: the object .* does not match its xxh3-64"):
        export_webdataset("cats", tmp_path / "exports" / "out", store=local_store, shard_samples=8)
    assert not (tmp_path / "exports").exists()


@pytest.mark.s3
def test_a_store_url_gets_the_same_shards_and_nothing_after_a_failure(
    local_store: Store, s3_store: Store, at: Callable[[str], Store], tmp_path: Path
) -> None:
    manifest, _ = image_version(local_store, tmp_path / "src", packed=True)
    local = export_webdataset("cats", tmp_path / "out", store=local_store, shard_samples=16)
    url = s3_store.url_for("exports/cats")
    sent = export_webdataset("cats", at("exports/cats"), store=local_store, shard_samples=16)
    assert sent.shards == local.shards and sent.pattern == f"{url}/cats-{{000000..000002}}.tar"
    assert sorted(s3_store.list("exports/cats")) == [f"exports/cats/{name}" for name in local.shards]
    for name in local.shards:
        assert s3_store.read(f"exports/cats/{name}") == (tmp_path / "out" / name).read_bytes()
    with pytest.raises(FileExistsError, match=re.escape(f"{url}/cats-000000.tar is there already")):
        export_webdataset("cats", at("exports/cats"), store=local_store)

    # A shard's row group damaged: the export fails after it sent a shard, and takes it back.
    shard = manifest.shards[-1]
    path = Path(local_store.local_path() or "") / layout.shard_path("cats", shard)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        export_webdataset("cats", at("exports/again"), store=local_store, shard_samples=4)
    assert s3_store.list("exports/again") == {}


@pytest.mark.s3
def test_an_unfinished_export_at_a_url_is_written_again(
    local_store: Store, s3_store: Store, at: Callable[[str], Store], tmp_path: Path
) -> None:
    image_version(local_store, tmp_path / "src", packed=False)
    first = export_webdataset("cats", at("exports/cats"), store=local_store, shard_samples=16)
    # As a killed export leaves it: its marker, naming what it writes, and a shard of those it sent.
    key = f"{first.manifest.manifest_sha256} {first.manifest.ref} {1 << 30} 16 "
    shards = {name: s3_store.read(f"exports/cats/{name}") for name in first.shards}
    s3_store.remove(f"exports/cats/{first.shards[2]}")
    from importlib.metadata import version

    s3_store.write(f"exports/cats/{MARKER}", (key + version("datamount")).encode())
    again = export_webdataset("cats", at("exports/cats"), store=local_store, shard_samples=16)
    assert again.shards == first.shards
    assert {name: s3_store.read(f"exports/cats/{name}") for name in again.shards} == shards
    assert MARKER not in {path.rsplit("/", 1)[-1] for path in s3_store.list("exports/cats")}
    # Other settings than the unfinished export's: refused.
    s3_store.write(f"exports/cats/{MARKER}", (key + version("datamount")).encode())
    with pytest.raises(FileExistsError, match="is there already"):
        export_webdataset("cats", at("exports/cats"), store=local_store, shard_samples=8)


def test_the_command_prints_the_pattern_to_read(local_store: Store, tmp_path: Path) -> None:
    image_version(local_store, tmp_path / "src", packed=False)
    out = tmp_path / "out"
    store = ["--store", local_store.url]
    done = CliRunner().invoke(
        cli, ["export", "cats", str(out), *store, "--format", "webdataset", "--shard-samples", "20", "-q"]
    )
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith(f"{out}/cats-{{000000..000002}}.tar")
    assert done.output.startswith("exported cats@1: 41 sample(s) in 3 WebDataset shard(s)")
    wrong = CliRunner().invoke(cli, ["export", "cats", "s3://bucket/x", *store, "-q"])
    assert wrong.exit_code == 2 and "a URL takes --format webdataset" in wrong.output
