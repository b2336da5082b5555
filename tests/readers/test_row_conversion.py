"""Rows become Python values a slice of a batch at a time (``arrow_codec.batch_rows``): the values are those of the
whole batch, in order, for every column type; and a pass reuses the memory of the values it handed out before
instead of taking fresh pages from the system for every row group."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets import upload
from datamount.datasets.arrow_codec import ROWS_AT_ONCE, Decoder, batch_rows, column_decoder
from datamount.readers.stream import read_from, write_to

SIZES = [0, 1, ROWS_AT_ONCE - 1, ROWS_AT_ONCE, ROWS_AT_ONCE + 1, 2 * ROWS_AT_ONCE + 17]


def _decoders(batch: pa.RecordBatch) -> list[Decoder]:
    return [column_decoder(field, writable=False) for field in batch.schema]


@pytest.mark.parametrize("rows", SIZES)
def test_every_row_of_a_batch_in_order(rows: int) -> None:
    batch = pa.record_batch(
        {
            "text": [f"row {n}" if n % 7 else None for n in range(rows)],
            "data": [bytes([n % 256]) * (n % 5) for n in range(rows)],
            "label": list(range(rows)),
        }
    )
    expected = list(zip(*(column.to_pylist() for column in batch.columns), strict=True))
    assert list(batch_rows(batch, _decoders(batch))) == expected


@pytest.mark.parametrize("rows", SIZES)
def test_tensor_columns_across_slices(rows: int) -> None:
    """Fixed-shape tensors come from the right offsets of each slice (numpy views of one block per slice)."""
    tensors = np.arange(rows * 6, dtype=np.int16).reshape(rows, 2, 3)
    tensor_type = pa.fixed_shape_tensor(pa.int16(), [2, 3])
    column = pa.ExtensionArray.from_storage(tensor_type, pa.FixedSizeListArray.from_arrays(tensors.ravel(), 6))
    batch = pa.record_batch([column, pa.array(range(rows))], names=["tensor", "n"])
    found = list(batch_rows(batch, _decoders(batch)))
    assert [n for _, n in found] == list(range(rows))
    assert all(np.array_equal(tensor, tensors[n]) for tensor, n in found)


def test_a_batch_of_no_columns_has_its_rows() -> None:
    batch = pa.RecordBatch.from_pydict({"x": list(range(ROWS_AT_ONCE + 3))}).select([])
    assert list(batch_rows(batch, [])) == [()] * (ROWS_AT_ONCE + 3)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=40), start=st.integers(0, 40))
def test_any_slice_of_a_batch(values: list[str | None], start: int) -> None:
    """A batch that is itself a slice of another (an offset into its buffers) gives its own rows."""
    batch = pa.record_batch({"v": values}).slice(min(start, len(values)))
    assert [row[0] for row in batch_rows(batch, _decoders(batch))] == batch.column(0).to_pylist()


def test_a_stream_of_large_batches_reads_back(tmp_path: Path) -> None:
    """A stream written with batches larger than a slice reads back entry for entry."""
    path = tmp_path / "pairs.arrows"
    entries = [{"source": f"s{n}", "target": f"t{n}"} for n in range(2 * ROWS_AT_ONCE + 5)]
    with write_to(path, max_batch_entries=len(entries), max_batch_bytes=1 << 30) as writer:
        writer.set_columns("source", "target")
        for entry in entries:
            writer.write(entry["source"], entry["target"])
    with read_from(path) as stream:
        assert stream.batches == 0 and list(stream) == entries and stream.batches == 1


# --- memory: the values of a pass reuse the same pages ------------------------------------------------------------

PAIRS = 120_000

PASS_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from datamount.readers import reader
    samples = reader(sys.argv[2], sys.argv[1])
    for _ in samples():
        pass
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    count = sum(1 for _ in samples())
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before
    print(json.dumps({"rows": count, "faults": faults}))
    """
)


@pytest.mark.skipif(not hasattr(resource, "RUSAGE_THREAD"), reason="per-thread page faults are a Linux count")
def test_a_pass_over_text_pairs_reuses_the_memory_of_its_values(tmp_path: Path) -> None:
    """A second pass over 120,000 packed text pairs, in a fresh process: the thread that makes the Python values
    takes (almost) no fresh page from the system. Made a row group at a time, the values of each group (~5 MB here)
    came from new pages every time: 4,300 minor page faults in that pass."""
    list_file = tmp_path / "pairs.list"
    list_file.write_text(
        "".join(f"source sentence {n} of the pair\ttarget sentence {n} of the pair\n" for n in range(PAIRS)),
        encoding="utf-8",
    )
    store = tmp_path / "store"
    upload(list_file, "pairs", store=str(store), kind="text", packed=True)
    done = subprocess.run(
        [sys.executable, "-c", PASS_CHILD, str(store), "pairs"], capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout)
    assert found["rows"] == PAIRS
    assert found["faults"] < 500, found
