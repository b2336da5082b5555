"""``diff_versions`` as a sort-merge of streams: with windows, runs, batches and parts made tiny, so that every list is
read in many windows and sorted in several runs spilled to disk, every batch of keys is cut somewhere, and the files'
entries are merged across many parts, drawn pairs still match the plain reference; a damaged list is still an
integrity error; and a diff of a million rows stays in bounded memory."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from datamount.datasets import catalog, diff, file_parts_writer, layout, list_windows, upload
from datamount.datasets.diff import DiffRow, FileCounts, diff_versions
from datamount.datasets.file_parts import FileParts
from datamount.storage import IntegrityError, Store, open_store
from tests.datasets.test_diff import check_against_reference, image_lists, image_version, text_lists, text_version

#: Paths whose byte order differs from a naive one: around "/" (``-`` and ``.`` sort before it, ``0`` after it) and
#: beyond ASCII (``é`` is two bytes above every ASCII one).
PATHS = ["a.png", "a/b.png", "a-b.png", "a0.png", "a/b/c.png", "é.png", "z/é/x.png", "Z.png"]


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 7 bytes, runs of 3 rows merged 2 at a time, batches of 2 rows, parts of 2 entries, 2 labels
    counted in memory."""
    monkeypatch.setattr(list_windows, "LIST_READ_BYTES", 7)
    monkeypatch.setattr(diff, "RUN_ROWS", 3)
    monkeypatch.setattr(diff, "BATCH_ROWS", 2)
    monkeypatch.setattr(diff, "LABELS_COUNTED", 2)
    monkeypatch.setattr(diff, "FILE_BATCH_ROWS", 2)
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", 2)
    monkeypatch.setattr(file_parts_writer, "MERGE_FAN_IN", 2)


def check_labels(store: Store, a: str, b: str, first: list, second: list) -> None:
    """Label counts exact, whether counted in memory or past :data:`LABELS_COUNTED`."""
    found = diff_versions(store, a, b)
    for rows, counts, distinct in (
        (first, found.label_counts_a, found.distinct_labels_a),
        (second, found.label_counts_b, found.distinct_labels_b),
    ):
        expected = Counter(str(value[0] if isinstance(value, tuple) else value) for _, value in rows)
        assert counts == dict(expected) and distinct == len(expected)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=text_lists(), second=text_lists())
def test_drawn_text_pairs_match_the_reference_in_tiny_pieces(
    tiny: None, tmp_path_factory: pytest.TempPathFactory, first: list, second: list
) -> None:
    folder = tmp_path_factory.mktemp("drawn")
    store = open_store(str(folder / "store"))
    a = text_version(store, folder / "a", "t", first)
    b = text_version(store, folder / "b", "t", second)
    check_against_reference(store, a, b, first, second)
    check_labels(store, a, b, first, second)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=image_lists(PATHS, 14), second=image_lists(PATHS, 14))
def test_drawn_image_pairs_match_the_reference_in_tiny_pieces(
    tiny: None, tmp_path_factory: pytest.TempPathFactory, first: tuple, second: tuple
) -> None:
    folder = tmp_path_factory.mktemp("drawn")
    store = open_store(str(folder / "store"))
    a = image_version(store, folder / "a", "i", *first)
    b = image_version(store, folder / "b", "i", *second)
    as_rows = [[(path, (label, contents[path])) for path, label in rows] for rows, contents in (first, second)]
    check_against_reference(store, a, b, *as_rows)
    check_labels(store, a, b, *as_rows)


def test_files_in_many_parts_are_merged_in_byte_order(tiny: None, local_store: Store, tmp_path: Path) -> None:
    """Every file but one gets other bytes; the versions' entries are in parts of two, sorted as Arrow sorts."""
    first = {path: b"first " + path.encode() for path in PATHS}
    second = {path: b"second " + path.encode() for path in PATHS[1:]} | {"new.png": b"new"}
    a = image_version(local_store, tmp_path / "a", "sorted", [(path, "x") for path in PATHS], first)
    b = image_version(local_store, tmp_path / "b", "sorted", [(path, "x") for path in [*PATHS[1:], "new.png"]], second)
    files = catalog.resolve(local_store, a).files
    assert isinstance(files, FileParts) and len(files.parts) == len(PATHS) // 2
    assert [entry.path for entry in files] == sorted(PATHS, key=lambda path: path.encode())
    found = diff_versions(local_store, a, b)
    assert found.files == FileCounts(added=1, removed=1, changed=len(PATHS) - 1, unchanged=0)
    assert (found.changed, found.changed_bytes, found.changed_labels) == (len(PATHS) - 1, len(PATHS) - 1, 0)
    assert found.sample_rows("changed", 2) == [
        DiffRow(PATHS[1], 1, 0, "x", "x", bytes_changed=True),
        DiffRow(PATHS[2], 2, 1, "x", "x", bytes_changed=True),
    ]
    assert found.sample_rows("removed", 5) == [DiffRow("a.png", 0, None, "x", None)]


