"""``datamount.torch.collate_bytes``: a batch of raw samples reaches the main process as one shared-memory tensor
with offsets, from real DataLoader workers (fork and spawn), and a decode hook makes them images there."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

from datamount.datasets.pack import pack  # noqa: E402
from datamount.datasets.upload import upload  # noqa: E402
from datamount.readers import reader  # noqa: E402
from datamount.storage import Store, open_store  # noqa: E402
from datamount.torch import ByteBatch, CollateBytes, ReaderDataset, collate_bytes, decoded, split_samples  # noqa: E402

ROWS = 37
BATCH = 8


def png(index: int) -> bytes:
    """A small PNG of its own size and colours, so that each decoded image is told apart."""
    pixels = np.random.default_rng(index).integers(0, 256, size=(4 + index % 5, 3 + index % 7, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, list[bytes]]:
    folder = tmp_path_factory.mktemp("collate")
    (folder / "img").mkdir()
    files = [png(index) for index in range(ROWS)]
    for index, data in enumerate(files):
        (folder / "img" / f"{index}.png").write_bytes(data)
    listing = folder / "images.list"
    listing.write_text("".join(f"img/{index}.png\tlabel{index}\n" for index in range(ROWS)), encoding="utf-8")
    store = open_store(str(folder / "store"))
    upload(listing, "images", store=store)
    pack("images", store=store, row_group_bytes=2_000, shard_bytes=8_000)
    return store, files


#: How a worker's segment of shared memory for batches shows in ``/proc/self/maps``.
WORKER_SEGMENT = "/memfd:datamount-batch (deleted)"


def mapping_of(tensor: torch.Tensor) -> tuple[str, int]:
    """The name and start address of the mapping of this process that holds ``tensor``'s first byte."""
    address = tensor.data_ptr()
    for line in Path("/proc/self/maps").read_text(encoding="utf-8").splitlines():
        fields = line.split(maxsplit=5)
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        if low <= address < high:
            return (fields[5] if len(fields) > 5 else ""), low
    raise AssertionError(f"no mapping holds address {address:#x}")


def one_sample_batches(store: Store) -> torch.utils.data.DataLoader:
    """A loader of one worker whose batches are each one sample, so that the epoch is many batches."""
    return torch.utils.data.DataLoader(
        ReaderDataset(reader("images", store, zero_copy=True)), batch_size=1, num_workers=1, collate_fn=collate_bytes
    )


