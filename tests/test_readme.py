"""The README's Python snippets run as written: each one, as a script in a fresh process, against a store holding the
dataset it names (``cats``), with the Arrow stream of that dataset on its stdin (as in the README's pipelines).

A snippet that cannot run here is listed in :data:`NOT_RUN` with the reason; every other one runs, so a new snippet
is run unless it is listed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from datamount.datasets.upload import upload
from datamount.storage import open_store
from tests.generated import write_image_list

README = Path(__file__).resolve().parent.parent / "README.md"
#: The first line of each snippet that is not run, and why.
NOT_RUN = {
    "from datamount.datasets import imdb, mnist": "reads MNIST and IMDB, installed by a download",
    "from datamount.storage import open_store": "opens a store on an S3 endpoint that is not there (rgw.example)",
    "from datamount.readers import DatasetReader, reader": "a training loop's fragment (epochs, checkpoint, step)",
}
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Snippet:
    line: int  # of the opening fence
    code: str

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0]


def python_snippets(document: Path) -> list[Snippet]:
    """The ```` ```python ```` fences of a Markdown ``document``, each with the line of its opening fence."""
    text = document.read_text(encoding="utf-8")
    return [Snippet(text.count("\n", 0, found.start()) + 1, found.group(1)) for found in _FENCE.finditer(text)]


def readme_snippets() -> list[Snippet]:
    return python_snippets(README)


def snippets_to_run() -> list[Snippet]:
    return [snippet for snippet in readme_snippets() if snippet.first_line not in NOT_RUN]


@pytest.fixture(scope="module")
def cats_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A local store holding ``cats`` (an image dataset of 40 rows), and the Arrow stream of ``datamount cat cats``."""
    folder = tmp_path_factory.mktemp("readme")
    upload(write_image_list(folder / "src", 40, labels=4), "cats", store=open_store(folder / "store"))
    command = [sys.executable, "-m", "datamount.cli.main", "cat", "cats", "--store", str(folder / "store")]
    stream = subprocess.run(command, capture_output=True, timeout=120, check=True).stdout
    return folder / "store", stream


def test_the_readme_has_snippets_that_run() -> None:
    assert len(snippets_to_run()) >= 3


@pytest.mark.parametrize("first_line", sorted(NOT_RUN))
def test_each_snippet_not_run_is_still_in_the_readme(first_line: str) -> None:
    assert first_line in {snippet.first_line for snippet in readme_snippets()}


@pytest.mark.parametrize("snippet", snippets_to_run(), ids=lambda snippet: f"README.md:{snippet.line}")
def test_a_readme_snippet_runs_as_written(snippet: Snippet, cats_store: tuple[Path, bytes], tmp_path: Path) -> None:
    store, stream = cats_store
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    environment = {**os.environ, "DATAMOUNT_STORE": str(store)}
    done = subprocess.run(
        [sys.executable, str(script)], input=stream, capture_output=True, cwd=tmp_path, env=environment, timeout=120
    )
    assert done.returncode == 0, f"README.md:{snippet.line}:\n{done.stderr.decode(errors='replace')}"
