"""ImageNet (ILSVRC2012 classification): the public dataset ``imagenet``, built from files the user has, and
reader creators.

The dataset holds rows ``(image, label)``: ``image`` a JPEG file's exact bytes, ``label`` its class's WordNet id
(``n01440764``), in the splits ``train`` and ``val``. The class table (``classes.tsv``: one class a line, its WordNet
id and names, the line number being the class index) is kept with the dataset. Class indexes follow the sorted
WordNet ids, as torchvision's ``ImageNet``/``ImageFolder`` and most published models number them.

ImageNet cannot be downloaded without an account, so it is installed from a folder (``--from``) that holds either
the published archives, read as streams with nothing extracted to disk,

    ILSVRC2012_img_train.tar      a tar of one tar per class (n01440764.tar...) of JPEG files
    ILSVRC2012_img_val.tar        the 50,000 validation JPEG files
    ILSVRC2012_devkit_t12.tar.gz  class names and the validation labels (needs scipy: ``datamount[imagenet]``)

or extracted trees: ``train/<wnid>/*.JPEG`` and ``val/<wnid>/*.JPEG`` (a flat ``val/`` is labelled from the devkit).
The splits found are installed; an archive with its published name is checked against its published md5 while it
is read.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from datamount.datasets.errors import MissingDependencyError, SourceFormatError, SourceNotFoundError
from datamount.datasets.progress import Progress
from datamount.datasets.public.archives import ARCHIVE_ERRORS, file_size, member_bytes, read_tar
from datamount.datasets.public.spec import PublicDataset, RemoteFile, Sources
from datamount.datasets.public.splits import SplitReader, attached_file, installed
from datamount.datasets.public.writer import PublicWriter
from datamount.datasets.row_folders import RowFiles
from datamount.storage import Store, open_store

NAME = "imagenet"
TRAIN_ARCHIVE = "ILSVRC2012_img_train.tar"
VAL_ARCHIVE = "ILSVRC2012_img_val.tar"
DEVKIT_ARCHIVE = "ILSVRC2012_devkit_t12.tar.gz"
DEVKIT_FOLDER = "ILSVRC2012_devkit_t12"
META_FILE = "data/meta.mat"
VAL_LABELS_FILE = "data/ILSVRC2012_validation_ground_truth.txt"
FILES = (
    RemoteFile(TRAIN_ARCHIVE, "1d675b47d978889d74fa0da5fadfb00e"),
    RemoteFile(VAL_ARCHIVE, "29b22e2961454d5413ddabcf34fc5622"),
    RemoteFile(DEVKIT_ARCHIVE, "fa75699e90414af021442c21a62c3abf"),
)
#: Kept with the dataset: ``wnid<TAB>names`` a line, the line number (from 0) being the class index.
CLASSES_FILE = "classes.tsv"
_VAL_NUMBER = re.compile(r"(\d+)\.[A-Za-z]+$")


@dataclass(frozen=True)
class ImageNetClass:
    """A class: its index (the position of its WordNet id in sorted order), WordNet id and names."""

    index: int
    wnid: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Devkit:
    """What the ILSVRC2012 devkit says: the 1000 classes (WordNet id to names) and each validation image's class,
    by the image's number (``ILSVRC2012_val_00000001.JPEG`` is number 1)."""

    names: dict[str, tuple[str, ...]]
    validation: list[str]

    def class_of(self, number: int, where: str) -> str:
        if not 1 <= number <= len(self.validation):
            raise SourceFormatError(f"{where}: the devkit has no label for validation image {number}")
        return self.validation[number - 1]


def read_devkit(meta_mat: bytes, ground_truth: bytes) -> Devkit:
    """The devkit's classes (the leaf synsets of ``meta.mat``) and validation labels."""
    try:
        import scipy.io
    except ImportError:
        raise MissingDependencyError(
            "reading the ImageNet devkit (meta.mat) needs scipy: pip install 'datamount[imagenet]'"
        ) from None
    try:
        synsets = scipy.io.loadmat(io.BytesIO(meta_mat), squeeze_me=True)["synsets"]
        leaves = [synset for synset in synsets.ravel() if int(synset["num_children"]) == 0]
        by_id = {int(leaf["ILSVRC2012_ID"]): str(leaf["WNID"]) for leaf in leaves}
        names = {str(leaf["WNID"]): tuple(str(leaf["words"]).split(", ")) for leaf in leaves}
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise SourceFormatError(f"{META_FILE} of the devkit is not ILSVRC2012's synset table: {exc}") from exc
    try:
        validation = [by_id[int(line)] for line in ground_truth.split()]
    except (ValueError, KeyError) as exc:
        raise SourceFormatError(f"{VAL_LABELS_FILE} of the devkit names an unknown class id: {exc}") from None
    return Devkit(names, validation)


