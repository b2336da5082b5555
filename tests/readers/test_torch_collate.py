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
        # Its bytes came through shared memory, as one tensor: not pickled sample by sample.
        assert batch.data.is_shared() and batch.data.dtype == torch.uint8 and batch.data.dim() == 1
        assert batch.offsets.tolist()[0] == 0 and batch.offsets.tolist()[-1] == batch.data.numel()
        (labels,) = batch.others
        seen.update(zip(labels, (sample.numpy().tobytes() for sample in batch.samples()), strict=True))
        pictures.update(zip(labels, batch.decode(decode_with_pil, "cpu"), strict=True))
    assert seen == {f"label{index}": data for index, data in enumerate(files)}
    for index, data in enumerate(files):
        assert pictures[f"label{index}"].device == torch.device("cpu")
        assert np.array_equal(pictures[f"label{index}"].numpy(), np.asarray(Image.open(io.BytesIO(data))))


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
