"""A progress bar (items, bytes, rate, time left) for long operations, shown only on a terminal."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class ProgressBar:
    """Implements :class:`datamount.datasets.progress.Progress` with rich; silent when ``quiet`` or not a tty."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self._bar = Progress(
            TextColumn("{task.description:>8}"),
            BarColumn(),
            TextColumn("{task.fields[files]}"),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not self.enabled,
            transient=False,
        )
        self._task: TaskID | None = None
        self._bytes_mode = False
        self._items_total = 0
        self._items_done = 0

    def __enter__(self) -> ProgressBar:
        self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._bar.stop()

    def start(self, phase: str, *, items: int, size: int) -> None:
        self._bytes_mode = size > 0
        self._items_total = items
        self._items_done = 0
        self._task = self._bar.add_task(phase, total=size if self._bytes_mode else items, files=self._counted())

    def advance(self, *, items: int = 1, size: int = 0) -> None:
        if self._task is not None:
            self._items_done += items
            self._bar.update(
                self._task,
                advance=size if self._bytes_mode else items,
                files=self._counted(),
            )

    def _counted(self) -> str:
        """The items done, out of how many when that is known (an import of tar shards knows only their bytes)."""
        if self._items_total:
            return f"{self._items_done}/{self._items_total} files"
        return f"{self._items_done:,} rows"

    def finish(self) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self._bar.tasks[-1].total)
            self._task = None