def decode_with_pil(data: torch.Tensor, offsets: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
    """A decode hook (what ``torchvision.io.decode_jpeg(split_samples(data, offsets), device=device)`` does on a
    GPU): each sample's bytes to an HWC ``uint8`` tensor on ``device``."""
    return [
        torch.from_numpy(np.array(Image.open(io.BytesIO(sample.numpy().tobytes())))).to(device)
        for sample in split_samples(data, offsets)
    ]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_batches_from_workers_arrive_as_one_shared_tensor_and_decode_on_the_device(
    images: tuple[Store, list[bytes]], context: str
) -> None:
    store, files = images
    loader = torch.utils.data.DataLoader(
        ReaderDataset(reader("images", store)),
        batch_size=BATCH,
        num_workers=2,
        multiprocessing_context=context,
        collate_fn=collate_bytes,
    )
    seen: dict[str, bytes] = {}
    pictures: dict[str, torch.Tensor] = {}
    for batch in loader:
        assert isinstance(batch, ByteBatch) and 0 < len(batch) <= BATCH
        # Its bytes came through the worker's shared memory, as one tensor: not pickled sample by sample.
        assert mapping_of(batch.data)[0] == WORKER_SEGMENT
        assert batch.data.dtype == torch.uint8 and batch.data.dim() == 1
        assert batch.offsets.tolist()[0] == 0 and batch.offsets.tolist()[-1] == batch.data.numel()
        (labels,) = batch.others
        seen.update(zip(labels, (sample.numpy().tobytes() for sample in batch.samples()), strict=True))
        pictures.update(zip(labels, batch.decode(decode_with_pil, "cpu"), strict=True))
    assert seen == {f"label{index}": data for index, data in enumerate(files)}
    for index, data in enumerate(files):
        assert pictures[f"label{index}"].device == torch.device("cpu")
        assert np.array_equal(pictures[f"label{index}"].numpy(), np.asarray(Image.open(io.BytesIO(data))))


def test_a_worker_reuses_its_memory_only_once_every_view_of_a_batch_in_it_is_gone(
    images: tuple[Store, list[bytes]],
) -> None:
    store, files = images
    kept: dict[str, torch.Tensor] = {}
    segments: list[int] = []
    for index, batch in enumerate(one_sample_batches(store)):
        name, start = mapping_of(batch.data)
        assert name == WORKER_SEGMENT
        segments.append(start)
        if index in (0, 1, 2):  # a view of a sample outlives its batch
            kept[batch.others[0][0]] = batch.samples()[0]
        del batch  # the next batch comes while this one's memory is still held, as in a training loop
    assert len(segments) == ROWS
    # A few segments served every batch: the three still held, and the ones given back after each batch.
    assert len(set(segments)) < 8
    for label, sample in kept.items():
        assert sample.numpy().tobytes() == files[int(label.removeprefix("label"))]


def test_batches_held_past_the_workers_segments_come_in_fresh_shared_memory(
    images: tuple[Store, list[bytes]],
) -> None:
    store, files = images
    batches = list(one_sample_batches(store))
    names = [mapping_of(batch.data)[0] for batch in batches]
    lent = names.count(WORKER_SEGMENT)
    # The worker lent what it keeps, then each batch came in memory of its own, as default_collate's tensors do.
    assert 0 < lent < ROWS and len({mapping_of(batch.data)[1] for batch in batches}) == ROWS
    assert all(batch.data.is_shared() for batch, name in zip(batches, names, strict=True) if name != WORKER_SEGMENT)
    seen = {batch.others[0][0]: batch.samples()[0].numpy().tobytes() for batch in batches}
    assert seen == {f"label{index}": data for index, data in enumerate(files)}


def pickled_batch(samples: list[tuple[bytes, str]]) -> bytes:
    return pickle.dumps(collate_bytes(samples))


def test_a_batch_from_a_worker_is_received_once(images: tuple[Store, list[bytes]]) -> None:
    store, files = images
    loader = torch.utils.data.DataLoader(
        ReaderDataset(reader("images", store)), batch_size=4, num_workers=1, collate_fn=pickled_batch
    )
    batches = iter(loader)  # its worker lives while it does: the first receiver takes the descriptor from it
    pickled = next(batches)
    batch = pickle.loads(pickled)
    assert batch.samples()[0].numpy().tobytes() == files[0]
    with pytest.raises(RuntimeError, match="was unpickled twice"):
        pickle.loads(pickled)


def test_decoded_batches_carry_their_other_columns() -> None:
    batches = [collate_bytes([(png(0), "a"), (png(1), "b")]), collate_bytes([(png(2), "c")])]
    found = [(label, image.shape) for images, labels in decoded(batches, decode_with_pil) for image, label in
             zip(images, labels, strict=True)]  # fmt: skip
    assert found == [(label, np.asarray(Image.open(io.BytesIO(png(i)))).shape) for i, label in enumerate("abc")]


def test_in_this_process_a_batch_is_plain_memory_and_its_samples_are_views() -> None:
    samples = [(b"abc", "x", 1), (b"", "y", 2), (memoryview(b"defg"), "z", 3)]
    batch = collate_bytes(samples)
    assert not batch.data.is_shared()
    assert [sample.numpy().tobytes() for sample in batch.samples()] == [b"abc", b"", b"defg"]
    assert batch.offsets.tolist() == [0, 3, 3, 7] and len(batch) == 3
    assert batch.others == (["x", "y", "z"], [1, 2, 3])
    assert batch.samples()[2].data_ptr() == batch.data.data_ptr() + 3  # a view, not a copy
    assert pickle.loads(pickle.dumps(CollateBytes(column=1))) == CollateBytes(column=1)
    by_label = CollateBytes(column=1)([(b"a", b"label")])
    assert by_label.data.numpy().tobytes() == b"label" and by_label.others == ([b"a"],)


def test_an_empty_batch_and_a_wrong_column_are_named() -> None:
    empty = collate_bytes([])
    assert len(empty) == 0 and empty.data.numel() == 0 and empty.others == ()
    with pytest.raises(TypeError, match=r"CollateBytes\(column=0\) takes samples whose column 0 is bytes, not str"):
        collate_bytes([("text", "label")])
    with pytest.raises(ValueError, match="column"):
        CollateBytes(column=-1)


def test_a_pinned_batch_keeps_its_bytes(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("pinned memory needs a CUDA device")
    batch = collate_bytes([(b"abc", "x")]).pin_memory()
    assert batch.data.is_pinned() and batch.samples()[0].numpy().tobytes() == b"abc"
