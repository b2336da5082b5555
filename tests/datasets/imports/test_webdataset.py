"""WebDataset shards as an import source: what ``webdataset.ShardWriter`` writes reads back equal, sample for sample,
to what ``webdataset.WebDataset`` yields (from a folder, a brace pattern, a file, gzip-compressed shards and moto's
S3); ``skip`` resumes exactly; a truncated shard, a damaged header or gzip stream, and what WebDataset would pass
over silently (a link, a member without a field, bytes after the archive's end) are refused naming shard and sample.
"""

from __future__ import annotations

import gzip
import io
import random
import tarfile
from itertools import accumulate, pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets.imports.location import locate
from datamount.datasets.imports.source import BATCH_ROWS, IMAGE_EXTENSION, KEY_FIELD, SourceError, identity
from datamount.datasets.imports.webdataset import WebDatasetSource, open_webdataset
from datamount.storage import ObjectNotFoundError, Store
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

webdataset = pytest.importorskip("webdataset")

PATTERN = "shards-{000000..000002}.tar"
#: Samples per shard, and samples in all (three shards, the last one short).
PER_SHARD, SAMPLES = 12, 31


def sample(number: int, rng: random.Random) -> dict[str, Any]:
    """Sample ``number``: an image, a class and, for every third sample (and the first), a segmentation."""
    fields: dict[str, Any] = {
        "__key__": f"img{number:05d}",
        "jpg": rng.randbytes(rng.randrange(1, 3000)),
        "cls": str(number % 7).encode(),
    }
    if number % 3 == 0:
        fields["seg.png"] = rng.randbytes(rng.randrange(0, 500))
    return fields


