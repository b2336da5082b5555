"""``datamount.torch.collate_bytes``: a batch of raw samples reaches the main process as one shared-memory tensor
with offsets, from real DataLoader workers (fork and spawn), and a decode hook makes them images there; a batch's
bytes are its own even when its worker has an ended worker's pid, and a segment written over by another process is an
error."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

from datamount.datasets.pack import pack  # noqa: E402
from datamount.datasets.upload import upload  # noqa: E402
from datamount.readers import reader  # noqa: E402
from datamount.storage import IntegrityError, Store, open_store  # noqa: E402
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


#: Epochs of a loader whose workers end with each epoch, in a pid namespace of its own where each epoch's first worker
#: is given the lowest pid of the previous epoch's workers (``ns_last_pid``, as pids wrapping on a long job would):
#: prints, for each epoch, its workers' pids, the sha256 of each sample received (by label), the inodes of the
#: segments its batches came in, and those of the workers' segments still mapped here once the epoch is over.
PID_REUSE_SCRIPT = textwrap.dedent(
    """
    import hashlib, json, multiprocessing, sys
    from pathlib import Path
    import torch
    from datamount.readers import reader
    from datamount.storage import open_store
    from datamount.torch import ReaderDataset, collate_bytes

    SEGMENT = "/memfd:datamount-batch (deleted)"

    def mappings():
        for line in Path("/proc/self/maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            low, high = (int(bound, 16) for bound in fields[0].split("-"))
            yield low, high, int(fields[4]), fields[5] if len(fields) > 5 else ""

    def inode_of(tensor):
        return next(inode for low, high, inode, name in mappings() if low <= tensor.data_ptr() < high)

    url, context, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    loader = torch.utils.data.DataLoader(
        ReaderDataset(reader("images", open_store(url))),
        batch_size=4,
        num_workers=2,
        multiprocessing_context=context,
        persistent_workers=False,
        collate_fn=collate_bytes,
    )
    report = []
    for epoch in range(epochs):
        if report:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(min(report[-1]["pids"]) - 1))
        batches = iter(loader)
        pids = sorted(child.pid for child in multiprocessing.active_children())
        samples, segments = {}, set()
        for batch in batches:
            segments.add(inode_of(batch.data))
            (labels,) = batch.others
            for label, sample in zip(labels, batch.samples(), strict=True):
                samples[label] = hashlib.sha256(sample.numpy().tobytes()).hexdigest()
            del batch, sample
        del batches
        mapped = sorted({inode for _, _, inode, name in mappings() if name == SEGMENT})
        report.append({"pids": pids, "samples": samples, "segments": sorted(segments), "mapped": mapped})
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def private_pid_namespace() -> list[str]:
    """A command prefix running a program as pid 1 of a pid namespace of its own, with its own /proc (needs root and
    unshare), where it may choose the next pid by writing ``/proc/sys/kernel/ns_last_pid``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) to run a loader in a pid namespace of its own")
    prefix = [unshare, "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run(
        [*prefix, "sh", "-c", "echo 41 > /proc/sys/kernel/ns_last_pid && sh -c 'echo $$'"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "42":
        pytest.skip(f"cannot choose the next pid in a private pid namespace here: {probe.stderr.strip()}")
    return prefix


@pytest.mark.timeout(300)
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_worker_given_an_ended_workers_pid_sends_its_own_bytes(
    images: tuple[Store, list[bytes]], private_pid_namespace: list[str], context: str
) -> None:
    store, files = images
    epochs = 3
    result = subprocess.run(
        [*private_pid_namespace, sys.executable, "-c", PID_REUSE_SCRIPT, store.url, context, str(epochs)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # Each epoch's workers ended with it, and a worker of the next epoch had the pid of one of them.
    for earlier, later in itertools.pairwise(report):
        assert len(later["pids"]) == 2 and set(earlier["pids"]) & set(later["pids"])
    expected = {f"label{index}": hashlib.sha256(data).hexdigest() for index, data in enumerate(files)}
    for number, epoch in enumerate(report):
        wrong = sorted(label for label, digest in epoch["samples"].items() if digest != expected.get(label))
        assert wrong == [], f"epoch {number}: {len(wrong)} samples came with other bytes than the reader's"
        assert epoch["samples"].keys() == expected.keys()
    # Once the next epoch's workers have sent their batches, no segment of the ended workers stays mapped.
    for earlier, later in itertools.pairwise(report):
        assert not set(earlier["segments"]) & set(later["mapped"])


def test_a_batch_whose_segment_another_process_wrote_over_is_an_error_not_bytes(
    images: tuple[Store, list[bytes]],
) -> None:
    store, files = images
    before = set(multiprocessing.active_children())
    batches = iter(one_sample_batches(store))
    (worker,) = set(multiprocessing.active_children()) - before
    first = next(batches)
    assert first.samples()[0].numpy().tobytes() == files[0]
    # Another process writes over the header of every segment the worker has made (all but the two bytes that lend
    # it): the segment the first batch is in comes back to the worker when the batch is dropped, and is the next
    # one it writes a batch into.
    folder = Path(f"/proc/{worker.pid}/fd")
    overwritten = 0
    for entry in folder.iterdir():
        try:
            if os.readlink(entry) != WORKER_SEGMENT:
                continue
            descriptor = os.open(entry, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            os.pwrite(descriptor, os.urandom(62), 2)
        finally:
            os.close(descriptor)
        overwritten += 1
    assert overwritten > 0
    del first
    with pytest.raises(IntegrityError, match=f"from DataLoader worker {worker.pid} .* header"):
        for batch in batches:
            label = batch.others[0][0]
            assert batch.samples()[0].numpy().tobytes() == files[int(label.removeprefix("label"))]
    del batches


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
