"""datamount's reader beside the readers its users already know, on the same samples on local disk.

    python benchmarks/bench_peers.py [--quick] [--runs N] [--cases NAME,...]

"First pass" is one pass over the samples in a fresh Python process, as a user's first epoch runs (the interpreter
and its imports are not timed, and are reported apart; opening the dataset is timed), and "steady" is a second pass
over the same reader object. The page cache is warm: every reader reads the same files once before the timed runs.
Medians of ``--runs`` runs, the readers taking turns; the load average is printed with the figures (compare ratios
within one run). The headline row of each case is the default ``reader(name)``, which checks every byte it reads
(no peer does).

Every packed version is made as ``datamount upload`` then ``datamount pack`` make it, with their defaults.

- ``large-packed``: 4,000 x 110 KB samples, packed; ``reader(name)`` vs litdata's ``StreamingDataset`` over the
  same samples written by ``litdata.optimize`` with 64 MB chunks (target >= 1.2x); also ``verify=False`` and
  ``zero_copy=True``;
- ``large-files``: the same samples as one file each (an unpacked version) vs an ``os.open``/``os.read`` loop over
  the list's files (target >= 1.0x); also ``reader(name, verify=False)``, since the loop checks nothing (the
  reader checks every file's xxh3-64);
- ``small-packed``: 60,000 x 784 B samples, packed; ``reader(name)`` vs pyarrow's own pass over the same samples
  in a Parquet file it wrote with ~64 MB row groups: ``iter_batches(batch_size=256)``, each batch's columns
  ``to_pylist`` and zipped (target >= 1.5x steady, >= 1.0x on a first pass);
- ``text-packed``: 200,000 ``source<TAB>target`` pairs, packed; ``reader(name)`` vs a plain Python ``split`` of the
  list file (target >= 1.0x).

litdata is optional (the ``bench-peers`` extra; it needs PyTorch): without it that case is left out and says so.
CPU seconds are the child process's user + system time over the first pass.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, peak_rss_mb, print_rows

OURS = "reader()"
#: The same reader without its checks (``verify=False``), to show what they cost.
UNCHECKED = "reader(verify=False)"
#: The same reader handing out memoryviews rather than ``bytes`` (``zero_copy=True``).
VIEWS = "reader(zero_copy=True)"


@dataclass(frozen=True)
class Case:
    """One comparison: a dataset made once, then our reader and a peer reading it."""

    name: str
    describe: str
    unit: str  # "MB/s" or "samples/s"
    peer: str
    target: float


CASES = {
    "large-packed": Case("large-packed", "{count} x 110 KB, packed", "MB/s", "litdata StreamingDataset", 1.2),
    "large-files": Case("large-files", "{count} x 110 KB, one file each", "MB/s", "os.open/os.read loop", 1.0),
    "small-packed": Case(
        "small-packed", "{count} x 784 B, packed", "samples/s", "pyarrow iter_batches, columns to_pylist", 1.5
    ),
    "text-packed": Case("text-packed", "{count} text pairs, packed", "samples/s", "split of the list", 1.0),
}


# --- the datasets, made once in the parent process -------------------------------------------------------------


def write_pairs(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    words = ["the", "data", "mount", "reads", "every", "byte", "as", "it", "was", "uploaded", "fast", "shard"]
    chance = random.Random(7)
    list_file = folder / "pairs.list"
    with list_file.open("w", encoding="utf-8") as out:
        for _ in range(count):
            source = " ".join(chance.choices(words, k=chance.randint(4, 16)))
            target = " ".join(chance.choices(words, k=chance.randint(4, 16)))
            out.write(f"{source}\t{target}\n")
    return list_file


def litdata_sample(line: str) -> tuple[bytes, str]:
    """A sample as litdata's yardstick writes it: ``(bytes, str)``."""
    folder, row = line.split("|", 1)
    path, label = row.rstrip("\n").split("\t")
    return Path(folder, path).read_bytes(), label


def prepare(case: str, tmp: Path, count: int) -> dict[str, object]:
    """Write the case's dataset to ``tmp`` in every form its readers need; returns what the children are told."""
    from bench_shards import make_dataset  # here: a child process imports only what its reader needs, timed

    from datamount.datasets.pack import pack
    from datamount.datasets.upload import upload
    from datamount.storage import open_store

    store = open_store(tmp / "store")
    if case == "text-packed":
        list_file = write_pairs(tmp / "source", count)
        upload(list_file, case, store=store, kind="text")
        pack(case, store=store)
        return {"store": str(tmp / "store"), "name": case, "list": str(list_file)}
    size = 784 if case == "small-packed" else 110_000
    list_file = make_dataset(tmp / "source", count, size)
    upload(list_file, case, store=store)
    if case != "large-files":
        pack(case, store=store)
    spec: dict[str, object] = {"store": str(tmp / "store"), "name": case, "list": str(list_file)}
    if case == "large-packed":
        spec["litdata"] = prepare_litdata(list_file, tmp / "litdata")
    if case == "small-packed":
        spec["parquet"] = str(write_reference_parquet(list_file, tmp / "reference.parquet"))
    return spec


