"""Ray Data over a packed version: ``datamount.ray.read_version`` (every byte checked) against
``ray.data.read_parquet`` of the same shard files (read directly by their paths, checking nothing but what Parquet
itself does), on a local Ray instance of 2 CPUs.

    python benchmarks/bench_ray.py [--quick] [--runs N] [--cases NAME,...]

Each run is a fresh Python process that starts its own Ray instance (untimed), then reads the dataset twice through
Ray Data, consuming Arrow batches as they come (``iter_batches(batch_size=None, batch_format="pyarrow")``, no Python
per row): "first pass" (Ray's workers start, and import what the read needs) and "steady" (the same workers again).
The two readers take turns, ``--runs`` times; medians are reported, in rows/s, with the CPU seconds the whole job took
(the driver and every Ray process, user + system) per million rows. Both read the version's own columns (not the
shards' ``index``/``path``). Target: ``read_version`` >= 0.9x ``read_parquet`` with checking on.

- ``small``: 60,000 x 784 B samples (MNIST-sized), packed with ``pack``'s defaults;
- ``large``: 4,000 x 110 KB samples, packed with ``pack``'s defaults.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, print_rows

OURS = "read_version"
REFERENCE = "ray.data.read_parquet of the shards"
CASES = {"small": (60_000, 784), "large": (4_000, 110_000)}


def prepare(case: str, tmp: Path, count: int) -> dict[str, object]:
    """The case's packed version on a local store; what the children are told."""
    from bench_shards import make_dataset

    from datamount.datasets import catalog, layout
    from datamount.datasets.pack import pack
    from datamount.datasets.upload import upload
    from datamount.storage import open_store

    store = open_store(tmp / "store")
    upload(make_dataset(tmp / "source", count, CASES[case][1]), case, store=store)
    pack(case, store=store)
    manifest = catalog.resolve(store, case)
    shards = [store.full_path(layout.shard_path(case, shard)) for shard in manifest.shards]
    # Ray's session folders go in the benchmark's own temporary folder, removed with it.
    return {"store": str(tmp / "store"), "name": case, "shards": shards, "columns": manifest.columns,
            "ray_temp": str(tmp / "ray")}  # fmt: skip


def descendants_cpu_seconds() -> float:
    """User + system CPU seconds of this process and every process under it (the Ray instance it started) so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = int(fields[11]) + int(fields[12])
    mine, total = {os.getpid()}, 0
    for pid in sorted(parents):  # a child's pid may be below its parent's: walk each one up
        walk = pid
        while walk in parents and walk not in mine and walk > 1:
            walk = parents[walk]
        if walk in mine:
            mine.add(pid)
    for pid in mine:
        total += times.get(pid, 0)
    return total / ticks


def child(who: str, spec_file: str) -> None:
    import ray
    import ray.data

    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
             _temp_dir=spec["ray_temp"])  # fmt: skip
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    if who == OURS:
        from datamount.ray import read_version

        def dataset() -> ray.data.Dataset:
            return read_version(spec["name"], store=spec["store"])
    else:

        def dataset() -> ray.data.Dataset:
            return ray.data.read_parquet(spec["shards"], columns=spec["columns"])

    figures = {}
    for label in ("first", "steady"):
        cpu, started = descendants_cpu_seconds(), time.perf_counter()
        rows = sum(batch.num_rows for batch in dataset().iter_batches(batch_size=None, batch_format="pyarrow"))
        figures[label] = time.perf_counter() - started
        figures[f"{label}_cpu"] = descendants_cpu_seconds() - cpu
        figures["rows"] = rows
    ray.shutdown()
    print(json.dumps(figures))


def run_child(who: str, spec_file: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", who, str(spec_file)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{who} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def compare(case: str, tmp: Path, count: int, runs: int, notes: list[str]) -> list[Row]:
    spec_file = tmp / "spec.json"
    spec_file.write_text(json.dumps(prepare(case, tmp, count)), encoding="utf-8")
    sides = (OURS, REFERENCE)
    for who in sides:  # warm the page cache, and check that both read every row
        if (found := run_child(who, spec_file))["rows"] != count:
            raise SystemExit(f"{who} read {found['rows']} rows of {case}, not {count}")
    results: dict[str, list[dict[str, float]]] = {who: [] for who in sides}
    for round_number in range(runs):
        for who in sides[round_number % 2 :] + sides[: round_number % 2]:  # each takes its turn going first
            results[who].append(run_child(who, spec_file))

    def median(who: str, key: str) -> float:
        return statistics.median(result[key] for result in results[who])

    setup = f"{case} {count:,}"
    rows = []
    for label, key in (("first pass", "first"), ("steady", "steady")):
        rows.append(
            Row(setup, label, count / median(OURS, key), count / median(REFERENCE, key), "rows/s", REFERENCE,
                "1M rows", median(OURS, f"{key}_cpu") * 1e6 / count, median(REFERENCE, f"{key}_cpu") * 1e6 / count)
        )  # fmt: skip
    size = CASES[case][1]
    notes.append(f"{setup}: {count:,} x {size:,} B; load average {os.getloadavg()[0]:.2f}")
    return rows


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one run: a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="fresh-process runs per reader (median reported)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    rows: list[Row] = []
    notes: list[str] = []
    for case in args.cases.split(","):
        if case not in CASES:
            parser.error(f"--cases: no case {case!r}; the cases are {', '.join(CASES)}")
        count = CASES[case][0] // (20 if args.quick else 1)
        with tempfile.TemporaryDirectory(prefix="datamount-bench-ray-") as folder:
            rows += compare(case, Path(folder), count, runs, notes)
    print_rows(rows, "Ray Data over a packed version: read_version (checked) vs read_parquet of its shards")
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
