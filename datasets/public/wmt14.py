"""WMT14 French-English translation (Paddle's shrunk ``wmt14.tgz``): the public dataset ``wmt14`` and
Paddle-compatible reader creators.

The dataset holds rows ``(source, target)``: a French sentence and its English translation, in the splits
``train``, ``test`` and ``gen``, as the archive's ``train/train``, ``test/test`` and ``gen/gen`` files hold them
(lines that do not have exactly two TAB-separated parts are left out, as Paddle does). The source and target
dictionaries (``src.dict``, ``trg.dict``: one word a line, most frequent first after ``<s>``, ``<e>``, ``<unk>``) are
kept with the dataset.

``train(dict_size)`` / ``test(dict_size)`` / ``gen(dict_size)`` yield what ``paddle.dataset.wmt14`` yields:
``(source ids, target ids, next target ids)``; ``get_dict(dict_size)`` returns the dictionaries.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator

from datamount.datasets.errors import SourceFormatError
from datamount.datasets.progress import Progress
from datamount.datasets.public.archives import file_size, member_bytes, read_tar
from datamount.datasets.public.spec import PublicDataset, RemoteFile, Sources
from datamount.datasets.public.splits import SplitReader
from datamount.datasets.public.writer import PublicWriter
from datamount.datasets.row_folders import RowFiles, tab_line
from datamount.storage import Store

NAME = "wmt14"
ARCHIVE = "wmt14.tgz"
FILES = (RemoteFile(ARCHIVE, "0791583d57d5beb693b9414c5b36798c", ("http://paddlemodels.bj.bcebos.com/wmt/wmt14.tgz",)),)
SPLITS = ("train", "test", "gen")
SOURCE_DICT, TARGET_DICT = "src.dict", "trg.dict"
START, END, UNKNOWN = "<s>", "<e>", "<unk>"
UNKNOWN_ID = 2
#: Paddle leaves out pairs with more than this many source ids (with <s> and <e>) or target ids.
MAX_LENGTH = 80


def sentence_pairs(data: bytes, member: str) -> Iterator[tuple[str, str]]:
    """The ``source<TAB>target`` pairs of a split file, as Paddle reads them (other lines are left out)."""
    for number, line in enumerate(io.BytesIO(data), start=1):  # lines end at b"\n" only, as in Paddle
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise SourceFormatError(f"{ARCHIVE}: {member}, line {number} is not UTF-8 text") from None
        parts = text.strip().split("\t")
        if len(parts) == 2:
            yield parts[0], parts[1]


def _build(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    archive = sources.file(ARCHIVE)
    writer.used(ARCHIVE)
    passes = [*SPLITS, "dictionaries"]
    progress.start("convert", items=len(passes), size=len(passes) * file_size(archive))
    dictionaries: dict[str, list[bytes]] = {SOURCE_DICT: [], TARGET_DICT: []}
    for current in passes:
        if current in SPLITS:
            writer.start_split(current)
        # One pass per split keeps Paddle's order: the split's files in archive order.
        with read_tar(archive, progress=progress) as members:
            for member in members:
                if not member.isfile():
                    continue
                if current in SPLITS and member.name.endswith(f"{current}/{current}"):
                    for source, target in sentence_pairs(member_bytes(members, member), member.name):
                        writer.add(source, target)
                elif current == "dictionaries" and member.name.endswith(tuple(dictionaries)):
                    which = SOURCE_DICT if member.name.endswith(SOURCE_DICT) else TARGET_DICT
                    dictionaries[which].append(member_bytes(members, member))
        progress.advance(items=1, size=0)
    progress.finish()
    for name, copies in dictionaries.items():
        if len(copies) != 1:
            raise SourceFormatError(f"{ARCHIVE} holds {len(copies)} files named *{name}; it should hold one")
        writer.attach(name, copies[0])


SPEC = PublicDataset(
    name=NAME,
    title="WMT14 French-English translation pairs, Paddle's shrunk set (train, test, gen) with dictionaries",
    kind="text",
    columns=("source", "target"),
    splits=SPLITS,
    files=FILES,
    build=_build,
    source_help=f"{ARCHIVE}, or a folder holding it (Paddle's ~/.cache/paddle/dataset/wmt14 works)",
    row_files=RowFiles("{split}/{split}", tab_line),
)


def read_dict(data: bytes, dict_size: int) -> dict[str, int]:
    """Paddle's dictionary: the first ``dict_size`` lines of a dictionary file, each word (stripped) to its line
    number (a word repeated keeps its last line)."""
    words: dict[str, int] = {}
    for number, line in enumerate(itertools.islice(io.BytesIO(data), dict_size)):
        words[line.strip().decode("utf-8")] = number
    return words


def _check_size(dict_size: int) -> None:
    if dict_size < 3:
        raise ValueError(f"dict_size must be at least 3 (<s>, <e> and <unk> come first), got {dict_size}")


class Wmt14Reader(SplitReader):
    """Paddle's WMT14 samples from an installed split: ``(source ids, target ids, next target ids)``."""

    ARGUMENTS = "dict_size"

    def __init__(self, split: str, dict_size: int, store: Store | str | None = None) -> None:
        _check_size(dict_size)
        super().__init__(NAME, split, store)
        self.dict_size = dict_size
        self.source_dict = read_dict(self.attached(SOURCE_DICT), dict_size)
        self.target_dict = read_dict(self.attached(TARGET_DICT), dict_size)

    def __call__(self) -> Iterator[tuple[list[int], list[int], list[int]]]:
        source_ids, target_ids = self.source_dict.get, self.target_dict.get
        start, end = self.target_dict[START], self.target_dict[END]
        with self.rows() as rows:
            for source, target in rows:
                source_sequence = [source_ids(word, UNKNOWN_ID) for word in [START, *source.split(), END]]
                target_sequence = [target_ids(word, UNKNOWN_ID) for word in target.split()]
                if len(source_sequence) > MAX_LENGTH or len(target_sequence) > MAX_LENGTH:
                    continue
                yield source_sequence, [start, *target_sequence], [*target_sequence, end]


def train(dict_size: int, *, store: Store | str | None = None) -> Wmt14Reader:
    """The training split as a Paddle reader creator: ``(source ids, target ids, next target ids)``."""
    return Wmt14Reader("train", dict_size, store)


def test(dict_size: int, *, store: Store | str | None = None) -> Wmt14Reader:
    """The test split as a Paddle reader creator."""
    return Wmt14Reader("test", dict_size, store)


def gen(dict_size: int, *, store: Store | str | None = None) -> Wmt14Reader:
    """The generation split as a Paddle reader creator."""
    return Wmt14Reader("gen", dict_size, store)


def get_dict(
    dict_size: int, reverse: bool = True, *, store: Store | str | None = None
) -> tuple[dict[str, int], dict[str, int]] | tuple[dict[int, str], dict[int, str]]:
    """The (source, target) dictionaries of ``dict_size`` words; ``reverse`` (Paddle's default) maps ids to words."""
    reader = Wmt14Reader("train", dict_size, store)
    if reverse:
        return (
            {index: word for word, index in reader.source_dict.items()},
            {index: word for word, index in reader.target_dict.items()},
        )
    return reader.source_dict, reader.target_dict
