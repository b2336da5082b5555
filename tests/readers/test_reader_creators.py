"""A reader is called for each pass, never iterated: iterating one is a ``ReaderNotCalledError`` (a ``TypeError``)
naming the call to make, for the public datasets' readers, ``reader()``, ``mix()``, ``stream_reader()`` and every
decorator (``datasets/reader_creator.py``), and the pass it names still reads."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from datamount.datasets import ReaderNotCalledError, imagenet, imdb, mnist, upload, wmt14
from datamount.readers import (
    batch,
    buffered,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    mix,
    multiprocess_reader,
    reader,
    shuffle,
    stream_reader,
    write_to,
    xmap_readers,
)
from datamount.storage import Store
from tests.datasets.public_files import install_generated
from tests.generated import MakeImageList


def first(*columns: Any) -> Any:
    return columns[0]


def assert_called_not_iterated(made: Any, call: str) -> None:
    """Iterating ``made`` says to call it, as ``call()`` (Python's own error had been a bare "is not iterable")."""
    fix = f"call it for each pass, as in `for sample in {call}():` (or `samples = {call}` and then"
    with pytest.raises(
        ReaderNotCalledError, match=f"^a {type(made).__name__} is a reader, not its samples: {re.escape(fix)}"
    ):
        for _ in made:
            pass
    with pytest.raises(TypeError, match="is a reader, not its samples"):
        list(made)


PUBLIC: dict[str, tuple[Callable[[Store], Any], str]] = {
    "mnist-train": (lambda store: mnist.train(store=store), "mnist.train()"),
    "mnist-test": (lambda store: mnist.test(store=store), "mnist.test()"),
    "imdb": (lambda store: imdb.test(imdb.word_dict(store=store), store=store), "imdb.test(word_idx)"),
    "wmt14": (lambda store: wmt14.train(20, store=store), "wmt14.train(dict_size)"),
    "imagenet": (lambda store: imagenet.train(store=store), "imagenet.train()"),
}


@pytest.mark.parametrize("made", list(PUBLIC), ids=list(PUBLIC))
def test_iterating_a_public_datasets_reader_names_the_call(made: str, local_store: Store, tmp_path: Path) -> None:
    install_generated(made.split("-")[0], tmp_path / "source", local_store)
    make, call = PUBLIC[made]
    samples = make(local_store)
    assert_called_not_iterated(samples, call)
    assert list(samples())  # the pass the message names (WMT14 leaves out its malformed pairs: not len(samples))


DECORATED: dict[str, tuple[Callable[[Any], Any], str]] = {
    "batch": (lambda r: batch(r, 2), "batch(...)"),
    "shuffle": (lambda r: shuffle(r, 4, seed=1), "shuffle(...)"),
    "compose": (lambda r: compose(r, r), "compose(...)"),
    "chain": (lambda r: chain(r, r), "chain(...)"),
    "map_readers": (lambda r: map_readers(first, r), "map_readers(...)"),
    "firstn": (lambda r: firstn(r, 2), "firstn(...)"),
    "cache": (cache, "cache(...)"),
    "buffered": (lambda r: buffered(r, 2), "buffered(...)"),
    "xmap_readers": (lambda r: xmap_readers(first, r, 1, 2), "xmap_readers(...)"),
    "multiprocess_reader": (lambda r: multiprocess_reader([r], use_pipe=False), "multiprocess_reader(...)"),
}


@pytest.mark.parametrize("decorator", list(DECORATED), ids=list(DECORATED))
def test_iterating_a_decorated_reader_names_the_call(
    decorator: str, local_store: Store, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(6), "cats", store=local_store)
    decorate, call = DECORATED[decorator]
    decorated = decorate(reader("cats", local_store))
    assert_called_not_iterated(decorated, call)
    assert list(decorated())


def test_iterating_reader_mix_or_stream_reader_names_the_call(
    local_store: Store, make_image_list: MakeImageList, tmp_path: Path
) -> None:
    upload(make_image_list(6), "team/cats", store=local_store)
    upload(make_image_list(4), "dogs", store=local_store)
    cats = reader("team/cats", local_store)
    assert_called_not_iterated(cats, "reader('team/cats')")
    assert len(list(cats())) == 6
    mixed = mix({"team/cats": 1, "dogs": 1}, local_store)
    assert_called_not_iterated(mixed, "mix(...)")
    assert list(mixed())
    path = tmp_path / "cats.arrows"
    writer = write_to(str(path))
    writer.set_columns("file", "label")
    writer.write_many(cats())
    writer.close()
    streamed = stream_reader(str(path))
    assert_called_not_iterated(streamed, f"stream_reader({str(path)!r})")
    assert len(list(streamed())) == 6
