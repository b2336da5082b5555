"""IMDB movie reviews (Large Movie Review Dataset, aclImdb): the public dataset ``imdb`` and Paddle-compatible
bag-of-words reader creators.

The dataset holds 50,000 rows ``(text, label)``: ``text`` a review exactly as in its file, ``label`` ``pos`` or
``neg``; the splits ``train`` then ``test`` (25,000 each; the 50,000 unlabelled reviews are left out, as Paddle
does). Within a split the positive reviews come first, then the negative ones, each in the archive's order: the
order ``paddle.dataset.imdb`` reads them in.

``word_dict(cutoff)`` builds Paddle's dictionary and ``train(word_idx)`` / ``test(word_idx)`` yield Paddle's
``(list of word ids, int label)`` with ``pos`` = 0 and ``neg`` = 1. Word frequencies over both splits are counted
once, at install, and kept with the dataset, so ``word_dict`` does not read the reviews.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterator, Mapping

from datamount.datasets.errors import SourceFormatError
from datamount.datasets.progress import Progress
from datamount.datasets.public.archives import file_size, member_bytes, read_tar
from datamount.datasets.public.spec import PublicDataset, RemoteFile, Sources
from datamount.datasets.public.splits import SplitReader, attached_file, installed
from datamount.datasets.public.writer import PublicWriter
from datamount.datasets.row_folders import RowFiles
from datamount.storage import Store, open_store

NAME = "imdb"
ARCHIVE = "aclImdb_v1.tar.gz"
FILES = (
    RemoteFile(
        ARCHIVE,
        "7c2ac02c03563afcf9b574c7e56c153a",
        (
            "https://dataset.bj.bcebos.com/imdb%2FaclImdb_v1.tar.gz",
            "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        ),
        84_125_825,
    ),
)
#: The reviews Paddle reads: ``aclImdb/<split>/<label>/<id>_<rating>.txt``.
REVIEW = re.compile(r"aclImdb/(train|test)/(pos|neg)/.*\.txt$")
LABELS = {"pos": 0, "neg": 1}
UNKNOWN = "<unk>"
DEFAULT_CUTOFF = 150
#: Kept with the dataset: every word of both splits with its count, most frequent first (``word<TAB>count``).
FREQUENCIES_FILE = "word_freq.tsv"

_REMOVE_PUNCTUATION_AND_LOWER = {ord(c): None for c in string.punctuation} | {
    ord(c): ord(c.lower()) for c in string.ascii_uppercase
}
# Paddle splits the review's bytes: on ASCII whitespace only. str.split() also splits on these.
_OTHER_WHITESPACE = re.compile("[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_ASCII_WHITESPACE = re.compile("[ \t\n\r\x0b\x0c]+")


def tokenize(text: str) -> list[str]:
    """Paddle's tokenization of a review: trailing newlines dropped, ASCII punctuation removed, ASCII letters
    lowered, split on ASCII whitespace (Paddle does this on the file's bytes; the words are the same)."""
    cleaned = text.rstrip("\n\r").translate(_REMOVE_PUNCTUATION_AND_LOWER)
    if _OTHER_WHITESPACE.search(cleaned):
        return [word for word in _ASCII_WHITESPACE.split(cleaned) if word]
    return cleaned.split()


def _build(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    archive = sources.file(ARCHIVE)
    writer.used(ARCHIVE)
    # One pass of the archive per (split, label): each split's rows then come in Paddle's order with no buffering.
    passes = [(split, label) for split in ("train", "test") for label in LABELS]
    progress.start("convert", items=len(passes), size=len(passes) * file_size(archive))
    frequencies: Counter[str] = Counter()
    for split, label in passes:
        if label == "pos":
            writer.start_split(split)
        with read_tar(archive, progress=progress) as reviews:
            for member in reviews:
                found = REVIEW.match(member.name)
                if found is None or found.groups() != (split, label) or not member.isfile():
                    continue
                text = _decoded(member_bytes(reviews, member), member.name)
                frequencies.update(tokenize(text))
                writer.add(text, label)
        progress.advance(items=1, size=0)
    progress.finish()
    ranked = sorted(frequencies.items(), key=lambda item: (-item[1], item[0]))
    writer.attach(FREQUENCIES_FILE, "".join(f"{word}\t{count}\n" for word, count in ranked).encode("utf-8"))


def _decoded(data: bytes, member: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceFormatError(f"{ARCHIVE}: {member} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


SPEC = PublicDataset(
    name=NAME,
    title="IMDB movie reviews for sentiment, bag of words (25,000 train, 25,000 test; pos/neg)",
    kind="text",
    columns=("text", "label"),
    splits=("train", "test"),
    files=FILES,
    build=_build,
    source_help=f"{ARCHIVE}, or a folder holding it (Paddle's ~/.cache/paddle/dataset/imdb works)",
    row_files=RowFiles("{split}/{label}/{number}.txt"),
)


def word_frequencies(*, store: Store | str | None = None) -> list[tuple[str, int]]:
    """Every word of the labelled reviews (both splits) with its count, most frequent first, ties by word."""
    target = open_store(store)
    text = attached_file(target, installed(target, NAME), FREQUENCIES_FILE).decode("utf-8")
    # Words may hold characters str.splitlines() breaks at (\x1c, \x85...): lines end at "\n" only.
    lines = (line.rpartition("\t") for line in text.split("\n") if line)
    return [(word, int(count)) for word, _, count in lines]


def word_dict(cutoff: int = DEFAULT_CUTOFF, *, store: Store | str | None = None) -> dict[str, int]:
    """Paddle's word dictionary: the words seen more than ``cutoff`` times, most frequent first (ties by word),
    numbered from 0, then ``<unk>``. Keys are ``str`` (Paddle's are the words' bytes)."""
    if cutoff < 0:
        raise ValueError(f"cutoff must be >= 0, got {cutoff}")
    words = [word for word, count in word_frequencies(store=store) if count > cutoff]
    dictionary = {word: index for index, word in enumerate(words)}
    dictionary[UNKNOWN] = len(words)
    return dictionary


class ImdbReader(SplitReader):
    """Paddle's IMDB samples from an installed split: ``(list of word ids, int label)``, pos = 0, neg = 1."""

    ARGUMENTS = "word_idx"

    def __init__(self, split: str, word_idx: Mapping[str | bytes, int], store: Store | str | None = None) -> None:
        self.word_idx = _text_keys(word_idx)
        if UNKNOWN not in self.word_idx:
            raise ValueError(f"word_idx has no {UNKNOWN!r} entry; build it with imdb.word_dict()")
        super().__init__(NAME, split, store)

    def __call__(self) -> Iterator[tuple[list[int], int]]:
        lookup = self.word_idx.get
        unknown = self.word_idx[UNKNOWN]
        with self.rows() as rows:
            for text, label in rows:
                yield [lookup(word, unknown) for word in tokenize(text)], LABELS[label]


def _text_keys(word_idx: Mapping[str | bytes, int]) -> dict[str, int]:
    """The dictionary with ``str`` keys: one made by Paddle (bytes keys) works as it is."""
    return {key.decode("utf-8") if isinstance(key, bytes) else key: value for key, value in word_idx.items()}


def train(word_idx: Mapping[str | bytes, int], *, store: Store | str | None = None) -> ImdbReader:
    """The training split as a Paddle reader creator: ``(list of word ids, int label)``."""
    return ImdbReader("train", word_idx, store)


def test(word_idx: Mapping[str | bytes, int], *, store: Store | str | None = None) -> ImdbReader:
    """The test split as a Paddle reader creator: ``(list of word ids, int label)``."""
    return ImdbReader("test", word_idx, store)
