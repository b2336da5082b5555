"""ImageNet from ILSVRC2012-shaped archives (streamed, a tar of per-class tars) or extracted trees: rows, class
table and samples, checked against what was generated."""

from __future__ import annotations

import random
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.datasets import catalog, imagenet, public
from datamount.datasets.errors import (
    DatasetNotFoundError,
    MissingDependencyError,
    SourceFormatError,
    SourceNotFoundError,
)
from datamount.datasets.rows import ShardRows
from datamount.storage import IntegrityError, Store
from tests.datasets.public_files import (
    ImagenetSource,
    extract_imagenet_tree,
    make_imagenet,
    md5,
    registered,
    tar_bytes,
    tiny_jpeg,
)


class PhaseRecorder:
    """A Progress that keeps the phases it was told about."""

    def __init__(self) -> None:
        self.phases: list[str] = []

    def start(self, phase: str, *, items: int, size: int) -> None:
        self.phases.append(phase)

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        pass

    def finish(self) -> None:
        pass


@pytest.fixture
def archives(tmp_path: Path) -> Iterator[ImagenetSource]:
    pytest.importorskip("scipy", reason="scipy (the imagenet extra) writes and reads the devkit's meta.mat")
    made = make_imagenet(tmp_path / "ilsvrc", classes=4, per_class=3, val=9, seed=11)
    with registered(public.get("imagenet").with_checksums(made.checksums)):
        yield made


def class_indexes(wnids: list[str]) -> dict[str, int]:
    return {wnid: index for index, wnid in enumerate(sorted(wnids))}


def test_archives_with_the_devkit(archives: ImagenetSource, local_store: Store) -> None:
    result = public.install("imagenet", store=local_store, source=archives.folder, row_group_bytes=1000)
    assert result.splits == {"train": 12, "val": 9}
    manifest = catalog.resolve(local_store, "imagenet")
    rows = list(ShardRows(local_store, manifest).rows(0, manifest.rows))
    expected = [(data, wnid) for wnid, _, data in archives.train]
    expected += [(data, wnid) for _, wnid, data in archives.val]
    assert rows == expected

    indexes = class_indexes(list(archives.classes))
    assert [(entry.index, entry.wnid, entry.names) for entry in imagenet.classes(store=local_store)] == [
        (indexes[wnid], wnid, tuple(words.split(", "))) for wnid, words in sorted(archives.classes.items())
    ]
    assert imagenet.class_index(store=local_store) == indexes
    assert list(imagenet.train(store=local_store)()) == [(data, indexes[wnid]) for wnid, _, data in archives.train]
    assert list(imagenet.val(store=local_store)()) == [(data, indexes[wnid]) for _, wnid, data in archives.val]
    assert len(imagenet.val(store=local_store)) == 9


def test_extracted_trees_without_a_devkit(tmp_path: Path, local_store: Store) -> None:
    made = make_imagenet(tmp_path / "made", classes=3, per_class=2, val=5, devkit=False)
    tree = tmp_path / "tree"
    extract_imagenet_tree(made, tree)
    public.install("imagenet", store=local_store, source=tree)
    indexes = class_indexes(list(made.classes))
    train = sorted((wnid, name, data) for wnid, name, data in made.train)
    val = sorted((wnid, name, data) for name, wnid, data in made.val)
    assert list(imagenet.train(store=local_store)()) == [(data, indexes[wnid]) for wnid, _, data in train]
    assert list(imagenet.val(store=local_store)()) == [(data, indexes[wnid]) for wnid, _, data in val]
    assert all(entry.names == () for entry in imagenet.classes(store=local_store))


def test_a_flat_validation_folder_is_labelled_by_the_devkit(archives: ImagenetSource, local_store: Store) -> None:
    (archives.folder / "ILSVRC2012_img_train.tar").unlink()
    (archives.folder / "ILSVRC2012_img_val.tar").unlink()
    (archives.folder / "val").mkdir()
    for name, _, data in archives.val:
        (archives.folder / "val" / name).write_bytes(data)
    result = public.install("imagenet", store=local_store, source=archives.folder)
    assert result.splits == {"val": 9}
    indexes = class_indexes(list(archives.classes))
    assert list(imagenet.val(store=local_store)()) == [(data, indexes[wnid]) for _, wnid, data in archives.val]
    with pytest.raises(DatasetNotFoundError, match="public/imagenet@1 has no 'train' split"):
        imagenet.train(store=local_store)