#: The row groups of the Parquet file pyarrow's pass reads: about 64 MB, as a Parquet writer of large files cuts.
REFERENCE_ROW_GROUP_BYTES = 64 << 20


def write_reference_parquet(list_file: Path, path: Path) -> Path:
    """The samples of ``list_file`` as one Parquet file of ``(file bytes, label)`` columns in row groups of about
    :data:`REFERENCE_ROW_GROUP_BYTES`, written by pyarrow itself (the yardstick's file, not a datamount shard)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [line.rstrip("\n").split("\t") for line in list_file.read_text(encoding="utf-8").splitlines()]
    files = [(list_file.parent / relative).read_bytes() for relative, _ in rows]
    table = pa.table({"file": pa.array(files, pa.binary()), "label": [label for _, label in rows]})
    per_row = max(1, table.nbytes // max(1, table.num_rows))
    pq.write_table(table, path, row_group_size=max(1, REFERENCE_ROW_GROUP_BYTES // per_row))
    return path


def prepare_litdata(list_file: Path, output: Path) -> str | None:
    try:
        import litdata
    except ImportError:
        return None
    folder = str(list_file.parent)
    lines = [f"{folder}|{line}" for line in list_file.read_text(encoding="utf-8").splitlines()]
    # One worker: this machine's cores are the benchmark's, and the shards' content does not depend on it.
    litdata.optimize(litdata_sample, lines, str(output), chunk_bytes="64MB", num_workers=1, mode="overwrite")
    return str(output)


# --- one pass, in a child process -------------------------------------------------------------------------------


#: How a reader is opened (once per process, timed with the first pass) and how one pass is then drawn from it.
Opened = Callable[[], Iterable[tuple[object, ...]]]


def ours(spec: dict[str, object], *, verify: bool = True, zero_copy: bool = False) -> Opened:
    from datamount.readers import reader
    from datamount.storage import open_store

    return reader(str(spec["name"]), open_store(str(spec["store"])), verify=verify, zero_copy=zero_copy)


def litdata_items(spec: dict[str, object]) -> Opened:
    from litdata import StreamingDataset

    dataset = StreamingDataset(input_dir=str(spec["litdata"]))
    return lambda: ((bytes(data), label) for data, label in dataset)


def os_read_loop(spec: dict[str, object]) -> Opened:
    def one_pass() -> Iterator[tuple[object, ...]]:
        folder = Path(str(spec["list"])).parent
        with open(str(spec["list"]), encoding="utf-8") as rows:
            for line in rows:
                path, label = line.rstrip("\n").split("\t")
                descriptor = os.open(folder / path, os.O_RDONLY)
                try:
                    data = os.read(descriptor, os.fstat(descriptor).st_size)
                finally:
                    os.close(descriptor)
                yield data, label

    return one_pass


def pyarrow_batches(spec: dict[str, object]) -> Opened:
    import pyarrow.parquet as pq

    def one_pass() -> Iterator[tuple[object, ...]]:
        for batch in pq.ParquetFile(str(spec["parquet"])).iter_batches(batch_size=256):
            yield from zip(*(column.to_pylist() for column in batch.columns), strict=False)

    return one_pass


def split_lines(spec: dict[str, object]) -> Opened:
    def one_pass() -> Iterator[tuple[object, ...]]:
        with open(str(spec["list"]), encoding="utf-8") as rows:
            for line in rows:
                yield tuple(line.rstrip("\n").split("\t"))

    return one_pass


PEERS: dict[str, Callable[[dict[str, object]], Opened]] = {
    "large-packed": litdata_items,
    "large-files": os_read_loop,
    "small-packed": pyarrow_batches,
    "text-packed": split_lines,
}


def one_pass(samples: Callable[[], Iterable[tuple[object, ...]]]) -> tuple[float, float, int, int]:
    cpu, start = time.process_time(), time.perf_counter()
    count = size = 0
    for sample in samples():
        count += 1
        first = sample[0]
        size += len(first) if isinstance(first, bytes | memoryview) else 0
    return time.perf_counter() - start, time.process_time() - cpu, count, size


IMPORTS = {
    OURS: ("datamount.readers", "datamount.storage"),
    "large-packed": ("litdata",),
    "small-packed": ("pyarrow.parquet",),
}


OUR_SIDES: dict[str, Callable[[dict[str, object]], Opened]] = {
    OURS: ours,
    UNCHECKED: functools.partial(ours, verify=False),
    VIEWS: functools.partial(ours, zero_copy=True),
}


def child(case: str, who: str, spec_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    make = OUR_SIDES.get(who) or PEERS[case]
    imported = time.perf_counter()
    for module in IMPORTS.get(OURS if who in OUR_SIDES else case, ()):
        importlib.import_module(module)  # imported before the clock starts, as a training script has
    imported = time.perf_counter() - imported
    opened: list[Opened] = []
    # The first pass opens the reader (as an epoch of a fresh job does); the second reuses it.
    seconds, cpu, count, size = one_pass(lambda: (opened.append(make(spec)), opened[0]())[1])
    steady = one_pass(opened[0])[0]
    peak = peak_rss_mb()
    figures = {"seconds": seconds, "cpu": cpu, "steady": steady, "count": count, "bytes": size, "rss": peak}
    print(json.dumps({**figures, "imports": imported}))


# --- the parent: interleaved fresh processes ---------------------------------------------------------------------


def run_child(case: str, who: str, spec_file: Path) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", case, who, str(spec_file)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{who} on {case} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def compare(case: Case, tmp: Path, count: int, runs: int, notes: list[str]) -> list[Row]:
    spec = prepare(case.name, tmp, count)
    if case.name == "large-packed" and spec.get("litdata") is None:
        print(f"{case.name}: litdata is not installed (pip install litdata); left out", file=sys.stderr)
        return []
    spec_file = tmp / "spec.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    extra = {"large-files": (UNCHECKED,), "large-packed": (UNCHECKED, VIEWS)}.get(case.name, ())
    sides = (OURS, *extra, case.peer)
    for who in sides:  # warm the page cache, and check that both read every sample
        warm = run_child(case.name, who, spec_file)
        if warm["count"] != count:
            raise SystemExit(f"{who} read {warm['count']} samples of {case.name}, not {count}")
    results: dict[str, list[dict[str, float]]] = {who: [] for who in sides}
    for _ in range(runs):
        for who in sides:
            results[who].append(run_child(case.name, who, spec_file))

    def rate(who: str, key: str) -> float:
        seconds = median([result[key] for result in results[who]])
        amount = results[who][0]["bytes"] / 1e6 if case.unit == "MB/s" else count
        return amount / seconds

    def cpu(who: str) -> float:
        return median([result["cpu"] for result in results[who]])

    setup = case.describe.format(count=f"{count:,}")
    per = "GB" if case.unit == "MB/s" else "1M samples"
    scale = 1e3 / (results[OURS][0]["bytes"] / 1e6) if case.unit == "MB/s" else 1e6 / count
    rss = {who: median([result["rss"] for result in results[who]]) for who in sides}
    imports = {who: median([result["imports"] for result in results[who]]) for who in sides}
    notes.append(
        f"{setup}: target >= {case.target}x; first-pass CPU-s per {per} {cpu(OURS) * scale:.2f} vs "
        f"{cpu(case.peer) * scale:.2f}; peak RSS {rss[OURS]:.0f} vs {rss[case.peer]:.0f} MB; imports (not timed "
        f"above) {imports[OURS]:.2f} s vs {imports[case.peer]:.2f} s; load average {os.getloadavg()[0]:.2f}"
    )
    rows = []
    for who in sides[:-1]:
        label = "" if who == OURS else f", {who.removeprefix('reader(').removesuffix(')')}"
        rows.append(Row(case.name, f"first pass{label}", rate(who, "seconds"), rate(case.peer, "seconds"), case.unit,
                        case.peer))  # fmt: skip
        rows.append(Row(case.name, f"steady{label}", rate(who, "steady"), rate(case.peer, "steady"), case.unit,
                        case.peer))  # fmt: skip
        if who != OURS:
            notes.append(f"{setup}: first-pass CPU-s per {per} with {who} {cpu(who) * scale:.2f}")
    return rows


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="fresh-process runs per reader (median reported)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    counts = {"large-packed": 4_000, "large-files": 4_000, "small-packed": 60_000, "text-packed": 200_000}
    if args.quick:
        counts = {name: count // 20 for name, count in counts.items()}
    rows: list[Row] = []
    notes: list[str] = []
    for name in args.cases.split(","):
        if name not in CASES:
            parser.error(f"--cases: no case {name!r}; the cases are {', '.join(CASES)}")
        with tempfile.TemporaryDirectory(prefix="datamount-bench-peers-") as folder:
            rows += compare(CASES[name], Path(folder), counts[name], runs, notes)
    title = "datamount's reader beside its peers (a fresh process per first pass; local disk, warm page cache)"
    print_rows(rows, title)
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
