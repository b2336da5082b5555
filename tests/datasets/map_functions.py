"""Functions for ``pack --map`` tests, imported by reference (``tests.datasets.map_functions:NAME``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

#: Set to a row's source text to make :func:`flaky` fail there (a job killed mid-run).
FAIL_AT = "DATAMOUNT_TEST_MAP_FAIL_AT"
#: A file each call of :func:`flaky` appends its row's source text to.
CALLS = "DATAMOUNT_TEST_MAP_CALLS"


def lengths(row: tuple[Any, ...]) -> dict[str, Any]:
    source, target = row
    return {"source": source, "words": len(source.split()), "marks": np.full((2, 3), len(target), dtype=np.uint8)}


def flaky(row: tuple[Any, ...]) -> dict[str, Any]:
    source, _ = row
    with open(os.environ[CALLS], "a", encoding="utf-8") as calls:
        calls.write(source + "\n")
    if source == os.environ.get(FAIL_AT):
        raise OSError(f"simulated crash at {source}")
    return {"source": source, "size": len(source)}


def not_a_dict(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return row


def changing_columns(row: tuple[Any, ...]) -> dict[str, Any]:
    return {"a": 1} if row[0].split()[0] != "s7" else {"b": 1}