def write_shards(folder: Path, *, samples: int = SAMPLES, per_shard: int = PER_SHARD, suffix: str = ".tar") -> Path:
    """Shards written by WebDataset's own writer into ``folder``; one key comes back later in its shard."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(52)
    with webdataset.ShardWriter(str(folder / f"shards-%06d{suffix}"), maxcount=per_shard, verbose=0) as writer:
        for number in range(samples):
            fields = sample(number, rng)
            if number == 5:  # a key that came before, not next to it: WebDataset yields a sample of its own
                fields["__key__"] = "img00002"
            writer.write(fields)
    return folder


def their_samples(urls: list[str]) -> list[dict[str, Any]]:
    """What WebDataset's reader yields from ``urls``: each sample's key and fields, the bytes as they are."""
    samples = webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
    return [{k: v for k, v in s.items() if k == KEY_FIELD or not k.startswith("__")} for s in samples]


def our_samples(source: WebDatasetSource) -> list[dict[str, Any]]:
    """Every sample of ``source``, shard by shard, without the fields a sample lacks (null)."""
    rows = [row for shard in range(len(source.shards)) for batch in source.batches(shard) for row in batch.to_pylist()]
    return [{field: value for field, value in row.items() if value is not None} for row in rows]


def shard_paths(folder: Path, suffix: str = ".tar") -> list[str]:
    return [str(path) for path in sorted(folder.glob(f"*{suffix}"))]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shards(tmp_path_factory.mktemp("webdataset"))


@pytest.fixture
def damaged(shards: Path, tmp_path: Path) -> Path:
    """A copy of ``shards``, for a test to damage."""
    for path in shards.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    return tmp_path


def test_a_folder_reads_as_webdataset_reads_it(shards: Path) -> None:
    source = open_webdataset(locate(shards))
    assert [shard.name for shard in source.shards] == ["shards-000000.tar", "shards-000001.tar", "shards-000002.tar"]
    assert [shard.size for shard in source.shards] == [(shards / shard.name).stat().st_size for shard in source.shards]
    theirs = their_samples(shard_paths(shards))
    assert len(theirs) == SAMPLES and [s[KEY_FIELD] for s in theirs].count("img00002") == 2
    assert our_samples(source) == theirs


def test_the_schema_is_the_first_samples_fields_in_its_order(shards: Path) -> None:
    schema = open_webdataset(locate(shards)).schema
    assert schema.names == [KEY_FIELD, "cls", "jpg", "seg.png"]  # TarWriter writes a sample's fields by name
    assert schema.field(KEY_FIELD).type == pa.string()
    assert [schema.field(name).type for name in schema.names[1:]] == [pa.binary()] * 3
    assert [(schema.field(name).metadata or {}).get(IMAGE_EXTENSION) for name in schema.names] == [
        None,
        None,
        b"jpg",
        b"png",
    ]


@pytest.mark.parametrize("form", ["pattern", "file"], ids=["brace-pattern", "single-file"])
def test_a_pattern_or_a_file_names_the_shards(shards: Path, form: str) -> None:
    if form == "pattern":
        source, paths = open_webdataset(locate(f"{shards}/{PATTERN}")), shard_paths(shards)
    else:
        source, paths = open_webdataset(locate(shards / "shards-000001.tar")), [str(shards / "shards-000001.tar")]
    assert [shard.name for shard in source.shards] == [Path(path).name for path in paths]
    assert our_samples(source) == their_samples(paths)


def test_gzip_compressed_shards_read_as_webdataset_reads_them(tmp_path: Path) -> None:
    folder = write_shards(tmp_path / "gz", suffix=".tar.gz")
    source = open_webdataset(locate(folder))
    assert [shard.name for shard in source.shards] == [f"shards-00000{n}.tar.gz" for n in range(3)]
    assert our_samples(source) == their_samples(shard_paths(folder, ".tar.gz"))


@pytest.mark.s3
def test_shards_on_s3_by_a_pattern_read_as_on_disk(shards: Path, s3_server: S3Server, s3_store: Store) -> None:
    for path in shard_paths(shards):
        s3_store.write(f"wds/{Path(path).name}", Path(path).read_bytes())
    options = {"endpoint_url": s3_server.endpoint_url, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    source = open_webdataset(locate(f"{s3_store.url_for('wds')}/{PATTERN}", options))
    assert source.where == f"s3://datamount-test/root/wds/{PATTERN}"
    assert identity(source) == identity(open_webdataset(locate(f"{shards}/{PATTERN}")))
    assert our_samples(source) == their_samples(shard_paths(shards))


def test_batches_are_cut_by_rows_and_by_bytes(tmp_path: Path) -> None:
    folder = write_shards(tmp_path, samples=2 * BATCH_ROWS + 5, per_shard=10**6)
    by_rows = open_webdataset(locate(folder))
    assert [batch.num_rows for batch in by_rows.batches(0)] == [BATCH_ROWS, BATCH_ROWS, 5]
    by_bytes = open_webdataset(locate(folder), batch_bytes=100_000)
    batches = list(by_bytes.batches(0))
    assert len(batches) > 3 and all(batch.num_rows < BATCH_ROWS for batch in batches)
    for batch in batches:
        rows = batch.to_pylist()
        assert sum(len(value) for row in rows for key, value in row.items() if key != KEY_FIELD and value) <= 100_000
    assert pa.Table.from_batches(batches).equals(pa.Table.from_batches(list(by_rows.batches(0))))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(skip=st.integers(0, PER_SHARD + 2), batch_bytes=st.sampled_from([1, 2000, 10**6]))
def test_skip_resumes_exactly(shards: Path, skip: int, batch_bytes: int) -> None:
    source = open_webdataset(locate(shards), batch_bytes=batch_bytes)
    every = [row for batch in source.batches(1) for row in batch.to_pylist()]
    assert len(every) == PER_SHARD
    assert [row for batch in source.batches(1, skip) for row in batch.to_pylist()] == every[skip:]


def tar_layout(path: Path) -> list[tuple[int, int, int, int]]:
    """Each member of a tar: (its sample's number, its header's offset, its data's offset, its size)."""
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    keys = [member.name.split(".", 1)[0] for member in members]
    numbers = list(accumulate([0] + [int(key != before) for before, key in pairwise(keys)]))
    return [(n, m.offset, m.offset_data, m.size) for n, m in zip(numbers, members, strict=True)]


def refusal(folder: Path) -> SourceError:
    """The error of reading every shard of ``folder``."""
    with pytest.raises(SourceError) as error:
        our_samples(open_webdataset(locate(folder)))
    return error.value


@pytest.mark.parametrize(
    "cut",
    ["in-data", "in-header", "after-member", "before-end-block"],
    ids=["inside-a-members-data", "inside-a-header", "between-members", "without-end-block"],
)
def test_a_truncated_shard_is_refused_naming_shard_and_sample(damaged: Path, cut: str) -> None:
    path = damaged / "shards-000001.tar"
    layout = tar_layout(path)
    first_of_4 = next(member for member in layout if member[0] == 4)
    last = layout[-1]
    at, sample_number, words = {
        "in-data": (first_of_4[2] + first_of_4[3] // 2, 4, "inside the data of member"),
        "in-header": (first_of_4[1] + 100, 3, "inside the header"),  # sample 3 may have had more members
        "after-member": (first_of_4[1], 3, "without the end-of-archive block"),
        "before-end-block": (last[2] + -(-last[3] // 512) * 512, last[0], "without the end-of-archive block"),
    }[cut]
    path.write_bytes(path.read_bytes()[:at])
    error = refusal(damaged)
    assert (error.shard, error.sample) == ("shards-000001.tar", sample_number)
    assert "truncated" in error.reason and words in error.reason
    with pytest.raises(SourceError) as skipping:  # samples skipped are not read, but their shard is checked
        list(open_webdataset(locate(damaged)).batches(1, PER_SHARD))
    assert (skipping.value.sample, skipping.value.reason) == (sample_number, error.reason)


@pytest.mark.parametrize(
    ("member", "sample_number"),
    [(0, 0), (1, 0), (7, 2), (9, 3)],
    ids=["first-header", "second-member-of-sample-0", "first-member-of-sample-3", "third-member-of-sample-3"],
)
def test_a_flipped_header_byte_is_refused(damaged: Path, member: int, sample_number: int) -> None:
    path = damaged / "shards-000002.tar"
    layout = tar_layout(path)
    assert [number for number, *_ in layout[:10]] == [0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    offset = layout[member][1]
    data = bytearray(path.read_bytes())
    data[offset + 3] ^= 0x01  # in the member's name: its header's checksum no longer matches
    path.write_bytes(bytes(data))
    error = refusal(damaged)
    assert error.shard == "shards-000002.tar"
    assert error.reason == f"damaged header at byte {offset}: bad checksum"
    # The first header of sample 3 may as well have been more of sample 2: the sample named is the one not whole.
    assert error.sample == sample_number


def test_gzip_damage_and_truncation_are_refused(tmp_path: Path) -> None:
    folder = write_shards(tmp_path / "gz", suffix=".tar.gz", samples=5)
    path = folder / "shards-000000.tar.gz"
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 20])
    assert "truncated: the gzip stream ends early" in refusal(folder).reason
    flipped = bytearray(whole)
    flipped[-6] ^= 0x01  # in the recorded CRC
    path.write_bytes(bytes(flipped))
    error = refusal(folder)
    assert (error.shard, error.sample) == ("shards-000000.tar.gz", None)
    assert error.reason.startswith("damaged gzip stream: CRC check failed")


def write_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], *, tail: bytes = b"") -> Path:
    """A tar of ``members`` (a name and its bytes, or a member without data), then ``tail``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    path.write_bytes(buffer.getvalue() + tail)
    return path


def link(name: str, kind: bytes, target: str = "a.jpg") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_what_webdataset_passes_over_quietly_is_refused(tmp_path: Path) -> None:
    cases: dict[str, tuple[list[Any], bytes, int | None, str]] = {
        "symlink": ([("a.jpg", b"1"), link("b.jpg", tarfile.SYMTYPE)], b"", 1, "is a symbolic link to 'a.jpg'"),
        "hardlink": ([("a.jpg", b"1"), link("b.jpg", tarfile.LNKTYPE)], b"", 1, "is a hard link to 'a.jpg'"),
        "fifo": ([("a.jpg", b"1"), link("b.jpg", tarfile.FIFOTYPE, "")], b"", 1, "is a FIFO"),
        "no-field": ([("a.jpg", b"1"), ("README", b"2")], b"", 0, "'README' has no field after its key"),
        "same-field": ([("a.jpg", b"1"), ("a.JPG", b"2")], b"", 0, "'a.JPG' is a second file for field 'jpg'"),
        "key-field": ([("a.jpg", b"1"), ("a.__key__", b"2")], b"", 0, "the name of the key's column"),
        "new-field": ([("a.jpg", b"1"), ("b.jpg", b"2"), ("b.txt", b"3")], b"", 1, "field(s) 'txt', which the"),
        "trailing-bytes": ([("a.jpg", b"1")], b"more", None, "after its end-of-archive block at byte 1024"),
    }
    for name, (members, tail, number, words) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        write_tar(folder / "s.tar", members, tail=tail)
        error = refusal(folder)
        assert (error.shard, error.sample) == ("s.tar", number), name
        assert words in error.reason, name
    with pytest.raises(ValueError, match="duplicate file name"):  # WebDataset refuses a field twice as well
        their_samples([str(tmp_path / "same-field" / "s.tar")])


def test_directories_and_metadata_are_passed_over_as_webdataset_does(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    members = [
        ("__index__", b"meta"),
        link("a", tarfile.DIRTYPE, ""),
        ("a/x.jpg", b"1"),
        ("a/x.json", b"{}"),
        ("__meta__/notes.txt", b"meta"),
        ("a/y.JPG", b"2"),
    ]
    write_tar(folder / "s.tar", members)
    source = open_webdataset(locate(folder))
    assert source.schema.names == [KEY_FIELD, "jpg", "json"]
    assert (
        our_samples(source)
        == their_samples([str(folder / "s.tar")])
        == [
            {KEY_FIELD: "a/x", "jpg": b"1", "json": b"{}"},
            {KEY_FIELD: "a/y", "jpg": b"2"},
        ]
    )


def test_what_is_not_a_plain_or_gzip_tar_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.tar").write_bytes(b"")
    assert refusal(tmp_path).reason == "empty: not a tar file"
    (tmp_path / "empty.tar").write_bytes(b"BZh91AY&SY" + b"\0" * 100)
    assert refusal(tmp_path).reason.startswith("compressed with bzip2")
    (tmp_path / "empty.tar").write_bytes(gzip.compress(b"not a tar" * 100))
    assert refusal(tmp_path).reason.startswith("damaged header at byte 0: ")


def test_a_pattern_must_name_files_inside_its_folder_that_exist(shards: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"names '../outside.tar', which is not a plain path inside its folder"):
        locate(f"{shards}/{{shards-000000,../outside}}.tar")
    with pytest.raises(ObjectNotFoundError, match=r"no file 'shards-000003.tar'"):
        open_webdataset(locate(f"{shards}/shards-{{000000..000004}}.tar"))
    with pytest.raises(ObjectNotFoundError, match=r"no shards \(no file named \*.tar, \*.tar.gz, \*.tgz in it\)"):
        open_webdataset(locate(tmp_path))
