"""``diff_versions``: hand-built pairs of versions where every category is known, on every layout a version has
(objects, packed later, packed at upload, text, table, public), checked count by count and row by row; drawn pairs
checked against a plain reference computation; and the store read for its manifests and lists alone."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, import_batches, layout, pack, public, upload
from datamount.datasets.diff import DiffRow, FileCounts, diff_versions
from datamount.datasets.errors import DatasetNotFoundError
from datamount.storage import IntegrityError, Store, open_store
from tests.datasets.public_files import make_mnist, registered, with_checksums_of
from tests.manifests import inline_body
from tests.servers.fault_proxy import FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server

Rows = Sequence[tuple[str, ...]]
LAYOUTS = ["objects", "packed later", "packed at upload"]


def write_list(path: Path, rows: Rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    return path


def image_version(
    store: Store, folder: Path, name: str, rows: Rows, contents: dict[str, bytes], how: str = "objects"
) -> str:
    """Upload an image list of ``rows`` whose files hold ``contents`` (by path), stored as ``how`` says; its ref."""
    for path, data in contents.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    list_file = write_list(folder / "train.list", rows)
    manifest = upload(list_file, name, store=store, kind="image", packed=how == "packed at upload").manifest
    if how == "packed later":
        manifest = pack(manifest.ref, store=store)
    assert bool(manifest.shards) == (how != "objects") and manifest.objects == (how != "packed at upload")
    return manifest.ref


def text_version(store: Store, folder: Path, name: str, rows: Rows) -> str:
    return upload(write_list(folder / "pairs.list", rows), name, store=store, kind="text").manifest.ref


# A: the first version of an image dataset; B: the next, where each path's fate is written beside it.
IMAGES_A = [
    ("a.png", "cat"),  # unchanged
    ("b.png", "dog"),  # unchanged
    ("c.png", "cat"),  # other bytes in B
    ("d.png", "dog"),  # relabelled cat in B
    ("e.png", "cat"),  # other bytes and relabelled dog in B
    ("f.png", "bird"),  # removed
    ("g.png", "cat"),  # listed twice: once in B, so one unchanged and one removed (the later)
    ("g.png", "cat"),
    ("h.png", "dog"),  # listed once: twice in B (dog and cat), so one unchanged and one added
]
IMAGES_B = [
    ("h.png", "cat"),  # added: the h.png dog of A is B's row 6
    ("a.png", "cat"),
    ("b.png", "dog"),
    ("c.png", "cat"),
    ("d.png", "cat"),
    ("e.png", "dog"),
    ("h.png", "dog"),
    ("g.png", "cat"),
    ("i.png", "fish"),  # added
]
CONTENTS_A = {f"{letter}.png": f"{letter} as first drawn".encode() for letter in "abcdefgh"}
CONTENTS_B = {**CONTENTS_A, "c.png": b"c drawn again", "e.png": b"e drawn again", "i.png": b"i"}
del CONTENTS_B["f.png"]


@pytest.mark.parametrize("how_b", LAYOUTS)
@pytest.mark.parametrize("how_a", LAYOUTS)
def test_every_category_of_an_image_pair_is_counted_exactly(
    local_store: Store, tmp_path: Path, how_a: str, how_b: str
) -> None:
    a = image_version(local_store, tmp_path / "a", "cats", IMAGES_A, CONTENTS_A, how_a)
    b = image_version(local_store, tmp_path / "b", "cats", IMAGES_B, CONTENTS_B, how_b)
    found = diff_versions(local_store, a, b)
    assert (found.a_ref, found.b_ref) == ("cats@1", "cats@2")
    assert (found.kind_a, found.kind_b, found.columns_a, found.columns_b) == (
        "image",
        "image",
        *[["file", "label"]] * 2,
    )
    assert found.compared == "rows" and found.notes == []
    counts = (found.added, found.removed, found.changed, found.unchanged, found.changed_bytes, found.changed_labels)
    assert counts == (2, 2, 3, 4, 2, 2)
    assert found.label_counts_a == {"bird": 1, "cat": 5, "dog": 3}
    assert found.label_counts_b == {"cat": 5, "dog": 3, "fish": 1}
    assert found.files == FileCounts(added=1, removed=1, changed=2, unchanged=5)
    assert found.sample_rows("added", 10) == [
        DiffRow("h.png", None, 0, None, "cat"),
        DiffRow("i.png", None, 8, None, "fish"),
    ]
    assert found.sample_rows("removed", 10) == [
        DiffRow("f.png", 5, None, "bird", None),
        DiffRow("g.png", 7, None, "cat", None),
    ]
    assert found.sample_rows("changed", 10) == [
        DiffRow("c.png", 2, 3, "cat", "cat", bytes_changed=True),
        DiffRow("d.png", 3, 4, "dog", "cat", bytes_changed=False),
        DiffRow("e.png", 4, 5, "cat", "dog", bytes_changed=True),
    ]
    assert found.sample_rows("changed", 1) == found.sample_rows("changed", 10)[:1]
    assert found.sample_rows("removed", 0) == []


def rewrite_manifest(store: Store, ref: str, *, extra_file: bool = False, spaced: bool = False) -> None:
    """Write ``ref``'s manifest again, naming one more file than its list, or with spaces between JSON items."""
    name, version = ref.split("@")
    path = layout.manifest_path(name, int(version))
    body = inline_body(store, name, int(version))
    if extra_file:
        body["files"].append(["z.png", 1, "0" * 64])
    store.write(path, json.dumps(body, separators=(", ", ": ") if spaced else (",", ":")).encode())