def test_an_extracted_devkit_folder_works(archives: ImagenetSource, local_store: Store) -> None:
    shutil.unpack_archive(archives.folder / "ILSVRC2012_devkit_t12.tar.gz", archives.folder)
    (archives.folder / "ILSVRC2012_devkit_t12.tar.gz").unlink()
    assert public.install("imagenet", store=local_store, source=archives.folder).splits == {"train": 12, "val": 9}


def test_validation_images_without_labels_stop_before_anything_is_read(tmp_path: Path, local_store: Store) -> None:
    made = make_imagenet(tmp_path / "ilsvrc", devkit=False)
    recorder = PhaseRecorder()
    with pytest.raises(SourceNotFoundError, match=r"ILSVRC2012_img_val\.tar has no labels of its own: put ILSVRC"):
        public.install("imagenet", store=local_store, source=made.folder, progress=recorder)
    assert "train" not in recorder.phases  # the training archive was not read first
    assert catalog.dataset_names(local_store) == []


def test_an_archive_that_is_not_the_published_one_is_refused(tmp_path: Path, local_store: Store) -> None:
    pytest.importorskip("scipy")
    made = make_imagenet(tmp_path / "ilsvrc")  # its files cannot have the published md5s
    with pytest.raises(IntegrityError, match=r"ILSVRC2012_devkit_t12\.tar\.gz: its md5 is .*, the published file's is"):
        public.install("imagenet", store=local_store, source=made.folder)
    assert catalog.dataset_names(local_store) == []


def test_the_streamed_training_archive_is_checked_at_the_end(archives: ImagenetSource, local_store: Store) -> None:
    spec = public.get("imagenet").with_checksums({**archives.checksums, "ILSVRC2012_img_train.tar": "0" * 32})
    with (
        registered(spec),
        pytest.raises(IntegrityError, match=r"ILSVRC2012_img_train\.tar: its md5 is [0-9a-f]{32}, the published file"),
    ):
        public.install("imagenet", store=local_store, source=archives.folder, shard_bytes=1, row_group_bytes=1)
    assert catalog.dataset_names(local_store) == [] and local_store.list("public") == {}


def test_a_damaged_class_archive_is_named(archives: ImagenetSource, local_store: Store) -> None:
    train = archives.folder / "ILSVRC2012_img_train.tar"
    train.write_bytes(tar_bytes([("n01440764.tar", b"not a tar archive at all" * 40)]))
    spec = public.get("imagenet").with_checksums({**archives.checksums, "ILSVRC2012_img_train.tar": md5(train)})
    with registered(spec), pytest.raises(SourceFormatError, match=r"n01440764\.tar is not a readable tar archive"):
        public.install("imagenet", store=local_store, source=archives.folder)
    assert catalog.dataset_names(local_store) == []


def test_a_class_the_devkit_does_not_know_is_named(archives: ImagenetSource, local_store: Store) -> None:
    (archives.folder / "ILSVRC2012_img_train.tar").unlink()
    (archives.folder / "ILSVRC2012_img_val.tar").unlink()
    (archives.folder / "train" / "n99999999").mkdir(parents=True)
    (archives.folder / "train" / "n99999999" / "x.JPEG").write_bytes(tiny_jpeg(random.Random(1)))
    with pytest.raises(SourceFormatError, match="n99999999 is not one of the devkit's 4 classes"):
        public.install("imagenet", store=local_store, source=archives.folder)


def test_a_folder_with_nothing_of_imagenet_is_named(tmp_path: Path, local_store: Store) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceNotFoundError, match=r"holds neither ILSVRC2012_img_train\.tar nor"):
        public.install("imagenet", store=local_store, source=tmp_path / "empty")


def test_without_scipy_the_devkit_asks_for_the_extra(
    archives: ImagenetSource, local_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # as if scipy were not installed
    with pytest.raises(MissingDependencyError, match=r"needs scipy: pip install 'datamount\[imagenet\]'"):
        public.install("imagenet", store=local_store, source=archives.folder)
