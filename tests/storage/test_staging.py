"""``staged_folder``: a folder appears whole under any name, or not at all; nothing is left beside it either way; a
program that handles SIGTERM itself keeps its handler (:mod:`datamount.storage.termination`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from datamount.storage.staging import is_empty, staged_folder

#: File names of every kind a user may give: any character a POSIX name may hold, up to 255 bytes in UTF-8.
NAMES = st.text(st.characters(exclude_characters="/\x00", exclude_categories=("Cs",)), min_size=1, max_size=80).filter(
    lambda name: name not in (".", "..") and len(name.encode("utf-8")) <= 255
)


@settings(max_examples=60, deadline=None)
@given(name=NAMES, fails=st.booleans())
@example(name="é" * 127, fails=False)  # 254 bytes: the sibling's name repeats only the first 100
@example(name="[*?]", fails=False)
@example(name=".hidden", fails=True)
def test_a_folder_appears_whole_under_any_name_or_not_at_all(name: str, fails: bool) -> None:
    with tempfile.TemporaryDirectory() as parent:
        target = Path(parent, "made", name)

        def write() -> None:
            with staged_folder(target, command="test", key="k") as stage:
                assert stage.parent == target.parent and stage.name.startswith(".")
                (stage / "sub").mkdir()
                (stage / "sub" / "file").write_bytes(b"bytes")
                assert not target.exists()
                if fails:
                    raise KeyboardInterrupt

        if fails:
            with pytest.raises(KeyboardInterrupt):
                write()
            assert os.listdir(parent) == []  # nor the folder made for it
        else:
            write()
            assert os.listdir(target.parent) == [name]
            assert (target / "sub" / "file").read_bytes() == b"bytes"
            assert not is_empty(target, command="test")


def test_a_program_that_handles_sigterm_keeps_its_handler(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys
        from datamount.storage.staging import staged_folder

        received = []
        signal.signal(signal.SIGTERM, lambda number, frame: received.append(number))
        with staged_folder(sys.argv[1], command="test", key="k") as stage:
            os.kill(os.getpid(), signal.SIGTERM)  # the program's handler takes it: the folder is still made
            (stage / "file").write_text("done")
        print(received == [signal.SIGTERM], signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["True", "True"], done.stderr
    assert (tmp_path / "out" / "file").read_text() == "done"


def test_sigterm_removes_what_was_staged_and_ends_the_process_by_sigterm(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys
        from datamount.storage.staging import staged_folder

        with staged_folder(sys.argv[1], command="test", key="k") as stage:
            (stage / "file").write_text("half")
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()
        """
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a" / "out")], capture_output=True, text=True)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert os.listdir(tmp_path) == []