def test_manifests_laid_out_otherwise_give_the_same_diff(local_store: Store, tmp_path: Path) -> None:
    """The files of manifests whose JSON is spaced out, or names a file its list does not, are compared decoded."""
    a = image_version(local_store, tmp_path / "a", "cats", IMAGES_A, CONTENTS_A)
    b = image_version(local_store, tmp_path / "b", "cats", IMAGES_B, CONTENTS_B)
    relabelled = image_version(local_store, tmp_path / "c", "cats", [(path, "cat") for path, _ in IMAGES_A], CONTENTS_A)
    rewrite_manifest(local_store, a, spaced=True)
    rewrite_manifest(local_store, relabelled, spaced=True)  # the same files as a, and the same text for them
    found = diff_versions(local_store, a, relabelled)
    assert (found.changed, found.unchanged, found.changed_bytes, found.changed_labels) == (4, 5, 0, 4)
    assert found.files == FileCounts(unchanged=8)
    rewrite_manifest(local_store, a, extra_file=True)
    rewrite_manifest(local_store, b, spaced=True)
    found = diff_versions(local_store, a, b)
    assert (found.added, found.removed, found.changed, found.unchanged, found.changed_bytes) == (2, 2, 3, 4, 2)
    assert found.files == FileCounts(added=1, removed=2, changed=2, unchanged=5)


def test_a_version_against_itself_is_all_unchanged(local_store: Store, tmp_path: Path) -> None:
    ref = image_version(local_store, tmp_path, "cats", IMAGES_A, CONTENTS_A)
    found = diff_versions(local_store, ref, "cats")  # a plain name: the latest, this one
    assert (found.added, found.removed, found.changed, found.unchanged) == (0, 0, 0, len(IMAGES_A))
    assert found.label_counts_a == found.label_counts_b and found.files == FileCounts(unchanged=8)


def test_a_text_pair_is_matched_by_its_first_column(local_store: Store, tmp_path: Path) -> None:
    first = [
        ("hello", "bonjour"),  # unchanged
        ("cat", "chat"),  # another target in B
        ("dog", "chien"),  # removed
        ("yes", "oui"),  # twice: one unchanged, the other paired with B's "yes si" (changed)
        ("yes", "oui"),
        ("bye", "au revoir"),  # removed
    ]
    second = [("new", "nouveau"), ("yes", "si"), ("hello", "bonjour"), ("cat", "chatte"), ("yes", "oui")]
    a = text_version(local_store, tmp_path / "a", "pairs", first)
    b = text_version(local_store, tmp_path / "b", "pairs", second)
    found = diff_versions(local_store, a, b)
    counts = (found.added, found.removed, found.changed, found.unchanged, found.changed_bytes, found.changed_labels)
    assert counts == (1, 2, 2, 2, 0, 2)
    assert found.label_counts_a == {"au revoir": 1, "bonjour": 1, "chat": 1, "chien": 1, "oui": 2}
    assert found.sample_rows("changed", 5) == [
        DiffRow("cat", 1, 3, "chat", "chatte"),
        DiffRow("yes", 4, 1, "oui", "si"),  # the first "yes oui" of A is B's row 4, unchanged
    ]
    assert found.sample_rows("removed", 5) == [
        DiffRow("dog", 2, None, "chien", None),
        DiffRow("bye", 5, None, "au revoir", None),
    ]
    assert found.sample_rows("added", 5) == [DiffRow("new", None, 0, None, "nouveau")]
    assert found.files == FileCounts()


