"""``datamount://`` on an indexed version (format 7): one path, one folder and a walk answered from the version's
indexes, with no list read and no tree built; the same answers as the tree of a version from before format 7."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, upload
from datamount.storage import Store
from datamount.urlfs import DatamountFileSystem
from tests.manifests import write_format_6
from tests.urlfs.conftest import ON_STORES
from tests.urlfs.versions import NAMES, Versions


def no_tree_built(fs: DatamountFileSystem) -> bool:
    return all(version._tree is None for version in fs._opened.values())


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_paths_folders_and_walks_are_answered_without_the_list(versions: Versions, name: str) -> None:
    """The version's list is removed from the store: everything but the list itself is still answered."""
    manifest = catalog.resolve(versions.store, name)
    assert manifest.indexed
    versions.store.remove(layout.list_path(manifest))
    fs = versions.filesystem()
    root = f"_/{name}@1"
    data = (versions.source.parent / "data" / "img0003.png").read_bytes()
    assert fs.info(f"{root}/data/img0003.png")["size"] == len(data)
    assert fs.cat_file(f"{root}/data/img0003.png") == data
    with fs.open(f"{root}/data/img0003.png") as opened:
        assert opened.read() == data
    assert fs.info(f"{root}/data")["type"] == "directory"
    listed = fs.ls(f"{root}/data", detail=False)
    assert f"{root}/data/img0003.png" in listed and listed == sorted(listed)
    found = fs.find(root)
    assert f"{root}/data/img0003.png" in found and f"{root}/train.list" in found
    assert fs.du(f"{root}/data") == sum(fs.info(path)["size"] for path in listed)
    assert no_tree_built(fs)
    with pytest.raises(FileNotFoundError, match=r"lists/[0-9a-f]{64}\.list: not found"):
        fs.cat_file(f"{root}/train.list")


#: What a first answer from the indexes never needs: the first lookup of a folder imported pandas (through an Arrow
#: scalar made from a Python int), 0.3 s of the mount's first ``stat`` and of a fresh process's first ``ls``.
NOT_FOR_A_LOOKUP = ("pandas", "pyarrow.compute")


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_a_first_lookup_in_a_fresh_process_imports_no_more_than_it_reads(versions: Versions, name: str) -> None:
    code = (
        "import json, sys\n"
        "from datamount.urlfs import DatamountFileSystem\n"
        f"fs = DatamountFileSystem(**json.loads({json.dumps(versions.options())!r}), skip_instance_cache=True)\n"
        f"fs.info('_/{name}@1/data/img0003.png')\n"
        f"print(fs.ls('_/{name}@1/data', detail=False)[:1])\n"
        f"print(sorted(set({NOT_FOR_A_LOOKUP!r}) & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"['_/{name}@1/data/img0000.png']", "[]"]


@ON_STORES
@pytest.mark.parametrize("name", NAMES)
def test_an_indexed_version_answers_as_the_tree_of_the_same_version_before_format_7(
    versions: Versions, name: str
) -> None:
    old = write_format_6(versions.store, name)
    assert not old.indexed and old.version == 2
    fs = versions.filesystem()
    new_root, old_root = f"_/{name}@1", f"_/{name}@2"

    def same(new: object, before: object) -> None:
        assert repr(new).replace(new_root, "ROOT").replace("'version': 1", "V") == repr(before).replace(
            old_root, "ROOT"
        ).replace("'version': 2", "V")

    for withdirs in (False, True):
        for maxdepth in (None, 1, 2):
            same(
                fs.find(new_root, withdirs=withdirs, maxdepth=maxdepth),
                fs.find(old_root, withdirs=withdirs, maxdepth=maxdepth),
            )
            same(
                fs.find(new_root, withdirs=withdirs, maxdepth=maxdepth, detail=True),
                fs.find(old_root, withdirs=withdirs, maxdepth=maxdepth, detail=True),
            )
            same(
                fs.du(new_root, total=False, withdirs=withdirs, maxdepth=maxdepth),
                fs.du(old_root, total=False, withdirs=withdirs, maxdepth=maxdepth),
            )
    for path in fs.find(old_root, withdirs=True):
        inner = path.removeprefix(old_root)
        same(sorted(fs.ls(new_root + inner, detail=False)), sorted(fs.ls(path, detail=False)))
        same(fs.info(new_root + inner), fs.info(path))
    for missing in ("/data/img9999.png", "/data/img0003", "/dat", "/shards/x.parquet"):
        assert not fs.exists(new_root + missing) and not fs.exists(old_root + missing)


def test_a_folder_is_listed_sorted_by_name_as_its_names_are_read(local_store: Store, tmp_path: Path) -> None:
    """``ls`` of an indexed version's folder: its names sorted by name, though the index gives them by path (the
    folder ``a`` after ``a-b.jpg`` and ``a.jpg``, whose paths sort before ``a/``), with the list and the shards."""
    paths = ["a/x.jpg", "a-b.jpg", "a.jpg", "a0/y.jpg", "b/c/z.jpg"]
    for number, path in enumerate(paths):
        (tmp_path / "src" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / path).write_bytes(bytes([number]) * (number + 1))
    (tmp_path / "src" / "train.list").write_text("".join(f"{path}\t0\n" for path in paths), encoding="utf-8")
    upload(tmp_path / "src" / "train.list", "d", store=local_store, packed=True)
    fs = DatamountFileSystem(store=local_store.url, skip_instance_cache=True)
    root = "_/d@1"
    names = ["a", "a-b.jpg", "a.jpg", "a0", "b", "shards", "train.list"]
    assert fs.ls(root, detail=False) == [f"{root}/{name}" for name in names]
    detailed = fs.ls(root, detail=True)
    assert [(info["name"], info["type"], info["size"]) for info in detailed] == [
        (
            f"{root}/{name}",
            "directory" if name in ("a", "a0", "b", "shards") else "file",
            fs.info(f"{root}/{name}")["size"],
        )
        for name in names
    ]
    assert [info["size"] for info in detailed[1:3]] == [2, 3]
    assert no_tree_built(fs)
