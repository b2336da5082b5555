"""An upload's memory does not grow with the list's rows: a million-row list is uploaded by a process whose peak
resident memory stays far below what holding its rows took (659 MB for the text list, 445 MB for the image list,
before lists were streamed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from datamount.datasets import catalog
from datamount.storage import open_store

ROWS = 1_000_000
#: Peak resident memory allowed to the uploading process: the interpreter and its imports take about 85 MB.
BOUND_MB = 320

#: The peak is the process's own (``VmHWM``): ``ru_maxrss`` keeps, across the ``exec``, the peak of the test process
#: that started it (with ``vfork`` they share their memory until then), so it read 380 MB in a worker that had grown.
UPLOAD = """
import re, sys
from datamount.datasets import upload
upload(sys.argv[1], sys.argv[2], store=sys.argv[3], kind=sys.argv[4], packed=sys.argv[5] == "packed")
with open("/proc/self/status") as status:
    print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)) // 1024)
"""


def _peak_mb(list_file: Path, name: str, store: Path, kind: str, *, packed: bool = False) -> int:
    """Upload ``list_file`` in a new process; its peak resident memory in MB."""
    done = subprocess.run(
        [sys.executable, "-c", UPLOAD, str(list_file), name, str(store), kind, "packed" if packed else "objects"],
        capture_output=True,
        text=True,
        timeout=540,
        check=True,
    )
    return int(done.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("packed", [False, True], ids=["objects", "packed"])
def test_a_million_row_text_list_is_uploaded_in_bounded_memory(tmp_path: Path, packed: bool) -> None:
    """Packed, its shards are planned from the stored list read as a stream, and written a row group at a time
    (968 MB before)."""
    list_file = tmp_path / "mt.list"
    with list_file.open("w", encoding="utf-8") as out:
        for i in range(ROWS):
            out.write(f"the source sentence number {i}\tla phrase cible numéro {i}\n")
    peak = _peak_mb(list_file, "mt", tmp_path / "store", "text", packed=packed)
    manifest = catalog.resolve(open_store(str(tmp_path / "store")), "mt")
    assert manifest.rows == ROWS and bool(manifest.shards) == packed
    assert peak < BOUND_MB, f"the upload took {peak} MB"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_million_row_image_list_is_checked_and_uploaded_in_bounded_memory(tmp_path: Path) -> None:
    """A thousand files, each named by a thousand rows: every row's path goes through the sort on disk."""
    (tmp_path / "img").mkdir()
    for i in range(1000):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(b"%032d" % i)
    list_file = tmp_path / "images.list"
    with list_file.open("w", encoding="utf-8") as out:
        for i in range(ROWS):
            out.write(f"img/{i % 1000}.jpg\tlabel {i}\n")
    peak = _peak_mb(list_file, "images", tmp_path / "store", "image")
    manifest = catalog.resolve(open_store(str(tmp_path / "store")), "images")
    assert (manifest.rows, len(manifest.files)) == (ROWS, 1000)
    assert peak < BOUND_MB, f"the upload took {peak} MB"