def test_a_row_moved_is_not_a_change(local_store: Store, tmp_path: Path) -> None:
    rows = [(f"source {i}", f"target {i % 3}") for i in range(20)]
    a = text_version(local_store, tmp_path / "a", "pairs", rows)
    b = text_version(local_store, tmp_path / "b", "pairs", rows[::-1])
    found = diff_versions(local_store, a, b)
    assert (found.added, found.removed, found.changed, found.unchanged) == (0, 0, 0, 20)


def test_a_kind_and_column_change_is_said_and_rows_are_matched_by_their_first_column(
    local_store: Store, tmp_path: Path
) -> None:
    a = image_version(local_store, tmp_path / "a", "mixed", [("a.png", "cat"), ("b.png", "dog")], CONTENTS_A)
    b = text_version(local_store, tmp_path / "b", "mixed", [("a.png", "cat"), ("b.png", "bird"), ("z", "new")])
    found = diff_versions(local_store, a, b)
    assert (found.kind_a, found.kind_b) == ("image", "text")
    assert (found.columns_a, found.columns_b) == (["file", "label"], ["source", "target"])
    assert (found.added, found.removed, found.changed, found.unchanged, found.changed_bytes) == (1, 0, 1, 1, 0)
    assert any("kinds differ (image, text)" in note and "no file's bytes" in note for note in found.notes)
    document = found.to_json()
    assert document["kind_changed"] is True
    assert (document["columns_added"], document["columns_removed"]) == (["source", "target"], ["file", "label"])


def test_rows_with_another_number_of_columns_are_changed(local_store: Store, tmp_path: Path) -> None:
    a = text_version(local_store, tmp_path / "a", "wide", [("x", "1"), ("y", "2"), ("w", "0")])
    b = text_version(local_store, tmp_path / "b", "wide", [("x", "1", "extra"), ("y", "2", "extra"), ("v", "9", "")])
    found = diff_versions(local_store, a, b)
    assert (found.columns_a, found.columns_b) == (["source", "target"], ["column1", "column2", "column3"])
    assert (found.added, found.removed, found.changed, found.unchanged, found.changed_labels) == (1, 1, 2, 0, 2)
    assert found.label_counts_a == {"0": 1, "1": 1, "2": 1} and found.label_counts_b == {"1": 1, "2": 1, "9": 1}
    assert any("columns differ" in note for note in found.notes)


def imported(store: Store, values: list[int]) -> str:
    """A table version of columns ``x`` and ``y`` holding ``values``; its ref."""
    batch = pa.record_batch({"x": pa.array(values, pa.int64()), "y": pa.array([str(v) for v in values])})
    return import_batches([batch], batch.schema, "tab", store=store).ref


def test_table_versions_are_compared_by_shard(local_store: Store) -> None:
    first, same, other = (imported(local_store, values) for values in ([1, 2, 3], [1, 2, 3], [1, 2, 3, 4]))
    alike = diff_versions(local_store, first, same)
    assert alike.compared == "shards" and (alike.added, alike.removed, alike.changed, alike.unchanged) == (0, 0, 0, 3)
    found = diff_versions(local_store, first, other)
    assert (found.added, found.removed, found.changed, found.unchanged) == (4, 3, 0, 0)
    assert found.label_counts_a == found.label_counts_b == {}
    assert found.sample_rows("added", 5) == []
    [note] = found.notes
    assert "tab@1 (a table version: its rows are only in its shards) and tab@3" in note
    assert "compared by shard" in note
    assert found.to_json()["compared"] == "shards"


def test_a_public_dataset_without_a_list_is_compared_by_what_its_manifest_offers(
    local_store: Store, tmp_path: Path
) -> None:
    made = make_mnist(tmp_path / "files", train=40, test=10, seed=3)
    with registered(with_checksums_of("mnist", made.folder)):
        installed = public.install("mnist", store=local_store, source=made.folder).manifest
    itself = diff_versions(local_store, "mnist", installed.ref)  # a plain name falls back to the public area
    assert (itself.a_ref, itself.compared) == ("public/mnist@1", "shards")
    assert (itself.added, itself.removed, itself.changed, itself.unchanged) == (0, 0, 0, 50)
    mine = image_version(local_store, tmp_path / "mine", "digits", [("a.png", "7")], CONTENTS_A)
    found = diff_versions(local_store, installed.ref, mine)
    assert (found.added, found.removed, found.unchanged) == (1, 50, 0)
    assert found.notes[0] == "the columns differ: image, label in public/mnist@1; file, label in digits@1"
    assert "public/mnist@1 (a public dataset: its rows are only in its shards) has no list" in found.notes[1]
    assert found.to_json()["a"]["splits"] == {"train": 40, "test": 10}


