"""One small version of each layout a row source reads, for the tests of front ends that read any of them (row
tables, ``datamount.ray``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from datamount.datasets.importing import import_batches
from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.storage import Store
from tests.generated import write_image_list

#: Rows of each version; small row groups, so that each version has many.
ROWS = 120
SMALL = {"shard_bytes": 60_000, "row_group_bytes": 8_000}
#: The layouts: an image version packed and not, a text version unpacked and packed (with row splits), a table.
LAYOUTS = ("image-packed", "image", "text", "text-packed", "table")
#: The split every version but the table has, and its share.
SPLITS = {"train": 0.7, "val": 0.3}


def table_rows(count: int) -> pa.Table:
    """A table of ``count`` rows: an id, text, bytes, a float and a 2x3 ``uint8`` tensor per row."""
    images = np.arange(count * 6, dtype=np.uint8).reshape(count, 2, 3)
    return pa.table(
        {
            "id": pa.array(range(count), pa.int64()),
            "caption": [f"caption {i} {'x' * (i % 17)}" for i in range(count)],
            "blob": [bytes([i % 256]) * (50 + i) for i in range(count)],
            "score": [i / 7 for i in range(count)],
            "pixels": pa.FixedShapeTensorArray.from_numpy_ndarray(images),
        }
    )


def make_layout(store: Store, folder: Path, layout: str) -> str:
    """Version ``layout`` (one of :data:`LAYOUTS`) of a dataset of that name on ``store``; its name."""
    if layout.startswith("image"):
        listing = write_image_list(folder / layout, ROWS, size=700)
        upload(listing, layout, store=store, split=SPLITS, split_seed=5, packed=layout == "image-packed",
               **(SMALL if layout == "image-packed" else {}))  # fmt: skip
    elif layout.startswith("text"):
        listing = folder / f"{layout}.list"
        listing.write_text("".join(f"source {i} {'y' * (i % 23)}\ttarget {i}\n" for i in range(ROWS)))
        upload(listing, layout, store=store, split=SPLITS, split_seed=5)
        if layout == "text-packed":
            pack(layout, store=store, **SMALL)
    else:
        table = table_rows(ROWS)
        import_batches(table.to_batches(max_chunksize=25), table.schema, layout, store=store, **SMALL)
    return layout