def _devkit(folder: Path, checksums: dict[str, str], progress: Progress) -> tuple[Devkit, str] | None:
    """The devkit found in ``folder`` (its archive, or the extracted folder), and the name it was found under."""
    archive = folder / DEVKIT_ARCHIVE
    extracted = folder / DEVKIT_FOLDER
    if archive.is_file():
        found: dict[str, bytes] = {}
        progress.start("devkit", items=1, size=file_size(archive))
        with read_tar(archive, md5=checksums.get(DEVKIT_ARCHIVE), progress=progress) as members:
            for member in members:
                for wanted in (META_FILE, VAL_LABELS_FILE):
                    if member.isfile() and member.name.endswith(wanted):
                        found[wanted] = member_bytes(members, member)
        progress.finish()
        missing = [name for name in (META_FILE, VAL_LABELS_FILE) if name not in found]
        if missing:
            raise SourceFormatError(f"{archive} holds no {' nor '.join(missing)}")
        return read_devkit(found[META_FILE], found[VAL_LABELS_FILE]), DEVKIT_ARCHIVE
    if extracted.is_dir():
        try:
            meta, truth = (extracted / META_FILE).read_bytes(), (extracted / VAL_LABELS_FILE).read_bytes()
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"{extracted} holds no {exc.filename}") from None
        return read_devkit(meta, truth), DEVKIT_FOLDER
    return None