def test_a_damaged_list_is_an_integrity_error(local_store: Store, tmp_path: Path) -> None:
    a = text_version(local_store, tmp_path / "a", "pairs", [("a", "1")])
    b = text_version(local_store, tmp_path / "b", "pairs", [("a", "2")])
    path = layout.list_path(catalog.resolve(local_store, b))
    local_store.write(path, b"a\t3\n")
    with pytest.raises(IntegrityError, match=r"the list of pairs@2 .* does not match its manifest's sha256"):
        diff_versions(local_store, a, b)


def test_unknown_versions_and_wrong_arguments_are_named(local_store: Store, tmp_path: Path) -> None:
    a = text_version(local_store, tmp_path / "a", "pairs", [("a", "1")])
    with pytest.raises(DatasetNotFoundError, match="pairs has no version 9"):
        diff_versions(local_store, a, "pairs@9")
    found = diff_versions(local_store, a, a)
    with pytest.raises(ValueError, match="category"):
        found.sample_rows("moved", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        found.sample_rows("added", -1)


# ------------------------------------------------------------------------------------ against a reference


def reference(first: list[tuple[str, object]], second: list[tuple[str, object]]) -> dict[str, list[tuple]]:
    """The rules written out plainly: per key, identical rows matched in list order first, then the rest paired in
    list order; rows are ``(key, value)``."""
    at_a, at_b = defaultdict(list), defaultdict(list)
    for row, (key, value) in enumerate(first):
        at_a[key].append((row, value))
    for row, (key, value) in enumerate(second):
        at_b[key].append((row, value))
    found: dict[str, list[tuple]] = {"unchanged": [], "changed": [], "removed": [], "added": []}
    for key in at_a.keys() | at_b.keys():
        left_b = list(at_b[key])
        left_a = []
        for row, value in at_a[key]:
            match = next((i for i, (_, other) in enumerate(left_b) if other == value), None)
            if match is None:
                left_a.append((row, value))
            else:
                found["unchanged"].append((row, left_b.pop(match)[0]))
        for (row_a, _), (row_b, _) in zip(left_a, left_b, strict=False):
            found["changed"].append((row_a, row_b))
        found["removed"] += [(row, None) for row, _ in left_a[len(left_b) :]]
        found["added"] += [(None, row) for row, _ in left_b[len(left_a) :]]
    return {category: sorted(rows, key=lambda pair: pair[0] if pair[0] is not None else pair[1])
            for category, rows in found.items()}  # fmt: skip


def label_of(value: object) -> object:
    return value[0] if isinstance(value, tuple) else value


def bytes_of(value: object) -> object:
    return value[1] if isinstance(value, tuple) else None


def check_against_reference(store: Store, a: str, b: str, first: list, second: list) -> None:
    """Rows are ``(key, value)``, a value a label (text) or ``(label, bytes)`` (images)."""
    expected = reference(first, second)
    found = diff_versions(store, a, b)
    counts = (found.added, found.removed, found.changed, found.unchanged)
    assert counts == tuple(len(expected[c]) for c in ("added", "removed", "changed", "unchanged"))
    rows = {c: [(r.row_a, r.row_b) for r in found.sample_rows(c, 10**6)] for c in ("added", "removed", "changed")}
    assert rows == {c: expected[c] for c in ("added", "removed", "changed")}
    pairs = [(first[row_a][1], second[row_b][1]) for row_a, row_b in expected["changed"]]
    assert found.changed_labels == sum(label_of(x) != label_of(y) for x, y in pairs)
    assert found.changed_bytes == sum(bytes_of(x) != bytes_of(y) for x, y in pairs)
    for row in found.sample_rows("changed", 10**6):
        assert row.key == first[row.row_a][0] == second[row.row_b][0]
        assert (row.label_a, row.label_b) == (label_of(first[row.row_a][1]), label_of(second[row.row_b][1]))
        assert row.bytes_changed == (bytes_of(first[row.row_a][1]) != bytes_of(second[row.row_b][1]))


keys = st.sampled_from(["a", "b", "c", "é x", 'say "hi"', "carriage\rreturn"])
labels = st.sampled_from(["0", "1", "two", '"2"'])


@st.composite
def text_lists(draw: st.DrawFn) -> list[tuple[str, str]]:
    if draw(st.booleans()):  # every key once: the common case, matched through the keys alone
        chosen = draw(st.lists(st.sampled_from([f"k{i}" for i in range(12)]), unique=True, min_size=1, max_size=12))
        return [(key, draw(labels)) for key in chosen]
    return draw(st.lists(st.tuples(keys, labels), min_size=1, max_size=14))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=text_lists(), second=text_lists())