def test_samples_keep_the_first_rows_up_to_the_number_asked(tiny: None, local_store: Store, tmp_path: Path) -> None:
    rows = [(f"key {i:03d}", str(i % 7)) for i in range(60)]
    a = text_version(local_store, tmp_path / "a", "kept", rows)
    b = text_version(local_store, tmp_path / "b", "kept", rows[::-1][:10])  # 50 removed, in reverse key order
    found = diff_versions(local_store, a, b, samples=4)
    assert found.removed == 50
    assert [row.row_a for row in found.sample_rows("removed", 100)] == [0, 1, 2, 3]
    assert [row.row_a for row in diff_versions(local_store, a, b).sample_rows("removed", 100)] == list(range(50))


@pytest.mark.parametrize(
    "damage",
    [b"a.png\tcat\n", b"a.png\n", b"a.png\tcat\tdog\n", b"\xff\tcat\n", b"a.png\tcat"],
    ids=["other", "one column", "three columns", "not utf-8", "no line end"],
)
def test_a_damaged_list_is_an_integrity_error(tiny: None, local_store: Store, tmp_path: Path, damage: bytes) -> None:
    """However the list's bytes parse, they are checked against the manifest's sha256 first."""
    rows = [(path, "x") for path in PATHS]
    contents = {path: path.encode() for path in PATHS}
    a = image_version(local_store, tmp_path / "a", "damaged", rows, contents)
    b = image_version(local_store, tmp_path / "b", "damaged", rows[::-1], contents)
    path = layout.list_path(catalog.resolve(local_store, b))
    local_store.write(path, (damage * 40)[: len(local_store.read(path))])
    with pytest.raises(IntegrityError, match=r"the list of damaged@2 .* does not match its manifest's sha256"):
        diff_versions(local_store, a, b)


# ------------------------------------------------------------------------------------ memory

#: The fewest rows at which the bound sits clearly between the streamed diff's peak and the one of the diff that held
#: both lists whole (at a million rows: 305 and 569 MB).
ROWS = 400_000
#: A row's label: long enough that holding every row costs what it costs (20 MB a list).
LABEL = "the label of class number %d, spelled out at some length"
#: Peak resident memory allowed to the diffing process: the interpreter and its imports take about 85 MB, Arrow's
#: kernels and pools 50 more once used; this diff took 233 MB, and 331 MB while both lists were held whole.
BOUND_MB = 280
DIFF = """
import re, sys
from datamount.datasets import diff_versions
from datamount.storage import open_store
found = diff_versions(open_store(sys.argv[1]), "images@1", "images@2")
found.to_json()
print(found.added, found.removed, found.changed, found.unchanged, found.changed_bytes, found.changed_labels)
with open("/proc/self/status") as status:
    print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) // 1024)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_long_image_diff_is_in_bounded_memory(tmp_path: Path) -> None:
    """Two image versions of 400,000 rows naming a thousand files: B relabels every 100th row, drops every 100th
    from the 50th, and names 10 files with other bytes."""
    for version in ("a", "b"):
        (tmp_path / version / "img").mkdir(parents=True)
        for i in range(1000):
            data = b"%032d" % i if version == "a" or i >= 10 else b"other %d" % i
            (tmp_path / version / "img" / f"{i}.jpg").write_bytes(data)
    with (tmp_path / "a" / "images.list").open("w") as out_a, (tmp_path / "b" / "images.list").open("w") as out_b:
        for i in range(ROWS):
            out_a.write(f"img/{i % 1000}.jpg\t{LABEL % (i % 100)}\n")
            if i % 100 != 50:
                out_b.write(f"img/{i % 1000}.jpg\t{LABEL % ((i + (i % 100 == 0)) % 100)}\n")
    store = tmp_path / "store"
    for version in ("a", "b"):
        upload(tmp_path / version / "images.list", "images", store=str(store), kind="image")
    done = subprocess.run([sys.executable, "-c", DIFF, str(store)], capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr
    *counts, peak = (int(value) for value in done.stdout.split())
    # Removed: the rows of the 10 files img/50.jpg, img/150.jpg ... (400 each). Changed: the rows of img/0..9.jpg
    # (other bytes) and of img/0.jpg, img/100.jpg ... (relabelled), img/0.jpg's counted once.
    assert counts == [0, 4_000, 7_600, ROWS - 4_000 - 7_600, 4_000, 4_000]
    assert peak < BOUND_MB, f"the diff took {peak} MB"
