"""A version without a list (a public dataset: rows only in shards) shown as files: ``export`` writes each public
dataset in its form, byte for byte what was generated; ``reader``, ``export`` and ``cp`` agree on what it holds; a
label or source name that would leave its folder is refused; a dataset of no declared form gets the default one."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from datamount.datasets import catalog, copy_version, export, locks, public
from datamount.datasets.public import PublicDataset, PublicWriter
from datamount.datasets.row_folders import plan_row_files
from datamount.readers import reader
from datamount.storage import Store, UnsafePathError, open_store
from tests.datasets.public_files import install_generated, shown

PUBLIC = ["mnist", "imdb", "imagenet", "wmt14"]


def tree_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, as :func:`shown` gives it (an MNIST PNG's pixels)."""
    found = {}
    for parent, _, files in os.walk(folder):
        for name in files:
            path = Path(parent, name)
            relative = path.relative_to(folder).as_posix()
            found[relative] = shown(relative, path.read_bytes())
    return found


def rows_as_files(name: str, store: Store) -> Counter[tuple[str, bytes]]:
    """``(folder, content)`` of each file the rows of ``reader(name, split=...)`` make, computed here from the rows:
    a row per file under ``split/label/`` (the row's number in its split naming it, where it is named by number),
    or, for WMT14, each split's pairs as TAB-separated lines in ``split/split``."""
    made: Counter[tuple[str, bytes]] = Counter()
    for split in catalog.resolve(store, name).splits:
        rows = list(reader(name, store, split=split)())
        if name == "wmt14":
            made[(split, "".join(f"{source}\t{target}\n" for source, target in rows).encode())] += 1
            continue
        for value, label in rows:
            made[(f"{split}/{label}", value.encode() if isinstance(value, str) else value)] += 1
    return made


def files_by_folder(files: dict[str, bytes]) -> Counter[tuple[str, bytes]]:
    """The row files of a shown tree as ``(folder, content)`` (the files kept with the dataset left out)."""
    return Counter((path.rpartition("/")[0], data) for path, data in files.items() if "/" in path)


@pytest.mark.parametrize("name", PUBLIC)
def test_export_writes_each_public_dataset_in_its_form(name: str, local_store: Store, tmp_path: Path) -> None:
    if name == "imagenet":
        pytest.importorskip("scipy", reason="scipy (the imagenet extra) writes and reads the devkit's meta.mat")
    expected = install_generated(name, tmp_path / "source", local_store)
    result = export(name, tmp_path / "out", store=local_store)
    assert tree_of(tmp_path / "out") == expected
    assert result.written == len(expected) and result.list_file is None
    assert export(name, tmp_path / "out", store=local_store).unchanged == len(expected)  # a second export resumes


@pytest.mark.parametrize("name", PUBLIC)
def test_reader_export_and_cp_agree_on_a_version_without_a_list(name: str, local_store: Store, tmp_path: Path) -> None:
    if name == "imagenet":
        pytest.importorskip("scipy", reason="scipy (the imagenet extra) writes and reads the devkit's meta.mat")
    install_generated(name, tmp_path / "source", local_store)
    export(name, tmp_path / "out", store=local_store)
    exported = tree_of(tmp_path / "out")
    assert files_by_folder(exported) == rows_as_files(name, local_store)
    if name in ("mnist", "imdb"):  # named by their row's number in its split, in reader's order
        for split in catalog.resolve(local_store, name).splits:
            rows = list(reader(name, local_store, split=split)())
            digits = len(str(len(rows) - 1))
            suffix = ".png" if name == "mnist" else ".txt"
            for number, (value, label) in enumerate(rows):
                data = exported[f"{split}/{label}/{number:0{digits}d}{suffix}"]
                assert data == (value.encode() if isinstance(value, str) else value)

    copied = open_store(tmp_path / "other")
    copy_version(f"public/{name}", source=local_store, target=copied)
    export(name, tmp_path / "copied", store=copied)
    assert tree_of(tmp_path / "copied") == exported
    assert plan_row_files(copied, catalog.resolve(copied, name)) == plan_row_files(
        local_store, catalog.resolve(local_store, name)
    )


def _spec(name: str, kind: str, columns: tuple[str, ...]) -> PublicDataset:
    def build(*_: object) -> None:
        raise AssertionError("written by the test")

    return PublicDataset(name, name, kind, columns, ("train", "test"), (), build, "")


def test_a_dataset_of_no_declared_form_shows_the_default_one(local_store: Store, tmp_path: Path) -> None:
    images = PublicWriter(local_store, _spec("shapes", "image", ("image", "label")))
    for split, count in (("train", 11), ("test", 2)):
        images.start_split(split)
        for number in range(count):
            images.add(bytes([number]) * 5, f"c{number % 2}", path=f"x/{number}.raw")
    with locks.writing(local_store, "public/shapes"):  # as an install holds it
        images.commit()
    export("shapes", tmp_path / "images", store=local_store)
    assert tree_of(tmp_path / "images") == {
        **{f"train/c{n % 2}/{n:02d}": bytes([n]) * 5 for n in range(11)},
        **{f"test/c{n % 2}/{n}": bytes([n]) * 5 for n in range(2)},
    }

    texts = PublicWriter(local_store, _spec("pairs", "text", ("source", "target")))
    for split in ("train", "test"):
        texts.start_split(split)
        texts.add(f"{split} one", "un")
    with locks.writing(local_store, "public/pairs"):
        texts.commit()
    export("pairs", tmp_path / "texts", store=local_store)
    assert tree_of(tmp_path / "texts") == {"train/0.txt": b"train one\tun\n", "test/0.txt": b"test one\tun\n"}


@pytest.mark.parametrize("label", ["../up", "..", "a/b"])
def test_a_label_that_would_leave_its_folder_is_refused(label: str, local_store: Store, tmp_path: Path) -> None:
    writer = PublicWriter(local_store, _spec("odd", "image", ("image", "label")))
    writer.start_split("train")
    writer.add(b"fine", "ok", path="a.jpg")
    writer.add(b"bad", label, path="b.jpg")
    writer.start_split("test")
    writer.add(b"fine", "ok", path="c.jpg")
    with locks.writing(local_store, "public/odd"):
        writer.commit()
    with pytest.raises(UnsafePathError, match=r"public/odd@1, row 1: .* cannot name a file or folder"):
        export("odd", tmp_path / "out", store=local_store)
    assert not (tmp_path / "up").exists() and not (tmp_path / "out" / "b.jpg").exists()


def test_an_exported_imagenet_installs_again_from_its_folder(local_store: Store, tmp_path: Path) -> None:
    """ImageNet's form is the extracted class-folder tree ``install imagenet --from`` takes: the same rows again."""
    pytest.importorskip("scipy", reason="scipy (the imagenet extra) writes and reads the devkit's meta.mat")
    install_generated("imagenet", tmp_path / "source", local_store)
    export("imagenet", tmp_path / "out", store=local_store)
    again = open_store(tmp_path / "again")
    public.install("imagenet", store=again, source=tmp_path / "out")
    for split in ("train", "val"):  # an extracted tree's rows come sorted by class and file name
        installed, exported = reader("imagenet", again, split=split), reader("imagenet", local_store, split=split)
        assert Counter(installed()) == Counter(exported())
