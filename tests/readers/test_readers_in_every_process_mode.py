"""The same script in every process mode, on every backend: a dataset reader inside the thread DataLoader, the
process DataLoader (fork and spawn), ``multiprocess_reader`` (fork and spawn), ``xmap_readers`` and PyTorch's
DataLoader workers yields every sample of the version, packed or not."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from datamount.readers import DataLoader, DatasetReader, multiprocess_reader, reader, xmap_readers
from datamount.storage import Store, StoreIOError
from tests.generated import PackedDataset, PackedImages, SharedDatasets

IMAGES = PackedImages("modes", count=24, size=600, shard_bytes=8_000, row_group_bytes=3_000)


def identity(sample: Any) -> Any:
    return sample


def through_loader(samples: DatasetReader, **options: Any) -> list[tuple[bytes, str]]:
    loader = DataLoader.from_generator(capacity=4, **options)
    loader.set_sample_generator(samples, batch_size=5, drop_last=False)
    rows = []
    for images, labels in loader():
        rows.extend(zip(images, labels, strict=True))
    return rows


def through_multiprocess_reader(samples: DatasetReader, method: str) -> list[tuple[bytes, str]]:
    return list(multiprocess_reader([samples, samples], mp_context=method)())


def through_torch(samples: DatasetReader) -> list[tuple[bytes, str]]:
    from torch.utils.data import DataLoader as TorchLoader

    from datamount.torch import ReaderDataset

    loader = TorchLoader(ReaderDataset(samples), batch_size=None, num_workers=2)
    return [(bytes(image), label) for image, label in loader]


MODES: dict[str, Callable[[DatasetReader], list[tuple[bytes, str]]]] = {
    "thread-dataloader": lambda samples: through_loader(samples),
    "process-dataloader-fork": lambda samples: through_loader(samples, use_multiprocess=True, mp_context="fork"),
    "process-dataloader-spawn": lambda samples: through_loader(samples, use_multiprocess=True, mp_context="spawn"),
    "multiprocess-reader-fork": lambda samples: through_multiprocess_reader(samples, "fork"),
    "multiprocess-reader-spawn": lambda samples: through_multiprocess_reader(samples, "spawn"),
    "xmap-readers": lambda samples: list(xmap_readers(identity, samples, 3, 16)()),
    "torch-workers": through_torch,
}


@pytest.fixture
def dataset(shared_store: Store, shared_datasets: SharedDatasets) -> PackedDataset:
    return shared_datasets.packed(shared_store, IMAGES)


def as_bytes(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` with memoryviews (a zero-copy reader's values) as bytes, sorted."""
    return sorted(tuple(bytes(value) if isinstance(value, memoryview) else value for value in row) for row in rows)


@pytest.mark.parametrize(
    ("packed", "zero_copy"), [(True, False), (False, False), (True, True)], ids=["packed", "unpacked", "zero-copy"]
)
@pytest.mark.parametrize("mode", MODES)
def test_every_sample_arrives_in_every_process_mode_on_every_backend(
    dataset: PackedDataset, mode: str, packed: bool, zero_copy: bool
) -> None:
    store = dataset.store
    if not store.shareable and "spawn" in mode:
        pytest.skip(f"{store.url} lives in this process's memory: a spawned worker has its own")
    if mode == "torch-workers" and importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed")
    if mode == "torch-workers" and zero_copy:
        pytest.skip("PyTorch's default_convert turns a memoryview (a sequence) into a list of ints: not for torch")
    samples = reader(dataset.name, store, use_shards=packed, zero_copy=zero_copy)
    # The parent reads first, as a script that evaluates first does.
    assert as_bytes(samples()) == sorted(dataset.rows)
    forked = "fork" in mode or mode == "torch-workers"
    if store.protocol == "hdfs" and forked:
        with pytest.raises(StoreIOError, match="start worker processes with the 'spawn' method"):
            MODES[mode](samples)
        return
    assert as_bytes(MODES[mode](samples)) == sorted(dataset.rows)
