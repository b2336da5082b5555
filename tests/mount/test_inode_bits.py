"""What the mount records of every file the kernel knows is a bit each (``mount/inode_bits.py``): the same answers
as a ``set`` of the numbers, whatever is added and taken away, in a fraction of its memory."""

from __future__ import annotations

import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from datamount.datasets.tree import ROOT_INODE, Node
from datamount.mount.inode_bits import BLOCK_BITS, InodeBits
from datamount.mount.push import PageCacheFiller

NUMBERS = st.integers(min_value=0, max_value=10**10)


@given(st.lists(st.tuples(st.sampled_from(["add", "discard"]), NUMBERS), max_size=200), st.lists(NUMBERS, max_size=20))
def test_the_bits_answer_as_a_set_of_the_numbers(operations: list[tuple[str, int]], probes: list[int]) -> None:
    bits, numbers = InodeBits(), set[int]()
    for operation, number in operations:
        getattr(bits, operation)(number)
        getattr(numbers, operation)(number)
    for number in [*probes, *(number for _, number in operations), *(n ^ 1 for _, n in operations)]:
        assert (number in bits) == (number in numbers)
    assert "1" not in bits and None not in bits


def test_the_filler_holds_a_bit_for_each_file_the_kernel_was_told_of() -> None:
    """200,000 files listed (readdirplus tells the kernel of each): a set of their numbers held 13 MB."""
    filler = PageCacheFiller(lambda inode, offset, data: None, lambda node, unit: b"", lambda node: None)
    files = 200_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for row in range(files):
            filler.listed(Node(f"{row}.jpg", None, ROOT_INODE + 1 + row))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 2 * (files // BLOCK_BITS + 1) * BLOCK_BITS // 8 + 10_000, held
