"""Small generated datasets: ``.list`` files with real files beside them (the ``make_image_list`` and ``text_list``
fixtures)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

#: ``make_image_list(count=12, *, name="train.list", size=300, labels=3)``: the path of a new image list.
MakeImageList = Callable[..., Path]


def write_image_list(
    folder: Path, count: int = 12, *, name: str = "train.list", size: int = 300, labels: int = 3
) -> Path:
    """Write ``count`` files of distinct random bytes under ``folder/data/`` and the list ``folder/name`` naming
    them, each with label ``i % labels``; the list's path."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        path = folder / "data" / f"img{i:04d}.jpg"
        path.write_bytes(b"\xff\xd8\xff" + os.urandom(size + i))
        rows.append(f"./data/{path.name}\t{i % labels}\n")
    list_file = folder / name
    list_file.write_text("".join(rows), encoding="utf-8")
    return list_file


@pytest.fixture
def make_image_list(tmp_path: Path) -> MakeImageList:
    """Write ``count`` files of distinct random bytes under ``data/`` and a list naming them with labels."""

    def make(count: int = 12, *, name: str = "train.list", size: int = 300, labels: int = 3) -> Path:
        return write_image_list(tmp_path / "src", count, name=name, size=size, labels=labels)

    return make


@pytest.fixture
def text_list(tmp_path: Path) -> Path:
    """A two-column text list of three rows (and a blank line)."""
    path = tmp_path / "pairs.list"
    path.write_text("bonjour\thello\nle chat\tthe cat\n\nmerci\tthank you\n", encoding="utf-8")
    return path
