"""MNIST handwritten digits: the public dataset ``mnist`` and Paddle-compatible reader creators.

The dataset holds 70,000 rows ``(image, label)``: ``image`` the 784 raw pixel bytes of a 28x28 grey image (row by
row, 0 white to 255 black, as in the IDX files), ``label`` the digit as a string; the splits ``train`` (60,000 rows)
then ``test`` (10,000), in the order of the published files.

``train()`` and ``test()`` yield what ``paddle.dataset.mnist`` yields: ``(float32[784] scaled to [-1, 1], int)``.
Shown as files (``export``, ``datamount mount``), each image is a grey PNG at ``SPLIT/LABEL/NUMBER.png``.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from datamount.datasets.errors import SourceFormatError
from datamount.datasets.progress import Progress
from datamount.datasets.public.spec import PublicDataset, RemoteFile, Sources
from datamount.datasets.public.splits import SplitReader
from datamount.datasets.public.writer import PublicWriter
from datamount.datasets.row_folders import RowFiles
from datamount.datasets.rows import Row
from datamount.storage import Store

NAME = "mnist"
_PADDLE = "https://dataset.bj.bcebos.com/mnist/"
_TORCHVISION = "https://ossci-datasets.s3.amazonaws.com/mnist/"


def _published(name: str, md5: str, size: int) -> RemoteFile:
    return RemoteFile(name, md5, (_PADDLE + name, _TORCHVISION + name), size)


FILES = (
    _published("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9_912_422),
    _published("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28_881),
    _published("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1_648_877),
    _published("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4_542),
)
#: Each split's (images, labels) files.
SPLIT_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
IDX_UBYTE = 0x08
#: Rows turned into arrays at once by the readers (a few numpy operations per block instead of per row).
_BLOCK_ROWS = 1024
#: Rows handed to the writer at once while installing.
_CHUNK_ROWS = 65_536
#: An MNIST image's width (and height), in pixels.
WIDTH = 28
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The most bytes a stored (uncompressed) deflate block holds.
_STORED_BLOCK = 65_535


def read_idx(path: str | Path) -> np.ndarray:
    """The unsigned-byte array held by a gzip IDX file (shape from its header), or :class:`SourceFormatError`."""
    try:
        data = gzip.decompress(Path(path).read_bytes())
    except (OSError, EOFError, zlib.error) as exc:
        raise SourceFormatError(f"{path} is not a gzip file: {exc}") from exc
    if len(data) < 4 or data[0:2] != b"\0\0" or data[2] != IDX_UBYTE or not 1 <= data[3] <= 4:
        raise SourceFormatError(f"{path} is not an IDX file of unsigned bytes (its header is {data[:4].hex()})")
    dims = data[3]
    header = 4 + 4 * dims
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(data) != expected:
        raise SourceFormatError(f"{path}: its header announces {expected:,} bytes, the file holds {len(data):,}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def _build(sources: Sources, writer: PublicWriter, progress: Progress) -> None:
    progress.start("convert", items=len(SPLIT_FILES), size=0)
    for split, (images_name, labels_name) in SPLIT_FILES.items():
        images, labels = read_idx(sources.file(images_name)), read_idx(sources.file(labels_name))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise SourceFormatError(
                f"{images_name} ({'x'.join(map(str, images.shape))}) and {labels_name} "
                f"({'x'.join(map(str, labels.shape))}) do not describe the same images"
            )
        writer.used(images_name)
        writer.used(labels_name)
        writer.start_split(split)
        pixels = images.reshape(len(images), -1)
        for start in range(0, len(pixels), _CHUNK_ROWS):  # binary offsets are 32-bit: keep each chunk well under
            stop = min(start + _CHUNK_ROWS, len(pixels))
            writer.add_columns(
                [_binary_rows(pixels[start:stop]), pa.array(labels[start:stop]).cast(pa.string())],
                paths=pa.array([f"{images_name}#{index}" for index in range(start, stop)]),
            )
        progress.advance()
    progress.finish()


def _binary_rows(pixels: np.ndarray) -> pa.Array:
    """Each row of a 2-d uint8 array as one binary value, sharing the array's memory."""
    count, width = pixels.shape
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(pixels)])


