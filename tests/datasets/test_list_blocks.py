"""The blocks of a normalised list: recorded as the list is written, whatever pieces it is written in, and what
a reader reads a row's block by."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, layout, upload
from datamount.datasets.list_blocks import LINES_PER_BLOCK, ListBlocks, ListBlocksWriter, blocks_of
from datamount.datasets.rows.listed import list_rows
from datamount.storage import IntegrityError, Store

#: Lines as a normalised list holds them: UTF-8 (no lone surrogates), no TAB or line break inside a value.
LINES = st.lists(
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\t\n\r"), max_size=12), max_size=60
).map(lambda values: [(value + "\n").encode() for value in values])


@settings(max_examples=200, deadline=None)
@given(lines=LINES, per_block=st.integers(1, 7), cuts=st.lists(st.integers(0, 60), max_size=8))
def test_blocks_are_the_same_whatever_pieces_the_lines_come_in(
    lines: list[bytes], per_block: int, cuts: list[int]
) -> None:
    writer = ListBlocksWriter(per_block)
    written = b""
    bounds = [0, *sorted(cut for cut in cuts if cut <= len(lines)), len(lines)]
    for start, stop in itertools.pairwise(bounds):
        written += b"".join(writer.add(lines[start:stop]))
    blocks = writer.finish()
    raw = b"".join(lines)
    assert written == raw and blocks == blocks_of(raw, per_block)
    assert len(blocks) == -(-len(lines) // per_block)
    for block in range(len(blocks)):  # each block's range holds its lines, and its checksum is theirs
        start, end = blocks.byte_range(block, len(raw))
        assert raw[start:end] == b"".join(lines[block * per_block : (block + 1) * per_block])
        blocks.check(block, raw[start:end], "the list")
    for first in range(len(lines) + 1):
        for stop in range(first, len(lines) + 1):
            covered = blocks.covering(first, stop)
            assert all(block * per_block < stop and (block + 1) * per_block > first for block in covered)
            assert sum(min(stop, (b + 1) * per_block) - max(first, b * per_block) for b in covered) == stop - first


def test_a_damaged_block_names_its_rows() -> None:
    raw = b"".join(f"row {i}\tlabel\n".encode() for i in range(10))
    blocks = blocks_of(raw, 4)
    damaged = bytearray(raw)
    start, _ = blocks.byte_range(1, len(raw))
    damaged[start] ^= 0x01
    with pytest.raises(IntegrityError, match=r"store/list: rows 4 to 7 \(bytes 48 on\) do not match"):
        blocks.check_whole(bytes(damaged), "store/list")
    blocks.check_whole(raw, "store/list")


def test_blocks_that_do_not_match_their_checksums_are_refused() -> None:
    with pytest.raises(ValueError, match="2 offsets, 1 xxh3"):
        ListBlocks(4, [0, 10], ["0" * 16])


def test_an_upload_records_its_lists_blocks(local_store: Store, tmp_path: Path) -> None:
    rows = [f"sentence {i}\tlabel {i % 3}\n" for i in range(3 * LINES_PER_BLOCK + 5)]
    (tmp_path / "text.list").write_text("".join(rows), encoding="utf-8")
    manifest = upload(tmp_path / "text.list", "text", store=local_store, kind="text").manifest
    stored = local_store.read(layout.list_path(manifest))
    assert manifest.list_blocks == blocks_of(stored) and len(manifest.list_blocks) == 4
    assert catalog.resolve(local_store, "text").list_blocks == manifest.list_blocks  # through the JSON
    last = manifest.list_blocks.byte_range(3, manifest.list_size)
    assert list_rows(stored[slice(*last)]) == [tuple(row[:-1].split("\t")) for row in rows[-5:]]
