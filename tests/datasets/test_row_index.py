"""Format 7: an image version's rows indexed by the commit, by path and by row (datasets/row_index.py); a row, its
first sample and ``reader[i]`` read from one list block and one part, whatever the rows."""

from __future__ import annotations

import dataclasses
import pickle
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, file_parts_writer, layout, list_windows, locks, upload
from datamount.datasets.errors import MissingPartError
from datamount.datasets.file_parts import FileParts
from datamount.datasets.file_parts_writer import PAIR_SCHEMA, write_indexes
from datamount.datasets.manifest import FileEntry
from datamount.datasets.row_index import RowFile, RowIndex
from datamount.readers import reader
from datamount.storage import IntegrityError, Store
from tests.generated import image_rows
from tests.manifests import write_format_6


def repeated_list(folder: Path, files: int, rows: int, seed: int = 0) -> Path:
    """A list of ``rows`` rows naming ``files`` distinct files in a random order, most of them more than once."""
    rng = random.Random(seed)
    (folder / "img").mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (folder / "img" / f"{i:05d}.jpg").write_bytes(f"file {i} ".encode() * (1 + i % 5))
    named = [rng.randrange(files) for _ in range(rows)]
    list_file = folder / "train.list"
    list_file.write_text("".join(f"img/{i:05d}.jpg\t{n % 7}\n" for n, i in enumerate(named)), encoding="utf-8")
    return list_file


def pairs_of(paths: list[str], chunk: int) -> list[pa.Table]:
    return [
        pa.table(
            {
                "path": paths[start : start + chunk],
                "row": list(range(start, start + len(paths[start : chunk + start]))),
            },
            schema=PAIR_SCHEMA,
        )
        for start in range(0, len(paths), chunk)
    ]


@pytest.mark.parametrize(
    ("run_rows", "chunk_rows"),
    [(100_000, 1 << 14), (61, 1 << 14), (100_000, 5)],
    ids=["in-memory", "spilled-and-merged", "joined-in-small-chunks"],
)
def test_each_entry_gets_its_first_row_and_each_row_its_file(
    memory_store: Store, run_rows: int, chunk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_parts_writer, "_MERGE_ROWS", chunk_rows)
    rng = random.Random(3)
    entries = [
        FileEntry(f"c{i % 9}/f{i:04d}", i * 3, rng.randbytes(32).hex(), rng.randbytes(8).hex()) for i in range(400)
    ]
    rows = [rng.choice(entries[:300]).path for _ in range(1_000)]  # 100 entries no row names
    rng.shuffle(entries)
    path_parts, row_parts = write_indexes(
        memory_store, "d", entries, pairs_of(rows, 77), len(rows), by_row=True, rows_per_part=128, run_rows=run_rows
    )
    folder = layout.dataset_folder("d")
    files = FileParts(memory_store, folder, path_parts, "d@1")
    index = RowIndex(memory_store, folder, row_parts, "d@1")
    by_path = {entry.path: entry for entry in entries}
    assert list(files) == sorted(entries) and len(index) == 1_000 and len(row_parts) == 8
    for entry in entries:
        found = files.located(entry.path)
        first = rows.index(entry.path) if entry.path in rows else -1
        assert found == (entry, first)
    expected = [RowFile(by_path[path].size, by_path[path].sha256, by_path[path].xxh3) for path in rows]
    assert list(index.files(0, 1_000)) == expected
    assert [index.file(row) for row in (0, 127, 128, 999)] == [expected[row] for row in (0, 127, 128, 999)]


