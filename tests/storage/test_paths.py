"""Store-relative paths: whatever the string, it is refused or becomes a normal path below the root."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from datamount.storage.errors import UnsafePathError
from datamount.storage.paths import clean_relpath

_PIECES = st.sampled_from(
    ["a", "b.c", "..", ".", "", "~", "-x", "C:", "x:", "\\", "\x00", ".cache", "a.", "é", "٣", " ", "\n", "://"]
)


@given(path=st.one_of(st.text(max_size=30), st.lists(_PIECES, max_size=6).map("/".join)))
@example(path="datasets/d/objects/ab/abcd")
@example(path="a/../b")
@example(path="a\n")
@example(path="./a//b/")
@example(path="./~").via("a home folder once its '.' part is dropped")
@example(path="./C:/x").via("a drive letter once its '.' part is dropped")
def test_a_path_is_refused_or_normal_and_inside(path: str) -> None:
    try:
        cleaned = clean_relpath(path)
    except UnsafePathError:
        return
    parts = cleaned.split("/")
    assert all(part not in ("", ".", "..") for part in parts)
    assert not cleaned.startswith(("/", "~")) and "\\" not in cleaned and "\x00" not in cleaned and "://" not in cleaned
    assert not (cleaned[1:2] == ":" and cleaned[:1].isascii() and cleaned[:1].isalpha())  # no drive letter
    assert cleaned == "/".join(part for part in path.split("/") if part not in ("", "."))


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/passwd", "s3://b/k", "C:/x", "~/x", "a\\b", "a\x00", ""])
def test_climbing_or_foreign_paths_are_refused(path: str) -> None:
    with pytest.raises(UnsafePathError):
        clean_relpath(path)
