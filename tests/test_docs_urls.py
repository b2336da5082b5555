"""``docs/urls.md``'s Python snippets run as written (the README's mechanism, ``tests/test_readme.py``): each one, as
a script in a fresh process whose default store holds ``pets``, a packed image version of PNGs.

Every snippet of the page runs (the page has none that cannot).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from datamount.datasets import pack, upload
from datamount.storage import open_store
from tests.test_readme import Snippet, python_snippets
from tests.urlfs.versions import write_png_list

PAGE = Path(__file__).resolve().parent.parent / "docs" / "urls.md"


@pytest.fixture(scope="module")
def pets_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("urls")
    store = open_store(folder / "store")
    upload(write_png_list(folder / "src", 12), "pets", store=store)
    pack("pets", store=store)
    return folder / "store"


def test_the_page_has_a_snippet_per_tool() -> None:
    code = "\n".join(snippet.code for snippet in python_snippets(PAGE))
    for tool in ("pandas", "pyarrow", "duckdb", "polars", "from datasets import load_dataset", "PIL", ".get("):
        assert tool in code, tool


@pytest.mark.parametrize("snippet", python_snippets(PAGE), ids=lambda snippet: f"urls.md:{snippet.line}")
def test_a_snippet_runs_as_written(snippet: Snippet, pets_store: Path, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    environment = {**os.environ, "DATAMOUNT_STORE": str(pets_store), "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, cwd=tmp_path, env=environment, timeout=240
    )
    assert done.returncode == 0, f"docs/urls.md:{snippet.line}:\n{done.stderr.decode(errors='replace')[-3000:]}"
