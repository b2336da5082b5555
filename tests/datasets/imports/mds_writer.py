"""Writes the MDS datasets of ``test_mds.py`` with MosaicML Streaming's own ``MDSWriter`` and records, in
``expected.json``, what its own reader (``StreamingDataset``) yields for each sample.

Run with a Python that imports ``streaming`` (mosaicml-streaming 0.13; its package imports torchvision):
``python tests/datasets/imports/mds_writer.py OUT``. ``tests/datasets/imports/mds_fixture`` was written so, once; the
test that runs this script again skips where no such Python is found. Values are recorded as JSON: bytes in base64,
images as their mode, size and the sha256 of their pixels, arrays as their dtype, shape and values.
"""

from __future__ import annotations

import base64
import decimal
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from streaming import MDSWriter, StreamingDataset

ROWS = 8
COLUMNS = {
    "bytes": "bytes",
    "str": "str",
    "int": "int",
    "int8": "int8",
    "uint16": "uint16",
    "int32": "int32",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "json": "json",
    "str_int": "str_int",
    "str_float": "str_float",
    "str_decimal": "str_decimal",
    "jpeg": "jpeg",
    "png": "png",
    "pil": "pil",
    "ndarray": "ndarray:int16:2,3",
    "pkl": "pkl",
}
COMPRESSIONS = ["br", "bz2", "gz:5", "snappy", "zstd"]


def image(row: int) -> Image.Image:
    return Image.fromarray(np.full((2, 3, 3), row * 20, np.uint8))


def sample(row: int) -> dict[str, Any]:
    jpeg = io.BytesIO()
    image(row).save(jpeg, format="JPEG")
    return {
        "bytes": bytes(range(row)) * 3,
        "str": f"sample {row} é",
        "int": row * 10**12 - 7,
        "int8": np.int8(-row),
        "uint16": np.uint16(row * 1000),
        "int32": np.int32(-row * 70000),
        "uint64": np.uint64(2**63 + row),
        "float16": np.float16(row / 3),
        "float32": np.float32(row / 7),
        "float64": row / 11,
        "json": {"row": row, "tags": ["a"] * row, "nested": {"ok": row % 2 == 0}},
        "str_int": -row * 123,
        "str_float": row / 13,
        "str_decimal": decimal.Decimal(f"{row}.{row}0"),
        "jpeg": Image.open(io.BytesIO(jpeg.getvalue())),
        "png": image(row + 1),
        "pil": image(row + 2),
        "ndarray": np.arange(6, dtype=np.int16).reshape(2, 3) * row,
        "pkl": ("row", row),
    }


def recorded(value: Any) -> Any:
    """``value`` as streaming's reader gave it, as JSON."""
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, Image.Image):
        return {"image": [value.mode, list(value.size), hashlib.sha256(value.tobytes()).hexdigest()]}
    if isinstance(value, np.ndarray):
        return {"ndarray": [str(value.dtype), list(value.shape), value.tolist()]}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, tuple):
        return {"tuple": list(value)}
    if isinstance(value, (dict, list)):
        return {"json": value}
    return value


def main(out: Path) -> None:
    with MDSWriter(out=str(out / "plain"), columns=COLUMNS, hashes=["md5", "sha1", "xxh64"], size_limit=1500) as w:
        for row in range(ROWS):
            w.write(sample(row))
    for compression in COMPRESSIONS:
        folder = out / "compressed" / compression.split(":")[0]
        with MDSWriter(
            out=str(folder),
            columns={"b": "bytes", "s": "str"},
            compression=compression,
            hashes=["sha256"],
            size_limit=500,
        ) as w:
            for row in range(ROWS):
                w.write({"b": bytes([row]) * 40, "s": f"{compression} {row}" * 3})
    expected: dict[str, Any] = {"plain": read(out / "plain", None)}
    expected["compressed"] = {
        split: read(out / "compressed", split) for split in sorted(p.name for p in (out / "compressed").iterdir())
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def read(local: Path, split: str | None) -> list[dict[str, Any]]:
    dataset = StreamingDataset(local=str(local), split=split, shuffle=False, batch_size=1, allow_unsafe_types=True)
    return [{key: recorded(value) for key, value in dataset[index].items()} for index in range(dataset.num_samples)]


if __name__ == "__main__":
    main(Path(sys.argv[1]))
