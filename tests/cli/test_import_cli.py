"""``datamount import``: streams from real pipes become datasets; a broken stream commits nothing."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from datamount.datasets import verify
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.readers.errors import StreamFormatError
from datamount.readers.stream import import_stream, write_to
from datamount.storage import open_store
from tests.generated import MakeImageList

DATAMOUNT = [sys.executable, "-m", "datamount.cli.main"]


def stream_of(columns: tuple[str, ...], rows: list[tuple[object, ...]], *, finish: bool = True) -> bytes:
    buffer = io.BytesIO()
    writer = write_to(buffer)
    writer.set_columns(*columns)
    writer.write_many(rows)
    if finish:
        writer.close()
    else:
        writer.flush()
    return buffer.getvalue()


def test_a_pipeline_from_the_store_back_to_the_store(tmp_path: Path, make_image_list: MakeImageList) -> None:
    store = str(tmp_path / "store")
    upload(make_image_list(12), "raw", store=store)
    transform = (
        "from datamount.readers.stream import read_from, write_to\n"
        "with write_to('-') as out:\n"
        "    out.set_columns('size', 'label')\n"
        "    for image, label in read_from('-').rows():\n"
        "        out.write(len(image), int(label))\n"
    )
    pipeline = (
        f'{" ".join(DATAMOUNT)} cat raw --store {store} | {sys.executable} -c "{transform}" '
        f"| {' '.join(DATAMOUNT)} import sizes --store {store} -q"
    )
    result = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "imported sizes@1: 12 rows, columns size, label" in result.stdout
    expected = [(len(image), int(label)) for image, label in reader("raw", store)()]
    assert list(reader("sizes", store)()) == expected


def test_tensors_keep_dtype_and_shape_and_rows_are_addressable(tmp_path: Path) -> None:
    rows = [(np.arange(12, dtype=np.int16).reshape(3, 4) * i, f"n{i}") for i in range(40)]
    data = stream_of(("grid", "name"), rows)
    manifest = import_stream(io.BytesIO(data), "grids", store=str(tmp_path), row_group_bytes=200)
    assert (manifest.kind, manifest.rows, manifest.columns) == ("table", 40, ["grid", "name"])
    samples = reader("grids", str(tmp_path))
    for got, (grid, name) in zip(samples(), rows, strict=True):
        assert got[0].dtype == np.int16 and got[0].shape == (3, 4)
        assert np.array_equal(got[0], grid) and got[1] == name
    assert np.array_equal(samples[33][0], rows[33][0])
    assert verify(open_store(tmp_path), manifest).ok


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16], ids=["uint8", "int8", "uint16"])
@pytest.mark.parametrize("shape", ["fixed", "variable"])
def test_narrow_integer_images_take_about_their_own_bytes(tmp_path: Path, dtype: type, shape: str) -> None:
    """Parquet has no 8- or 16-bit type: written plainly as INT32, a uint8 image took four times its pixels and a
    uint16 one twice (dictionary-encoded: about 1x, and 1.3x for 16-bit noise, whose 65,536 values overflow it)."""
    chance = np.random.default_rng(5)
    info = np.iinfo(dtype)
    size = 1 if shape == "fixed" else 0
    images = [
        chance.integers(info.min, info.max, size=(120, 160 + i * (1 - size), 3), endpoint=True, dtype=dtype)
        for i in range(8)
    ]
    data = stream_of(("image", "label"), [(image, str(i)) for i, image in enumerate(images)])
    manifest = import_stream(io.BytesIO(data), "pixels", store=str(tmp_path))
    pixels = sum(image.nbytes for image in images)
    assert sum(shard.size for shard in manifest.shards) < (1.1 if info.bits == 8 else 1.35) * pixels + 20_000
    for got, image in zip(reader("pixels", str(tmp_path))(), images, strict=True):
        assert got[0].dtype == dtype and np.array_equal(got[0], image)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "the input is empty"),
        (b"not a stream at all", "not an Arrow IPC stream"),
        (stream_of(("x",), [(i,) for i in range(3000)])[:-3000], "cut short"),
        (stream_of(("x",), [(i,) for i in range(10)], finish=False), "without its end-of-stream marker"),
    ],
    ids=["empty", "garbage", "truncated", "unfinished"],
)
def test_a_broken_stream_commits_nothing(tmp_path: Path, data: bytes, message: str) -> None:
    result = subprocess.run(
        [*DATAMOUNT, "import", "d", "--store", str(tmp_path)], input=data, capture_output=True, check=False
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr.decode()
    assert b"Traceback" not in result.stderr
    assert open_store(tmp_path).list() == {}


def test_a_reserved_column_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StreamFormatError, match="'index' is reserved"):
        import_stream(io.BytesIO(stream_of(("index",), [(1,)])), "d", store=str(tmp_path))
