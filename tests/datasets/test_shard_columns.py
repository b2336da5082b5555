"""The shard writer's columns from Python values: the same arrays pyarrow builds, without importing pandas."""

from __future__ import annotations

import array
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets.shard_writer import column, numbered


@settings(deadline=None)  # the reference, pa.array, imports pandas on its first call
@given(st.lists(st.binary(max_size=64), max_size=50))
def test_bytes_become_the_binary_array_pyarrow_makes(values: list[bytes]) -> None:
    built = column(values, pa.binary())
    built.validate(full=True)
    assert built.equals(pa.array(values, type=pa.binary()))


@settings(deadline=None)
@given(st.lists(st.text(max_size=20), max_size=50))
def test_strings_become_the_string_array_pyarrow_makes(values: list[str]) -> None:
    built = column(values, pa.string())
    built.validate(full=True)
    assert built.equals(pa.array(values, type=pa.string()))


def test_values_that_do_not_fit_fail_as_pyarrow_fails() -> None:
    with pytest.raises(pa.ArrowTypeError):
        column(["a", 1], pa.string())
    with pytest.raises(UnicodeEncodeError):
        column(["\ud800"], pa.string())  # a lone surrogate has no UTF-8
    wide = memoryview(array.array("i", [1, 2]))  # len() 2, 8 bytes: built by pyarrow, from its bytes
    assert column([wide], pa.binary()).to_pylist() == [wide.tobytes()]
    assert numbered(5, 3).to_pylist() == [5, 6, 7]


def test_columns_import_no_pandas() -> None:
    """pyarrow imports pandas (when it is installed) the first time ``pa.array`` gets a list: 0.17-0.41 s here."""
    pytest.importorskip("pandas")
    code = (
        "import sys, pyarrow as pa\n"
        "from datamount.datasets.shard_writer import column, numbered\n"
        "column([b'x'], pa.binary()); column(['y'], pa.string()); numbered(0, 2)\n"
        "print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
