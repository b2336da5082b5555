"""``diff_versions`` on a pair of versions of a million rows in a local store: a text pair and an image pair, each B
made from A by removing, adding and relabelling 1 % of the rows (and, for images, giving 1 % of the files other
bytes); the median wall and CPU time of the diff in this process, and of ``datamount diff --json`` in a fresh one,
with that process's peak resident memory (``VmHWM``: the largest of the runs).

    python benchmarks/bench_diff.py [--rows N] [--runs N] [--keep DIR]

The text pair is uploaded (``upload``: a list is all a text version is). The image pair is written as the two
manifests, lists and parts of file entries an upload would commit (each file's path, size, sha256 and xxh3-64),
but without the million files' objects: a diff reads nothing else, and a million files would have to be written
and uploaded first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness  # noqa: F401  (its import sets where the commands it starts keep their bytecode)

from datamount.datasets import file_parts_writer, layout, upload
from datamount.datasets.diff import diff_versions
from datamount.datasets.file_parts import FileParts
from datamount.datasets.listfile import column_names
from datamount.datasets.manifest import FileEntry, Kind, Manifest, now_utc
from datamount.datasets.row_index import RowIndex
from datamount.storage import Store, open_store

LABELS = 1000
#: ``datamount diff`` in a fresh process that prints its peak resident memory (in kB) to stderr as it exits: the
#: parent's ``ru_maxrss`` for its children would count this process's own peak (it holds the pairs it built).
COMMAND = """
import atexit, re, sys
from datamount.cli.main import main

def peak():
    with open("/proc/self/status") as status:
        print("VmHWM", re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1), file=sys.stderr)

atexit.register(peak)
sys.argv[0] = "datamount"
main()
"""


def changed_rows(rows: list[tuple[str, str]], seed: int, *, prefix: str) -> list[tuple[str, str]]:
    """``rows`` with 1 % removed, 1 % relabelled and 1 % new rows (keys starting ``prefix``) at the end."""
    draw = random.Random(seed)
    kept = [row for i, row in enumerate(rows) if i % 100 != 7]
    for i in range(13, len(kept), 100):
        kept[i] = (kept[i][0], str(draw.randrange(LABELS)))
    return kept + [(f"{prefix}{i:08d}", str(draw.randrange(LABELS))) for i in range(len(rows) // 100)]


def text_pair(store: Store, rows: int, folder: Path) -> None:
    first = [(f"source sentence number {i:08d}", str(i % LABELS)) for i in range(rows)]
    second = changed_rows(first, 1, prefix="a new source sentence ")
    for name, found in (("a.list", first), ("b.list", second)):
        (folder / name).write_text("".join(f"{key}\t{label}\n" for key, label in found), encoding="utf-8")
        upload(folder / name, "text", store=store, kind="text")


def image_pair(store: Store, rows: int) -> None:
    """Two versions of ``images``; 1 % of B's files have other bytes than A's of the same path."""
    first = [(f"images/{i // 1000:04d}/{i:08d}.png", str(i % LABELS)) for i in range(rows)]
    second = changed_rows(first, 2, prefix="images/new/")
    for version, found in enumerate((first, second), start=1):
        files = []
        for i, (key, _) in enumerate(found):
            sha256 = hashlib.sha256(f"{key} {version if i % 100 == 42 else 1}".encode()).hexdigest()
            files.append(FileEntry(key, 1000, sha256, hashlib.blake2b(key.encode(), digest_size=8).hexdigest()))
        commit_as_uploaded(store, "images", version, found, sorted(files))


def commit_as_uploaded(
    store: Store, name: str, version: int, rows: list[tuple[str, str]], files: list[FileEntry]
) -> None:
    """Version ``version`` of ``name``: its list, its files' entries in parts with its row index (format 7), and its
    manifest, as an upload commits them, its files' objects left out."""
    listed = "".join(f"{key}\t{label}\n" for key, label in rows).encode()
    list_sha = hashlib.sha256(listed).hexdigest()
    folder = layout.dataset_folder(name)
    store.write(f"{folder}/{layout.list_key(list_sha)}", listed)
    pairs = file_parts_writer.list_pairs(store, f"{folder}/{layout.list_key(list_sha)}", len(listed), len(rows))
    parts, row_parts = file_parts_writer.write_indexes(store, name, files, pairs, len(rows), by_row=True)
    where = f"{store.url}/{folder}"
    manifest = Manifest(
        name=name,
        kind=Kind.IMAGE,
        columns=column_names(Kind.IMAGE, 2),
        rows=len(rows),
        files=FileParts(store, folder, parts, where),
        row_parts=RowIndex(store, folder, row_parts, where),
        list_sha256=list_sha,
        list_size=len(listed),
        version=version,
        created=now_utc(),
    )
    store.create(layout.manifest_path(name, version), manifest.to_json())


def timed(store: Store, name: str, runs: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(runs):
        started, cpu = time.perf_counter(), time.process_time()
        found = diff_versions(store, f"{name}@1", f"{name}@2")
        found.to_json()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    command = [sys.executable, "-c", COMMAND, "diff", f"{name}@1", f"{name}@2", "--json"]
    commands, peaks = [], []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([*command, "--store", store.url], check=True, capture_output=True)
        commands.append(time.perf_counter() - started)
        peaks.append(int(done.stderr.split(b"VmHWM")[-1].split()[0]) / 1024)
    rows = json.loads(done.stdout)["rows"]
    return {
        "diff_s": statistics.median(walls),
        "diff_cpu_s": statistics.median(cpus),
        "command_s": statistics.median(commands),
        "command_peak_mb": max(peaks),
        **{key: rows[key] for key in ("added", "removed", "changed", "unchanged")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", metavar="DIR", help="Build the pairs in DIR, or use those built there before.")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(options.keep or temporary)
        store = open_store(str(folder / "store"))
        if not (folder / "store").exists():
            started = time.perf_counter()
            text_pair(store, options.rows, folder)
            image_pair(store, options.rows)
            print(f"built two pairs of {options.rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
        for name in ("text", "images"):
            found = timed(store, name, options.runs)
            print(
                f"{name:>6}: diff {found['diff_s']:.2f} s (CPU {found['diff_cpu_s']:.2f} s), datamount diff --json "
                f"{found['command_s']:.2f} s (peak {found['command_peak_mb']:.0f} MB); {found['added']:,} added, "
                f"{found['removed']:,} removed, {found['changed']:,} changed, {found['unchanged']:,} unchanged",
                flush=True,
            )


if __name__ == "__main__":
    main()
