"""``LinkGuard`` answers as ``os.path.realpath`` would, for any tree of folders and links, however often it is asked
(it remembers the folders it resolved)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from datamount.storage.paths import LinkGuard

NAMES = ["a", "b", "c"]
#: Where a link may point: inside the root (a folder or a file), the root itself, or outside it.
TARGETS = ["root/a", "root/a/b", "root/c", "root", "outside", "outside/a", "root/a/f"]


def realpath_says(root: Path, full: str) -> bool:
    real, real_root = os.path.realpath(full), os.path.realpath(root)
    return real == real_root or real.startswith(real_root + "/")


@settings(max_examples=60, deadline=None)
@example(links={"a/a": "outside/a", "a/a/a": "root/a"}, asked=["a/a/a"])  # out through a link, back in through one
@example(links={"a/a": "outside/a", "a/a/a": "root/a"}, asked=["a/a/a/b", "a/a/a/f"])
@given(
    links=st.dictionaries(
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join), st.sampled_from(TARGETS), max_size=4
    ),
    asked=st.lists(st.lists(st.sampled_from([*NAMES, "f"]), min_size=1, max_size=4).map("/".join), max_size=12),
)
def test_the_guard_agrees_with_realpath(links: dict[str, str], asked: list[str]) -> None:
    with tempfile.TemporaryDirectory() as top:
        base = Path(top)
        root = base / "root"
        for folder in ("root/a/b", "root/c", "outside/a"):
            (base / folder).mkdir(parents=True)
        (base / "root/a/f").write_bytes(b"f")
        for name, target in links.items():
            where = root / name
            if where.parent.is_dir() and not where.exists() and not where.is_symlink():
                where.symlink_to(base / target)
        guard = LinkGuard(str(root))
        for relative in asked * 2:  # the second time from what it remembered
            full = os.path.join(str(root), relative)
            assert guard.leads_inside(full) == realpath_says(root, full), relative