def png_of_row(row: Row) -> bytes:
    """A row's image as a file: its pixels as an 8-bit grey PNG 28 pixels wide."""
    return grey_png(row[0], WIDTH)


def grey_png(pixels: bytes, width: int) -> bytes:
    """``pixels`` (row by row, one byte each) as an 8-bit grey PNG ``width`` pixels wide, each grey level the byte as
    it is (0 black: the IDX values, as torchvision's ``MNIST`` shows them). The image data is stored, not compressed:
    every encoder writes the same bytes, so that a file's size and checksum do not depend on a zlib version."""
    if not pixels or len(pixels) % width:
        raise SourceFormatError(f"an image of {len(pixels)} bytes is not rows of {width} pixels")
    height = len(pixels) // width
    lines = np.zeros((height, width + 1), np.uint8)  # each scanline: its filter (0, none), then its pixels
    lines[:, 1:] = np.frombuffer(pixels, np.uint8).reshape(height, width)
    scanlines = lines.tobytes()
    stream = [b"\x78\x01"]  # zlib: deflate, 32 KB window, no dictionary
    for start in range(0, len(scanlines), _STORED_BLOCK):
        block = scanlines[start : start + _STORED_BLOCK]
        final = start + _STORED_BLOCK >= len(scanlines)
        stream.append(struct.pack("<BHH", final, len(block), 0xFFFF ^ len(block)) + block)  # stored: its length twice
    stream.append(struct.pack(">I", zlib.adler32(scanlines)))
    return _png_start(width, height) + _chunk(b"IDAT", b"".join(stream)) + _PNG_END


@functools.cache
def _png_start(width: int, height: int) -> bytes:
    """A PNG's signature and header: 8-bit grey, not interlaced."""
    return _PNG_SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


_PNG_END = _chunk(b"IEND", b"")


SPEC = PublicDataset(
    name=NAME,
    title="MNIST handwritten digits: 28x28 grey images, labels 0-9 (60,000 train, 10,000 test)",
    kind="image",
    columns=("image", "label"),
    splits=tuple(SPLIT_FILES),
    files=FILES,
    build=_build,
    source_help="a folder holding the four IDX .gz files (Paddle's ~/.cache/paddle/dataset/mnist works)",
    row_files=RowFiles("{split}/{label}/{number}.png", png_of_row),
)


class MnistReader(SplitReader):
    """Paddle's MNIST samples from an installed split: ``(float32[784] in [-1, 1], int label)``."""

    def __call__(self) -> Iterator[tuple[np.ndarray, int]]:
        with self.rows() as rows:
            while block := list(itertools.islice(rows, _BLOCK_ROWS)):
                images, labels = zip(*block, strict=True)
                yield from zip(scaled_pixels(b"".join(images), len(block)), map(int, labels), strict=True)


def scaled_pixels(raw: bytes, count: int) -> np.ndarray:
    """``count`` images' raw pixels as Paddle scales them: ``pixel / 255 * 2 - 1``, each step in float32."""
    pixels = np.frombuffer(raw, np.uint8).reshape(count, -1).astype(np.float32)
    pixels /= 255.0
    pixels *= 2.0
    pixels -= 1.0
    return pixels


def train(*, store: Store | str | None = None) -> MnistReader:
    """The training split (60,000 samples) as a Paddle reader creator: ``(float32[784] in [-1, 1], int)``."""
    return MnistReader(NAME, "train", store)


def test(*, store: Store | str | None = None) -> MnistReader:
    """The test split (10,000 samples) as a Paddle reader creator: ``(float32[784] in [-1, 1], int)``."""
    return MnistReader(NAME, "test", store)
