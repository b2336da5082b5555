"""Server processes that end with whatever started them: a killed test run must not leave daemons on the machine."""

from __future__ import annotations

import shutil
import signal
import sys
from types import FrameType


def tied_to_parent(command: list[str]) -> list[str]:
    """``command`` prefixed so that it gets SIGTERM when the thread that starts it exits (util-linux ``setpriv``).

    Teardown stops every daemon by PID; this only covers a run that is killed before its teardown. The command is
    returned unchanged where ``setpriv`` is missing.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *command] if setpriv else list(command)


def exit_on_sigterm() -> None:
    """Turn the first SIGTERM into :class:`SystemExit`, so that ``finally`` blocks stop the servers; ignore later
    ones (``timeout`` signals its child and then its whole process group), which would cut that cleanup short."""

    def leave(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, leave)