def test_drawn_text_pairs_match_the_reference(
    tmp_path_factory: pytest.TempPathFactory, first: list, second: list
) -> None:
    folder = tmp_path_factory.mktemp("drawn")
    store = open_store(str(folder / "store"))
    a = text_version(store, folder / "a", "t", first)
    b = text_version(store, folder / "b", "t", second)
    check_against_reference(store, a, b, first, second)


@st.composite
def image_lists(
    draw: st.DrawFn, paths: Sequence[str] = tuple(f"{letter}.png" for letter in "abcdef"), max_size: int = 12
) -> tuple[list[tuple[str, str]], dict[str, bytes]]:
    """An image list drawn over ``paths`` (each listed once, or rows of up to ``max_size`` that may repeat them)
    and each path's bytes."""
    if draw(st.booleans()):
        rows = [(path, draw(labels)) for path in draw(st.lists(st.sampled_from(paths), unique=True, min_size=1))]
    else:
        rows = draw(st.lists(st.tuples(st.sampled_from(paths), labels), min_size=1, max_size=max_size))
    contents = {path: draw(st.sampled_from([b"one", b"two"])) + path.encode() for path, _ in rows}
    return rows, contents


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=image_lists(), second=image_lists())
def test_drawn_image_pairs_match_the_reference(
    tmp_path_factory: pytest.TempPathFactory, first: tuple, second: tuple
) -> None:
    folder = tmp_path_factory.mktemp("drawn")
    store = open_store(str(folder / "store"))
    a = image_version(store, folder / "a", "i", *first)
    b = image_version(store, folder / "b", "i", *second)
    # A row's value: its label and its file's bytes in that version.
    as_rows = [[(path, (label, contents[path])) for path, label in rows] for rows, contents in (first, second)]
    check_against_reference(store, a, b, *as_rows)


# ------------------------------------------------------------------------------------ what is read


@pytest.mark.s3
def test_only_manifests_pack_records_and_lists_are_read(
    s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, tmp_path: Path
) -> None:
    url = f"s3://{s3_bucket}/diffs"
    keys_ = {"key": S3_TEST_KEY, "secret": S3_TEST_SECRET}
    direct = open_store(url, endpoint_url=s3_server.endpoint_url, **keys_)
    pairs = [
        (image_version(direct, tmp_path / f"{n}a", f"images{n}", IMAGES_A, CONTENTS_A, how),
         image_version(direct, tmp_path / f"{n}b", f"images{n}", IMAGES_B, CONTENTS_B, how))
        for n, how in enumerate(LAYOUTS)
    ]  # fmt: skip
    pairs.append(
        (
            text_version(direct, tmp_path / "ta", "text", [("a", "1")]),
            text_version(direct, tmp_path / "tb", "text", [("a", "2")]),
        )
    )
    pairs.append((imported(direct, [1]), imported(direct, [1, 2])))
    proxy = fault_proxy(s3_server.endpoint_url)
    far = open_store(url, endpoint_url=proxy.endpoint_url, **keys_)
    for a, b in pairs:
        found = diff_versions(far, a, b)
        assert found.unchanged + found.changed + found.added == found.rows_b
    asked = [(r.method, unquote(r.target).split("?")[0]) for r in proxy.requests]
    read = [path for method, path in asked if method == "GET" and "/diffs/" in path]
    assert read, "no read went through the proxy"
    assert all("/versions/" in path or "/lists/" in path for path in read), read
    assert not [path for path in read if "/objects/" in path or "/packs/" in path]
    lists = [path for path in read if "/lists/" in path]
    assert len(lists) == len(set(lists)) == 8  # each pair's two lists, once each (the table versions have none)
    assert {method for method, _ in asked} <= {"GET", "HEAD"}