def _build(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    folder = sources.folder
    if folder is None or not folder.is_dir():
        raise SourceFormatError(f"imagenet is installed from a folder (--from DIR): {SPEC.source_help}")
    checksums = dict(sources.checksums)
    found = _devkit(folder, checksums, progress)
    devkit = found[0] if found else None
    # Every split's source is found and checked before the first is read: a missing devkit must not show up only
    # after hours of reading the training archive.
    plans = [plan for split in SPEC.splits if (plan := _plan(folder, split, devkit, checksums, progress))]
    if not plans:
        raise SourceNotFoundError(
            f"{folder} holds neither {TRAIN_ARCHIVE} nor {VAL_ARCHIVE}, nor train/ or val/ class folders"
        )
    if found:
        writer.used(found[1])
    wnids: set[str] = set()
    for split, source, rows in plans:
        writer.start_split(split)
        writer.used(source)
        for data, wnid, path in rows:
            if devkit is not None and wnid not in devkit.names:
                raise SourceFormatError(f"{path}: {wnid} is not one of the devkit's {len(devkit.names)} classes")
            wnids.add(wnid)
            writer.add(data, wnid, path=path)
    names = devkit.names if devkit is not None else {wnid: () for wnid in wnids}
    table = "".join(f"{wnid}\t{', '.join(names[wnid])}\n" for wnid in sorted(names))
    writer.attach(CLASSES_FILE, table.encode("utf-8"))


Rows = Iterator[tuple[bytes, str, str]]


def _plan(
    folder: Path, split: str, devkit: Devkit | None, checksums: dict[str, str], progress: Progress
) -> tuple[str, str, Rows] | None:
    """Where a split's rows ``(jpeg, wnid, path)`` come from (its archive, else its extracted tree), or None."""
    archive = folder / (TRAIN_ARCHIVE if split == "train" else VAL_ARCHIVE)
    if archive.is_file():
        if split == "val" and devkit is None:
            raise SourceNotFoundError(f"{archive} has no labels of its own: put {DEVKIT_ARCHIVE} beside it")
        read = _train_archive if split == "train" else _val_archive
        return split, archive.name, read(archive, checksums.get(archive.name), devkit, progress)
    tree = folder / split
    if tree.is_dir():
        return split, f"{split}/", _tree_rows(split, _tree_files(tree, devkit), progress)
    return None


def _train_archive(path: Path, md5: str | None, devkit: Devkit | None, progress: Progress) -> Rows:
    progress.start("train", items=0, size=file_size(path))
    with read_tar(path, md5=md5, progress=progress) as classes:
        for member in classes:
            if not member.isfile():
                continue
            wnid, _, extension = Path(member.name).name.partition(".")
            if extension != "tar":
                raise SourceFormatError(f"{path}: {member.name} is not a class archive (<wnid>.tar)")
            handle = classes.extractfile(member)
            if handle is None:
                raise SourceFormatError(f"{path}: {member.name} is not a regular file")
            try:
                with handle, tarfile.open(fileobj=handle, mode="r|") as images:
                    for image in images:
                        if image.isfile():
                            yield member_bytes(images, image), wnid, f"{wnid}/{Path(image.name).name}"
            except ARCHIVE_ERRORS as exc:
                raise SourceFormatError(f"{path}: {member.name} is not a readable tar archive: {exc}") from exc
    progress.finish()


def _val_archive(path: Path, md5: str | None, devkit: Devkit | None, progress: Progress) -> Rows:
    labels = _required(devkit, path)
    progress.start("val", items=0, size=file_size(path))
    with read_tar(path, md5=md5, progress=progress) as images:
        for image in images:
            if image.isfile():
                name = Path(image.name).name
                yield member_bytes(images, image), labels.class_of(_number(name, path), name), name
    progress.finish()


def _required(devkit: Devkit | None, path: Path) -> Devkit:
    if devkit is None:
        raise SourceNotFoundError(f"{path} has no labels of its own: put {DEVKIT_ARCHIVE} beside it")
    return devkit


def _number(name: str, where: Path) -> int:
    match = _VAL_NUMBER.search(name)
    if match is None:
        raise SourceFormatError(f"{where}: {name} is not named like ILSVRC2012_val_00000001.JPEG")
    return int(match.group(1))


def _tree_files(tree: Path, devkit: Devkit | None) -> list[tuple[Path, str, str, int]]:
    """Every image of an extracted split, sorted: ``(file, wnid, path, size)``. Class folders give the class; a
    flat folder (validation images as published) is labelled from the devkit."""
    entries = sorted(entry for entry in tree.iterdir() if not entry.name.startswith("."))
    if any(entry.is_dir() for entry in entries):
        return [
            (file, folder.name, f"{folder.name}/{file.name}", file.stat().st_size)
            for folder in entries
            if folder.is_dir()
            for file in sorted(folder.iterdir())
            if file.is_file() and not file.name.startswith(".")
        ]
    labels = _required(devkit, tree)
    return [
        (file, labels.class_of(_number(file.name, tree), file.name), file.name, file.stat().st_size)
        for file in entries
        if file.is_file()
    ]


def _tree_rows(split: str, files: list[tuple[Path, str, str, int]], progress: Progress) -> Rows:
    progress.start(split, items=len(files), size=sum(size for *_, size in files))
    for file, wnid, path, size in files:
        yield file.read_bytes(), wnid, path
        progress.advance(size=size)
    progress.finish()


SPEC = PublicDataset(
    name=NAME,
    title="ImageNet ILSVRC2012 classification: JPEG images of 1000 classes (train, val); needs --from",
    kind="image",
    columns=("image", "label"),
    splits=("train", "val"),
    files=FILES,
    build=_build,
    source_help=(
        f"a folder holding {TRAIN_ARCHIVE}, {VAL_ARCHIVE} and {DEVKIT_ARCHIVE} (as published), or extracted "
        "train/<wnid>/*.JPEG and val/<wnid>/*.JPEG folders"
    ),
    needs_source=True,
    pip_extra="imagenet",
    row_files=RowFiles("{split}/{label}/{name}"),
)


def parse_classes(data: bytes) -> list[ImageNetClass]:
    """The class table kept with the dataset."""
    classes = []
    for index, line in enumerate(line for line in data.decode("utf-8").split("\n") if line):
        wnid, _, names = line.partition("\t")
        classes.append(ImageNetClass(index, wnid, tuple(names.split(", ")) if names else ()))
    return classes


def classes(*, store: Store | str | None = None) -> list[ImageNetClass]:
    """Every class of the installed dataset, by index."""
    target = open_store(store)
    return parse_classes(attached_file(target, installed(target, NAME), CLASSES_FILE))


def class_index(*, store: Store | str | None = None) -> dict[str, int]:
    """WordNet id to class index."""
    return {entry.wnid: entry.index for entry in classes(store=store)}


class ImageNetReader(SplitReader):
    """ImageNet samples from an installed split: ``(JPEG bytes, int class index)``."""

    def __init__(self, split: str, store: Store | str | None = None) -> None:
        super().__init__(NAME, split, store)
        self.class_index = {entry.wnid: entry.index for entry in parse_classes(self.attached(CLASSES_FILE))}

    def __call__(self) -> Iterator[tuple[bytes, int]]:
        index = self.class_index
        with self.rows() as rows:
            for image, wnid in rows:
                yield image, index[wnid]


def train(*, store: Store | str | None = None) -> ImageNetReader:
    """The training split as a reader creator: ``(JPEG bytes, int class index)``."""
    return ImageNetReader("train", store)


def val(*, store: Store | str | None = None) -> ImageNetReader:
    """The validation split as a reader creator: ``(JPEG bytes, int class index)``."""
    return ImageNetReader("val", store)
