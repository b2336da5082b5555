"""An indexed version's tree answered from its indexes (datasets/tree_index.py) is the tree built from its whole list
(datasets/tree.py), path for path, folder for folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, file_parts_writer, layout, upload
from datamount.datasets.manifest import Manifest
from datamount.datasets.pack import pack
from datamount.datasets.rows.listed import list_rows
from datamount.datasets.tree import FOLDER, Content, Node, Tree
from datamount.datasets.tree_index import IndexedTree
from datamount.storage import Store, open_store

#: Path components: folder names and file names that sort around "/" ("-" and "0" sort either side of it).
FOLDERS = st.sampled_from(["a", "a-b", "a0", "b", "ä", "z z"])
FILES = st.sampled_from(["x.jpg", "a.jpg", "a-b.jpg", "0.png", "é.jpg"])
PATHS = st.lists(FOLDERS, max_size=3).flatmap(lambda folders: FILES.map(lambda name: "/".join([*folders, name])))


def write_list(folder: Path, paths: list[str]) -> Path:
    for number, path in enumerate(dict.fromkeys(paths)):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(f"{number}:{path}".encode())
    list_file = folder / "train.list"
    list_file.write_text("".join(f"{path}\t{n % 3}\n" for n, path in enumerate(paths)), encoding="utf-8")
    return list_file


def both_trees(store: Store, manifest: Manifest, *, image_shards: bool) -> tuple[Tree, IndexedTree]:
    lines = list_rows(store.read(layout.list_path(manifest)))
    return Tree(manifest, lines, image_shards=image_shards), IndexedTree(manifest, image_shards=image_shards)


def same_trees(built: Tree, indexed: IndexedTree) -> None:
    folders = [path for path, node in built.nodes.items() if node.is_folder]
    for path, node in built.nodes.items():
        inner = path[1:]
        assert indexed.content_at(inner) == (FOLDER if node.is_folder else node.content), path
        assert indexed.content_at(inner + "-missing") is None
    for path in folders:
        node = built.nodes[path]
        expected = sorted((name, child.content) for name, child in node.children.items())
        listed = list(indexed.children(path[1:]))
        assert sorted(listed) == expected, path
        # In the index's order: by path, a folder's name as if it ended in "/".
        keys = [name + ("/" if content is None else "") for name, content in listed]
        assert keys == sorted(keys), path
        files = sorted((key[1:], built.nodes[key].content) for key in under(built, node))
        assert sorted(indexed.walk(path[1:])) == files, path


def under(built: Tree, folder: Node) -> list[str]:
    prefix = folder.path.rstrip("/") + "/"
    return [key for key, node in built.nodes.items() if key.startswith(prefix) and not node.is_folder]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(PATHS, min_size=1, max_size=40), packed=st.booleans())
def test_the_indexed_tree_is_the_tree_of_the_whole_list(
    tmp_path_factory: pytest.TempPathFactory, paths: list[str], packed: bool
) -> None:
    root = tmp_path_factory.mktemp("tree")
    store = open_store(str(root / "store"))
    names = {path.rsplit("/", 1)[0] for path in paths if "/" in path}
    paths = [path for path in paths if path not in names]  # a file where a folder is: the tree refuses such a list
    list_file = write_list(root / "src", paths or ["x.jpg"])
    upload(list_file, "d", store=store, packed=packed)
    manifest = catalog.resolve(store, "d")
    for image_shards in (False, True):
        same_trees(*both_trees(store, manifest, image_shards=image_shards))


def test_a_folder_is_listed_reading_its_range_and_one_search_per_subfolder(
    local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part of the entries but those of one folder is removed: the folder is still listed and walked."""
    monkeypatch.setattr(file_parts_writer, "ROWS_PER_PART", 16)
    paths = [f"c{c:02d}/f{f:03d}.jpg" for c in range(12) for f in range(40)]
    upload(write_list(tmp_path / "src", paths), "d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    indexed = IndexedTree(manifest)
    folder = layout.dataset_folder("d")
    kept = [part for part in indexed.files.parts if part.first.startswith("c05/")]
    kept.insert(0, indexed.files.parts[indexed.files.parts.index(kept[0]) - 1])  # the part "c05/" sorts into
    for part in indexed.files.parts:
        if part not in kept:
            local_store.remove(f"{folder}/{part.path}")
    assert [name for name, _ in indexed.children("c05")] == [f"f{f:03d}.jpg" for f in range(40)]
    assert len(list(indexed.walk("c05"))) == 40
    content = indexed.content_at("c05/f007.jpg")
    assert isinstance(content, Content) and content.kind == "object" and content.row == 5 * 40 + 7


def test_a_version_packed_after_its_upload_shows_its_objects(local_store: Store, tmp_path: Path) -> None:
    upload(write_list(tmp_path / "src", ["a/x.jpg", "b/x.jpg", "a/x.jpg"]), "d", store=local_store)
    pack("d", store=local_store)
    manifest = catalog.resolve(local_store, "d")
    built, indexed = both_trees(local_store, manifest, image_shards=True)
    same_trees(built, indexed)
    assert [name for name, _ in indexed.children("")] == ["a", "b", "shards", "train.list"]
