"""MNIST: the stored rows and Paddle's samples, checked against values computed from the generated IDX files."""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from datamount.datasets import catalog, mnist, public
from datamount.datasets.errors import DatasetNotFoundError, SourceFormatError
from datamount.datasets.rows import ShardRows
from datamount.storage import Store, open_store
from tests.datasets.public_files import MNIST_NAMES, MnistSource, idx_gz, make_mnist, registered, with_checksums_of


@pytest.fixture
def source(tmp_path: Path) -> Iterator[MnistSource]:
    made = make_mnist(tmp_path / "files", train=700, test=90, seed=3)
    with registered(with_checksums_of("mnist", made.folder)):
        yield made


@pytest.fixture
def installed(source: MnistSource, local_store: Store) -> Store:
    public.install("mnist", store=local_store, source=source.folder, row_group_bytes=100_000)
    return local_store


def paddle_scaling(images: np.ndarray) -> np.ndarray:
    """Paddle's ``images / 255.0 * 2.0 - 1.0`` on a float32 array, one step at a time."""
    scaled = images.reshape(len(images), -1).astype("float32")
    scaled = scaled / 255.0
    scaled = scaled * 2.0
    return scaled - 1.0


def decoded_from_file(path: Path) -> np.ndarray:
    """An IDX file decoded here, from its header: big-endian dimension sizes after a 4-byte magic."""
    data = gzip.decompress(path.read_bytes())
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data[4 + 4 * dims :], np.uint8).reshape(shape)


@pytest.mark.parametrize("split", ["train", "test"])
def test_paddle_samples_match_the_files(installed: Store, source: MnistSource, split: str) -> None:
    images_name, labels_name = MNIST_NAMES[split]
    images = decoded_from_file(source.folder / images_name)
    labels = decoded_from_file(source.folder / labels_name)
    creator = mnist.train(store=installed) if split == "train" else mnist.test(store=installed)
    samples = list(creator())
    assert len(samples) == len(creator) == len(labels)
    expected = paddle_scaling(images)
    for (pixels, label), want_pixels, want_label in zip(samples, expected, labels, strict=True):
        assert pixels.dtype == np.float32 and pixels.shape == (784,)
        assert np.array_equal(pixels, want_pixels)
        assert type(label) is int and label == int(want_label)
    everything = np.stack([pixels for pixels, _ in samples])
    assert everything.min() == -1.0 and everything.max() == 1.0


def test_each_call_is_a_new_pass_and_the_creator_pickles(installed: Store) -> None:
    creator = mnist.test(store=installed)
    first = [label for _, label in creator()]
    copy = pickle.loads(pickle.dumps(creator))
    assert [label for _, label in copy()] == first == [label for _, label in creator()]


def test_stopping_early_is_fine(installed: Store) -> None:
    everything = [label for _, label in mnist.train(store=installed)()]
    samples = mnist.train(store=installed)()
    assert [label for _, (_, label) in zip(range(3), samples, strict=False)] == everything[:3]
    samples.close()


def test_the_stored_rows_are_the_raw_pixels_with_labels_and_splits(installed: Store, source: MnistSource) -> None:
    manifest = catalog.resolve(installed, "mnist")
    assert manifest.name == "public/mnist" and manifest.kind == "image" and len(manifest.shards) >= 2
    rows = list(ShardRows(installed, manifest).rows(0, manifest.rows))
    expected = [
        (images.tobytes(), str(label))
        for split in ("train", "test")
        for images, label in zip(source.images[split], source.labels[split], strict=True)
    ]
    assert rows == expected


def test_reading_before_installing_says_how_to_install(local_store: Store) -> None:
    with pytest.raises(
        DatasetNotFoundError, match=r"public dataset mnist is not installed in .*datamount public install mnist"
    ):
        mnist.train(store=local_store)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    images=hnp.arrays(np.uint8, st.tuples(st.integers(1, 40), st.integers(1, 9), st.integers(1, 9))),
    seed=st.integers(0, 9),
)
def test_any_idx_images_round_trip(tmp_path_factory: pytest.TempPathFactory, images: np.ndarray, seed: int) -> None:
    folder = tmp_path_factory.mktemp("idx")
    generator = np.random.default_rng(seed)
    for split, (images_name, labels_name) in MNIST_NAMES.items():
        count = len(images) if split == "train" else 1
        (folder / images_name).write_bytes(idx_gz(images if split == "train" else images[:1]))
        (folder / labels_name).write_bytes(idx_gz(generator.integers(0, 10, count, dtype=np.uint8)))
    store = open_store(folder / "store")
    with registered(with_checksums_of("mnist", folder)):
        public.install("mnist", store=store, source=folder)
    samples = list(mnist.train(store=store)())
    assert np.array_equal(np.stack([pixels for pixels, _ in samples]), paddle_scaling(images))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            gzip.compress(b"\0\0\x08\x03" + (2).to_bytes(4, "big") * 3 + b"\0" * 7),
            "announces 24 bytes, the file holds 23",
        ),
        (gzip.compress(b"\0\0\x0d\x01" + (1).to_bytes(4, "big") + b"\0" * 4), "is not an IDX file of unsigned bytes"),
        (b"plain bytes", "is not a gzip file"),
    ],
    ids=["truncated", "floats", "not-gzip"],
)
def test_broken_idx_files_are_named(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(content)
    with pytest.raises(SourceFormatError, match=message):
        mnist.read_idx(path)


def test_images_and_labels_must_agree(tmp_path: Path, local_store: Store) -> None:
    made = make_mnist(tmp_path / "files", train=10, test=5)
    (made.folder / "train-labels-idx1-ubyte.gz").write_bytes(idx_gz(np.zeros(9, np.uint8)))
    with (
        registered(with_checksums_of("mnist", made.folder)),
        pytest.raises(SourceFormatError, match="do not describe the same images"),
    ):
        public.install("mnist", store=local_store, source=made.folder)
    assert catalog.dataset_names(local_store) == []


def test_reader_by_name_reads_every_split_or_one(installed: Store, source: MnistSource) -> None:
    from datamount.readers import DatasetReader, reader

    expected = {
        split: [(pixels.tobytes(), str(label)) for pixels, label in zip(images, source.labels[split], strict=True)]
        for split, images in source.images.items()
    }
    assert list(reader("mnist", installed)()) == expected["train"] + expected["test"]
    test_rows = reader("mnist", installed, split="test")
    assert len(test_rows) == 90 and list(test_rows()) == expected["test"]
    resumed = DatasetReader.from_state_dict(test_rows.state_dict(consumed=30), installed)
    assert resumed.split == "test" and list(resumed()) == expected["test"][30:]
    with pytest.raises(DatasetNotFoundError, match="no 'valid' split"):
        reader("mnist", installed, split="valid")
