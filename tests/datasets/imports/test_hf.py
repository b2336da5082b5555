"""``--from-format hf``: a ``Dataset`` and a ``DatasetDict`` that ``save_to_disk`` wrote, and ``load_dataset`` cache
folders, read back sample for sample as ``datasets`` itself loads them (images as their bytes, class labels with
their names), every split or one, on disk and on moto's S3, resumed exactly at any row; a stream cut short, a file
``state.json`` lists but is not there, a missing shard or count, and images held only as paths refused. Parquet
files ``datasets`` wrote take its features the same way.

``datasets`` runs in a process of its own: in this one, the repository's ``datasets/`` folder (on ``sys.path`` for
the tests) would be imported in its place. It writes every dataset the tests read once, with what it loads back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets.imports import import_dataset
from datamount.datasets.imports.hf import open_hf
from datamount.datasets.imports.hf_features import CLASS_NAMES
from datamount.datasets.imports.location import locate
from datamount.datasets.imports.parquet import open_parquet
from datamount.datasets.imports.source import BATCH_ROWS, Source, SourceError
from datamount.datasets.manifest import Kind
from datamount.readers import reader
from datamount.storage import ObjectNotFoundError, Store
from tests.datasets.imports.killing import killed_then_resumed
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

pytest.importorskip("datasets", reason="Hugging Face datasets is not installed (the test extra)")
# One worker builds the datasets once (a process that imports ``datasets``: seconds).
pytestmark = pytest.mark.xdist_group("hf-datasets")

CLASSES = ["cat", "dog", "bird"]

WRITE_DATASETS = r"""
import io, json, os, sys
import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Sequence, Value
from PIL import Image as Picture

datasets.disable_progress_bars()
out = sys.argv[1]
os.chdir(out)


def image(i):
    data = io.BytesIO()
    Picture.new("RGB", (6 + i % 5, 4), (i * 7 % 256, 40, 200)).save(data, "PNG" if i % 3 else "JPEG")
    return data.getvalue()


def samples(count, first=0):
    rows = range(first, first + count)
    return {
        "image": [{"bytes": image(i), "path": f"img{i}.{'png' if i % 3 else 'jpg'}"} for i in rows],
        "label": [i % 3 for i in rows],
        "caption": [None if i % 7 == 0 else f"picture {i}" for i in rows],
        "tokens": [list(range(i % 4)) for i in rows],
    }


features = Features(
    {
        "image": Image(),
        "label": ClassLabel(names=["cat", "dog", "bird"]),
        "caption": Value("string"),
        "tokens": Sequence(Value("int32")),
    }
)


def plain(value):
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def rows(dataset):
    return [plain(row) for row in dataset.cast_column("image", Image(decode=False))]


expected = {}
one = Dataset.from_dict(samples(30), features=features)
one.save_to_disk("saved", num_shards=3)
expected["saved"] = {"": rows(datasets.load_from_disk("saved"))}

train = Dataset.from_dict(samples(25), features=features)
both = DatasetDict(train=train, test=Dataset.from_dict(samples(9, 100), features=features))
both.save_to_disk("dict")
loaded = datasets.load_from_disk("dict")
expected["dict"] = {split: rows(loaded[split]) for split in ("train", "test")}

numbers = Dataset.from_dict({"n": list(range(2500)), "s": [str(i) for i in range(2500)]})
numbers.save_to_disk("numbers", num_shards=2)
expected["numbers"] = {"": [plain(row) for row in datasets.load_from_disk("numbers")]}

os.makedirs("parquet", exist_ok=True)
both["train"].to_parquet("parquet/train.parquet")
both["test"].to_parquet("parquet/test.parquet")
expected["parquet"] = {"": expected["dict"]["train"]}

built = datasets.load_dataset(
    "parquet", data_files={"train": "parquet/train.parquet", "test": "parquet/test.parquet"}, cache_dir="cache"
)
os.rename(os.path.dirname(built["train"].cache_files[0]["filename"]), "built")
expected["built"] = {split: rows(built[split]) for split in ("train", "test")}

