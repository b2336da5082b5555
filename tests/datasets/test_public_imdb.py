"""IMDB: stored reviews, Paddle's dictionary and samples, checked against Paddle's algorithm (on the reviews' bytes)
applied here to the generated archive."""

from __future__ import annotations

import string
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from datamount.datasets import catalog, imdb, public
from datamount.datasets.errors import SourceFormatError
from datamount.datasets.rows import ShardRows
from datamount.storage import Store
from tests.datasets.public_files import ImdbSource, make_imdb, md5, registered, tar_bytes

PUNCTUATION = string.punctuation.encode("latin-1")


def paddle_tokens(raw: bytes) -> list[bytes]:
    """What paddle.dataset.imdb.tokenize does to one review file's bytes."""
    return raw.rstrip(b"\n\r").translate(None, PUNCTUATION).lower().split()


def labelled_reviews(archive: Path) -> list[tuple[str, str, bytes]]:
    """``(split, label, bytes)`` of every labelled review, in the archive's order, read here with tarfile."""
    found = []
    with tarfile.open(archive) as members:
        for member in members:
            parts = member.name.split("/")
            if len(parts) == 4 and parts[2] in ("pos", "neg") and member.name.endswith(".txt"):
                handle = members.extractfile(member)
                assert handle is not None
                found.append((parts[1], parts[2], handle.read()))
    return found


def paddle_word_dict(reviews: list[tuple[str, str, bytes]], cutoff: int) -> dict[str, int]:
    counts = Counter(word for _, _, raw in reviews for word in paddle_tokens(raw))
    kept = sorted(((word, count) for word, count in counts.items() if count > cutoff), key=lambda x: (-x[1], x[0]))
    dictionary = {word.decode("utf-8"): index for index, (word, _) in enumerate(kept)}
    dictionary["<unk>"] = len(kept)
    return dictionary


@pytest.fixture
def source(tmp_path: Path) -> Iterator[ImdbSource]:
    made = make_imdb(tmp_path / "files", per_group=9, seed=5)
    with registered(public.get("imdb").with_checksums({"aclImdb_v1.tar.gz": md5(made.path)})):
        yield made


@pytest.fixture
def installed(source: ImdbSource, local_store: Store) -> Store:
    public.install("imdb", store=local_store, source=source.path, row_group_bytes=2000)
    return local_store


@pytest.mark.parametrize("cutoff", [0, 1, 3, 150])
def test_word_dict_is_paddles(installed: Store, source: ImdbSource, cutoff: int) -> None:
    expected = paddle_word_dict(labelled_reviews(source.path), cutoff)
    assert imdb.word_dict(cutoff, store=installed) == expected
    assert list(imdb.word_dict(cutoff, store=installed).items()) == list(expected.items())


@pytest.mark.parametrize("split", ["train", "test"])
def test_samples_are_paddles_positive_first(installed: Store, source: ImdbSource, split: str) -> None:
    reviews = labelled_reviews(source.path)
    word_idx = paddle_word_dict(reviews, 1)
    unknown = word_idx["<unk>"]
    expected = [
        ([word_idx.get(word.decode("utf-8"), unknown) for word in paddle_tokens(raw)], 0 if label == "pos" else 1)
        for wanted in ("pos", "neg")
        for owner, label, raw in reviews
        if owner == split and label == wanted
    ]
    creator = imdb.train(word_idx, store=installed) if split == "train" else imdb.test(word_idx, store=installed)
    assert list(creator()) == expected
    assert len(creator) == len(expected) == 18


def test_a_dictionary_made_by_paddle_works_as_it_is(installed: Store) -> None:
    ours = imdb.word_dict(0, store=installed)
    paddles = {(word if word == "<unk>" else word.encode("utf-8")): index for word, index in ours.items()}
    assert list(imdb.train(paddles, store=installed)()) == list(imdb.train(ours, store=installed)())


def test_a_dictionary_needs_unk(installed: Store) -> None:
    with pytest.raises(ValueError, match="word_idx has no '<unk>' entry"):
        imdb.train({"film": 0}, store=installed)


def test_the_stored_rows_are_the_reviews_as_written(installed: Store, source: ImdbSource) -> None:
    manifest = catalog.resolve(installed, "imdb")
    assert manifest.columns == ["text", "label"] and manifest.kind == "text"
    expected = [
        (text, label)
        for split in ("train", "test")
        for label in ("pos", "neg")
        for text in source.reviews[(split, label)]
    ]
    assert list(ShardRows(installed, manifest).rows(0, manifest.rows)) == expected
    assert [entry.path for entry in manifest.files] == [imdb.FREQUENCIES_FILE]


@given(st.text())
@example("Odd\x1cspace\xa0and\u3000Wide. SPACE\tTab,\r\n")
def test_tokenize_splits_like_paddle_on_bytes(text: str) -> None:
    assert imdb.tokenize(text) == [word.decode("utf-8") for word in paddle_tokens(text.encode("utf-8"))]


def test_a_review_that_is_not_utf8_is_named(tmp_path: Path, local_store: Store) -> None:
    archive = tmp_path / "aclImdb_v1.tar.gz"
    archive.write_bytes(tar_bytes([("aclImdb/train/pos/7_9.txt", b"caf\xe9 latin-1")], "w:gz"))
    with (
        registered(public.get("imdb").with_checksums({"aclImdb_v1.tar.gz": md5(archive)})),
        pytest.raises(SourceFormatError, match=r"aclImdb/train/pos/7_9\.txt is not UTF-8 text"),
    ):
        public.install("imdb", store=local_store, source=archive)
    assert catalog.dataset_names(local_store) == []


def test_a_file_that_is_not_an_archive_is_named(tmp_path: Path, local_store: Store) -> None:
    archive = tmp_path / "aclImdb_v1.tar.gz"
    archive.write_bytes(b"<html>a captive portal's page</html>")
    with (
        registered(public.get("imdb").with_checksums({"aclImdb_v1.tar.gz": md5(archive)})),
        pytest.raises(SourceFormatError, match=r"aclImdb_v1\.tar\.gz is not a readable tar archive"),
    ):
        public.install("imdb", store=local_store, source=archive)
    assert catalog.dataset_names(local_store) == []