FIELD = st.text(st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.lists(FIELD, min_size=1, max_size=4), min_size=1, max_size=60),
    window=st.integers(min_value=1, max_value=64),
)
def test_a_lists_paths_are_each_rows_first_field_whatever_its_read_window(
    memory_store: Store, rows: list[list[str]], window: int
) -> None:
    """Rows of any fields (empty ones, non-ASCII, a row of one field), read in windows that cut lines and characters
    anywhere: each row's path is its first field, numbered in order."""
    data = "".join("\t".join(row) + "\n" for row in rows).encode()
    memory_store.write("l", data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(list_windows, "LIST_READ_BYTES", window)
        tables = list(file_parts_writer.list_pairs(memory_store, "l", len(data), len(rows)))
    pairs = pa.concat_tables(tables)
    assert pairs.column("path").to_pylist() == [row[0] for row in rows]
    assert pairs.column("row").to_pylist() == list(range(len(rows)))


def test_a_list_of_other_rows_than_said_or_not_utf8_is_refused(memory_store: Store) -> None:
    memory_store.write("l", b"a\tx\nb\tx\n")
    with pytest.raises(ValueError, match="has 2 rows, not 3"):
        list(file_parts_writer.list_pairs(memory_store, "l", 10, 3))
    memory_store.write("bad", b"a\tx\n\xff\tx\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        list(file_parts_writer.list_pairs(memory_store, "bad", 9, 2))


def test_a_row_whose_path_has_no_entry_is_refused_by_name(memory_store: Store) -> None:
    entries = [FileEntry("a", 1, "00" * 32, "11" * 8), FileEntry("c", 1, "22" * 32, "33" * 8)]
    for paths, unknown in ((["a", "b", "c"], "b"), (["c", "a", "z"], "z"), (["0", "a"], "0")):
        with pytest.raises(ValueError, match=f"the list names '{unknown}', which has no file entry"):
            write_indexes(memory_store, "d", entries, pairs_of(paths, 2), len(paths), by_row=True)


def test_a_commit_indexes_an_image_versions_rows_and_paths(local_store: Store, tmp_path: Path) -> None:
    list_file = repeated_list(tmp_path / "src", 50, 400)
    manifest = upload(list_file, "d", store=local_store).manifest
    read = catalog.resolve(local_store, "d")
    assert read.format_version == 7 and read.indexed and isinstance(read.row_parts, RowIndex)
    assert len(read.row_parts) == 400 and read.row_parts == manifest.row_parts
    lines = [line.split("\t")[0] for line in list_file.read_text().splitlines()]
    for row in (0, 1, 199, 399):
        entry = read.files.stored_entry(lines[row])
        assert entry is not None and read.row_parts.file(row) == RowFile(entry.size, entry.sha256, entry.xxh3)
    assert isinstance(read.files, FileParts)
    assert read.files.located(lines[7]) == (read.files.stored_entry(lines[7]), lines.index(lines[7]))
    assert list(reader("d", local_store)()) == image_rows(list_file)


def test_a_packed_upload_indexes_paths_and_has_no_row_index(local_store: Store, tmp_path: Path) -> None:
    list_file = repeated_list(tmp_path / "src", 20, 60)
    upload(list_file, "d", store=local_store, packed=True)
    read = catalog.resolve(local_store, "d")
    assert read.indexed and read.row_parts is not None and len(read.row_parts.parts) == 0
    first = list_file.read_text().splitlines()[5].split("\t")[0]
    assert isinstance(read.files, FileParts)
    located = read.files.located(first)
    assert located is not None and located[1] <= 5
    assert list(reader("d", local_store)()) == image_rows(list_file)


def test_a_row_and_the_first_sample_read_one_part_of_each_index(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every index part but those of the rows asked for is removed: the rows are still read (and a pass, which
    needs the others, names the part it misses). A pass's first sample reads its read-ahead window's parts too:
    bounded by the window, not by the rows (benchmarks/bench_scale.py measures it)."""
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", 64)
    list_file = repeated_list(tmp_path / "src", 300, 500, seed=5)
    upload(list_file, "d", store=store)
    manifest = catalog.resolve(store, "d")
    assert manifest.row_parts is not None and isinstance(manifest.files, FileParts)
    assert len(manifest.row_parts.parts) == 8 and len(manifest.files.parts) > 2
    folder = layout.dataset_folder("d")
    kept = {manifest.row_parts.parts[0].path, manifest.row_parts.parts[6].path}
    for part in [*manifest.files.parts, *manifest.row_parts.parts]:
        if part.path not in kept:
            store.remove(f"{folder}/{part.path}")
    expected = image_rows(list_file)
    samples = reader("d", store)
    assert samples[6 * 64 + 3] == expected[6 * 64 + 3] and samples[0] == expected[0]
    with pytest.raises(MissingPartError, match=r"the part of its row index .*entries/[0-9a-f]{64}\.parquet is missing"):
        list(samples())


def test_a_ranks_share_reads_the_row_index_parts_of_its_rows_alone(local_store: Store, tmp_path: Path) -> None:
    """The last of four ranks passes over its rows (the last quarter, in order) with the row index's other parts
    removed: nothing else is read to decide how its objects are checked."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(file_parts_writer, "ROWS_PER_PART", 64)
        list_file = repeated_list(tmp_path / "src", 300, 512, seed=6)
        upload(list_file, "d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    assert manifest.row_parts is not None and len(manifest.row_parts.parts) == 8
    for part in manifest.row_parts.parts[:6]:
        local_store.remove(f"{layout.dataset_folder('d')}/{part.path}")
    share = reader("d", local_store, rank=3, world_size=4, shuffle=False)
    assert list(share()) == image_rows(list_file)[384:]


def test_a_damaged_row_index_part_is_an_integrity_error_naming_it(local_store: Store, tmp_path: Path) -> None:
    upload(repeated_list(tmp_path / "src", 10, 30), "d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    assert manifest.row_parts is not None
    path = f"{layout.dataset_folder('d')}/{manifest.row_parts.parts[0].path}"
    data = bytearray(local_store.read(path))
    data[len(data) // 2] ^= 0xFF
    local_store.write(path, bytes(data))
    with pytest.raises(
        IntegrityError, match=r"the part of its row index .*entries/[0-9a-f]{64}\.parquet does not match"
    ):
        reader("d", local_store)[3]


def test_a_version_from_before_the_row_index_still_reads(local_store: Store, tmp_path: Path) -> None:
    """A format-6 manifest (entries without rows, no row index) beside the same list and objects."""
    list_file = repeated_list(tmp_path / "src", 40, 120)
    upload(list_file, "d", store=local_store)
    read = write_format_6(local_store, "d")
    assert read.format_version == 6 and not read.indexed and read.version == 2
    assert isinstance(read.files, FileParts) and read.files.located(read.files[0].path) == (read.files[0], -1)
    samples = reader("d@2", local_store)
    assert list(samples()) == image_rows(list_file) and samples[77] == image_rows(list_file)[77]


def test_a_manifest_sent_to_another_process_carries_its_row_parts_names(local_store: Store, tmp_path: Path) -> None:
    upload(repeated_list(tmp_path / "src", 30, 200), "d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    assert manifest.row_parts is not None
    sent = pickle.dumps(manifest)
    assert manifest.row_parts.file(199).sha256.encode() not in sent
    received = pickle.loads(sent)
    assert received.row_parts == manifest.row_parts and received.row_parts.file(199) == manifest.row_parts.file(199)


def test_a_copy_recommits_both_indexes_in_the_target(local_store: Store, memory_store: Store, tmp_path: Path) -> None:
    from datamount.datasets import copy_version

    list_file = repeated_list(tmp_path / "src", 25, 90)
    upload(list_file, "d", store=local_store)
    copy_version("d", source=local_store, target=memory_store)
    copied = catalog.resolve(memory_store, "d")
    assert copied.indexed and copied.row_parts is not None and copied.row_parts.stored_in(memory_store, "datasets/d")
    assert copied.row_parts == catalog.resolve(local_store, "d").row_parts
    assert list(reader("d", memory_store)()) == image_rows(list_file)


def test_entries_written_twice_under_a_lock_commit_the_same_parts(local_store: Store, tmp_path: Path) -> None:
    list_file = repeated_list(tmp_path / "src", 12, 40)
    first = upload(list_file, "d", store=local_store).manifest
    draft = dataclasses.replace(first, version=0, files=list(first.files), row_parts=None, source="again")
    with locks.writing(local_store, "d"):
        again = catalog.commit(local_store, draft)
    assert again.row_parts == first.row_parts and again.files == first.files


@pytest.mark.parametrize("store", ["local", pytest.param("s3", id="s3-moto", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_read_an_unpacked_version_through_its_row_index(store: Store, tmp_path: Path, method: str) -> None:
    """Its entries by path are removed: workers (which get the reader pickled, the manifest with its parts' names)
    read every row from the list and the row index alone."""
    from datamount.readers import multiprocess_reader

    list_file = repeated_list(tmp_path / "src", 60, 300, seed=9)
    upload(list_file, "d", store=store)
    manifest = catalog.resolve(store, "d")
    assert isinstance(manifest.files, FileParts)
    for part in manifest.files.parts:
        store.remove(f"{layout.dataset_folder('d')}/{part.path}")
    samples = reader("d", store)
    read = list(multiprocess_reader([samples, samples], mp_context=method)())
    assert sorted(read) == sorted(image_rows(list_file))  # the two readers share the pass, as workers do