numbers.to_parquet("numbers.parquet", batch_size=500)
builder = datasets.load_dataset_builder("parquet", data_files={"train": "numbers.parquet"}, cache_dir="cache")
builder.download_and_prepare(max_shard_size=5000)
sharded = builder.as_dataset(split="train")
os.rename(os.path.dirname(sharded.cache_files[0]["filename"]), "sharded")
expected["sharded"] = {"train": [plain(row) for row in sharded]}

built["train"].select(range(3)).save_to_disk("selected")
expected["selected"] = {"train": rows(datasets.load_from_disk("selected"))}

for split in ("train", "test"):
    for name in ("cat", "dog"):
        os.makedirs(f"images/{split}/{name}")
        for i in range(2):
            with open(f"images/{split}/{name}/{i}.png", "wb") as file:
                file.write(image(i + 1))
folder = datasets.load_dataset("imagefolder", data_dir="images", cache_dir="cache")
os.rename(os.path.dirname(folder["train"].cache_files[0]["filename"]), "imagefolder")

with open("expected.json", "w") as file:
    json.dump(expected, file)
"""


def from_json(value: Any) -> Any:
    if isinstance(value, dict):
        return bytes.fromhex(value["hex"]) if set(value) == {"hex"} else {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, list[dict[str, Any]]]]]:
    """The folders ``datasets`` wrote, and what it loads from each (by split: ``""`` where there is none)."""
    out = tmp_path_factory.mktemp("hf")
    env = {**os.environ, "HF_HOME": str(out / "hf-home"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", WRITE_DATASETS, str(out)], capture_output=True, text=True, cwd=out, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = from_json(json.loads((out / "expected.json").read_text()))
    for splits in expected.values():
        for rows in splits.values():
            for row in rows:
                if isinstance(row.get("image"), dict):
                    row["image"] = row["image"]["bytes"]  # the import's image column: the image file's bytes
    return out, expected


def all_rows(source: Source, skip: int = 0, shard: int | None = None) -> list[dict[str, Any]]:
    shards = range(len(source.shards)) if shard is None else [shard]
    rows = []
    for number in shards:
        for batch in source.batches(number, skip):
            assert batch.schema.equals(source.schema, check_metadata=True) and 0 < batch.num_rows <= BATCH_ROWS
            rows.extend(batch.to_pylist())
    return rows


def by_split(source: Source) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for number, shard in enumerate(source.shards):
        rows.setdefault(shard.split, []).extend(all_rows(source, shard=number))
    return rows


def copy(written: tuple[Path, Any], name: str, to: Path) -> Path:
    shutil.copytree(written[0] / name, to / name)
    return to / name


def test_a_saved_dataset_reads_as_load_from_disk(written: tuple[Path, Any]) -> None:
    folder, expected = written
    source = open_hf(locate(folder / "saved"))
    assert source.format == "hf"
    assert [shard.name for shard in source.shards] == [f"data-0000{i}-of-00003.arrow" for i in range(3)]
    assert {shard.split for shard in source.shards} == {""} and {shard.rows for shard in source.shards} == {None}
    assert source.schema.names == ["image", "label", "caption", "tokens"]
    assert str(source.schema.field("image").type) == "binary" and str(source.schema.field("label").type) == "int64"
    assert json.loads(source.schema.field("label").metadata[CLASS_NAMES]) == CLASSES
    assert by_split(source) == expected["saved"]
    images = [row["image"] for row in expected["saved"][""]]
    assert {image[:3] for image in images} == {b"\x89PN", b"\xff\xd8\xff"}  # PNG and JPEG files in one column


def test_a_dataset_dict_reads_every_split_or_one(written: tuple[Path, Any]) -> None:
    folder, expected = written
    source = open_hf(locate(folder / "dict"))
    assert [(shard.name, shard.split) for shard in source.shards] == [
        ("train/data-00000-of-00001.arrow", "train"),
        ("test/data-00000-of-00001.arrow", "test"),
    ]
    assert by_split(source) == expected["dict"]
    test = open_hf(locate(folder / "dict"), split="test")
    assert [shard.split for shard in test.shards] == ["test"] and by_split(test) == {"test": expected["dict"]["test"]}
    with pytest.raises(ValueError, match=r"no split 'validation' \(the splits there: 'train', 'test'\)"):
        open_hf(locate(folder / "dict"), split="validation")


def test_cache_folders_of_load_dataset_read_as_it_loads_them(written: tuple[Path, Any]) -> None:
    folder, expected = written
    built = open_hf(locate(folder / "built"))
    assert [(shard.name, shard.split, shard.rows) for shard in built.shards] == [
        ("parquet-train.arrow", "train", 25),
        ("parquet-test.arrow", "test", 9),
    ]
    assert json.loads(built.schema.field("label").metadata[CLASS_NAMES]) == CLASSES
    assert by_split(built) == expected["built"]
    sharded = open_hf(locate(folder / "sharded"))
    assert len(sharded.shards) > 1 and sum(shard.rows for shard in sharded.shards) == 2500  # type: ignore[misc]
    assert [shard.name for shard in sharded.shards][-1] == f"parquet-train-{len(sharded.shards) - 1:05d}-of-" + (
        f"{len(sharded.shards):05d}.arrow"
    )
    assert by_split(sharded) == expected["sharded"]


def test_a_subset_saved_with_its_origin_s_counts_is_read(written: tuple[Path, Any]) -> None:
    """NOTE [ Row counts of a saved dataset ]: its dataset_info.json still counts 25 rows."""
    folder, expected = written
    assert json.loads((folder / "selected" / "dataset_info.json").read_text())["splits"]["train"]["num_examples"] == 25
    assert by_split(open_hf(locate(folder / "selected"))) == expected["selected"]


def test_parquet_files_datasets_wrote_take_its_features(written: tuple[Path, Any]) -> None:
    folder, expected = written
    source = open_parquet(locate(folder / "parquet" / "train.parquet"))
    saved = open_hf(locate(folder / "dict")).schema
    for name in ("image", "label", "caption"):  # Parquet names a list's item "element"
        assert source.schema.field(name).equals(saved.field(name), check_metadata=True)
    assert all_rows(source) == expected["parquet"][""]


def test_parquet_files_of_other_features_are_refused(written: tuple[Path, Any], tmp_path: Path) -> None:
    folder, _ = written
    shutil.copytree(folder / "parquet", tmp_path / "parquet")
    stored = pq.read_table(tmp_path / "parquet" / "test.parquet")
    recorded = stored.schema.metadata[b"huggingface"].replace(b'"bird"', b'"fish"')
    pq.write_table(stored.replace_schema_metadata({b"huggingface": recorded}), tmp_path / "parquet" / "test.parquet")
    with pytest.raises(SourceError, match=r"train\.parquet: its schema is not test\.parquet's: the features datasets"):
        open_parquet(locate(tmp_path / "parquet"))


def test_images_held_only_as_paths_are_refused(written: tuple[Path, Any]) -> None:
    folder, _ = written
    source = open_hf(locate(folder / "imagefolder"))
    with pytest.raises(SourceError, match=r"imagefolder-train\.arrow, sample 0: its 'image' image is only a path") as e:
        all_rows(source)
    assert "save_to_disk" in str(e.value)


@pytest.mark.s3
def test_a_dataset_dict_on_moto_s3_reads_as_on_disk(
    written: tuple[Path, Any], s3_server: S3Server, s3_store: Store
) -> None:
    folder, expected = written
    for path in sorted((folder / "dict").rglob("*")):
        if path.is_file():
            s3_store.put_file(path, f"dict/{path.relative_to(folder / 'dict').as_posix()}")
    options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    remote = open_hf(locate(s3_store.url_for("dict"), options))
    local = open_hf(locate(folder / "dict"))
    assert remote.shards == local.shards and remote.schema.equals(local.schema, check_metadata=True)
    assert by_split(remote) == expected["dict"]
    assert all_rows(remote, skip=7, shard=1) == expected["dict"]["test"][7:]


@settings(max_examples=30, deadline=None)
@given(shard=st.integers(0, 1), skip=st.integers(min_value=0, max_value=1300))
def test_skip_resumes_at_exactly_that_row(written: tuple[Path, Any], shard: int, skip: int) -> None:
    folder, expected = written
    source = open_hf(locate(folder / "numbers"))
    rows = expected["numbers"][""][shard * 1250 : (shard + 1) * 1250]
    assert all_rows(source, skip=skip, shard=shard) == rows[skip:]


@pytest.mark.parametrize("cut", [8, 300], ids=["end-mark", "within-a-batch"])
def test_a_stream_cut_short_is_refused_naming_it(written: tuple[Path, Any], tmp_path: Path, cut: int) -> None:
    folder = copy(written, "saved", tmp_path)
    path = folder / "data-00001-of-00003.arrow"
    path.write_bytes(path.read_bytes()[:-cut])
    source = open_hf(locate(folder))
    assert len(all_rows(source, shard=0)) == 10
    with pytest.raises(SourceError, match=r"data-00001-of-00003\.arrow, sample \d+: its stream.*cut short") as e:
        all_rows(source, shard=1)
    assert e.value.shard == "data-00001-of-00003.arrow"


def test_a_file_state_json_lists_must_be_there(written: tuple[Path, Any], tmp_path: Path) -> None:
    folder = copy(written, "dict", tmp_path)
    (folder / "test" / "data-00000-of-00001.arrow").unlink()
    with pytest.raises(SourceError, match=r"test/data-00000-of-00001\.arrow: test/state\.json lists it"):
        open_hf(locate(folder))
    assert len(open_hf(locate(folder), split="train").shards) == 1


def test_a_cache_folder_s_shards_and_counts_are_checked(written: tuple[Path, Any], tmp_path: Path) -> None:
    folder = copy(written, "sharded", tmp_path)
    last = sorted(folder.glob("*.arrow"))[-1]
    kept = last.read_bytes()
    last.unlink()
    with pytest.raises(SourceError, match=rf"{last.name}: split 'train' has \d+ shards, and this one is not here"):
        open_hf(locate(folder))
    last.write_bytes(kept)
    info = json.loads((folder / "dataset_info.json").read_text())
    info["splits"]["train"]["shard_lengths"][0] += 1
    info["splits"]["train"]["num_examples"] += 1
    (folder / "dataset_info.json").write_text(json.dumps(info))
    source = open_hf(locate(folder))
    with pytest.raises(SourceError, match=r"-00000-of-\d+\.arrow: it holds \d+ samples, not the \d+ of dataset_info"):
        all_rows(source, shard=0)


def test_a_folder_that_is_no_dataset_is_refused(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "data.arrow").write_bytes(b"")
    with pytest.raises(ObjectNotFoundError, match="not a Hugging Face dataset"):
        open_hf(locate(tmp_path / "other"))


def test_an_import_reads_back_as_datasets_loads_it_split_by_split(
    written: tuple[Path, Any], local_store: Store
) -> None:
    folder, expected = written
    done = import_dataset(
        folder / "dict", "pets", format="hf", store=local_store, shard_bytes=20_000, row_group_bytes=5_000
    )
    assert done.manifest.kind is Kind.TABLE and done.manifest.splits == {"train": 25, "test": 9}
    assert done.manifest.columns == ["image", "label", "caption", "tokens"]
    for split in ("train", "test"):
        rows = list(reader("pets", local_store, split=split)())
        assert rows == [tuple(row.values()) for row in expected["dict"][split]]
    chosen = import_dataset(
        folder / "dict",
        "pictures",
        format="hf",
        store=local_store,
        image_field="image",
        label_field="label",
        split="test",
    )
    assert chosen.manifest.kind is Kind.IMAGE and chosen.manifest.rows == 9
    wanted = [(row["image"], str(row["label"])) for row in expected["dict"]["test"]]
    assert list(reader("pictures", local_store)()) == wanted


def test_an_import_killed_part_way_goes_on_from_its_last_shard(
    written: tuple[Path, Any], local_store: Store, tmp_path: Path
) -> None:
    folder, expected = written
    options = {"format": "hf", "shard_bytes": 6_000, "row_group_bytes": 2_000}
    done = killed_then_resumed(folder / "numbers", local_store, tmp_path, 1200, **options)
    assert done.manifest.rows == 2500
    assert list(reader("killed", local_store)()) == [tuple(row.values()) for row in expected["numbers"][""]]
