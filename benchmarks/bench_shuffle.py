"""What each shuffle costs and how well it mixes, on a class-sorted dataset (as an ImageNet list is).

Usage::

    python benchmarks/bench_shuffle.py [--quick] [--runs N]

A packed text dataset of ``rows`` rows whose labels come in sorted runs (100 classes) is read for one epoch, in a
fresh process per pass, through ``reader(name, shuffle=..., shuffle_block=...)``: unshuffled, the span shuffle
(rows permuted within each row group, row groups permuted), block shuffles over 4 and 16 row groups, and the
global shuffle. Reported: the median time and CPU seconds of the pass, the peak memory of the process, and three
measures of mixing, each against what an ideal uniform shuffle gives:

- ``same label``: the share of neighbouring samples with the same label (ideal 1 / classes);
- ``labels/batch``: distinct labels in a batch of 64 (ideal about 47.4 of 100);
- ``spread``: how far apart in storage neighbouring samples are, as a share of what a uniform shuffle gives (the
  mean distance between two random rows, ``rows / 3``): 1 is ideal, near 0 is storage order.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLASSES = 100
BATCH = 64
#: Rows per row group: about 1,000 rows of ~24 bytes.
ROW_GROUP_BYTES = 24_000
MODES = {
    "unshuffled": {"shuffle": False},
    "span (block 1)": {"shuffle": True, "shuffle_block": 1},
    "block 4": {"shuffle": True, "shuffle_block": 4},
    "block 16": {"shuffle": True, "shuffle_block": 16},
    "global (block 0)": {"shuffle": True, "shuffle_block": 0},
}


def make_dataset(folder: Path, rows: int) -> str:
    from datamount.datasets.pack import pack
    from datamount.datasets.upload import upload
    from datamount.storage import open_store

    store = open_store(str(folder / "store"))
    listing = folder / "sorted.list"
    per_class = rows // CLASSES
    listing.write_text("".join(f"text-{row:08d}\tlabel-{row // per_class:03d}\n" for row in range(rows)))
    upload(listing, "sorted", store=store)
    pack("sorted", store=store, row_group_bytes=ROW_GROUP_BYTES)
    return store.url


def one_pass(store_url: str, options: dict[str, object]) -> dict[str, float]:
    """Read one epoch in this (fresh) process; its cost and how mixed it was."""
    import resource

    from datamount.readers import reader

    started, cpu = time.perf_counter(), time.process_time()
    samples = reader("sorted", store_url, with_row=True, seed=1, **options)
    read = [(row, label) for row, _text, label in samples()]
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    labels = [label for _, label in read]
    same = sum(a == b for a, b in itertools.pairwise(labels)) / max(len(labels) - 1, 1)
    batches = [labels[i : i + BATCH] for i in range(0, len(labels) - BATCH + 1, BATCH)]
    distinct = statistics.mean(len(set(batch)) for batch in batches)
    rows = [row for row, _ in read]
    spread = statistics.mean(abs(a - b) for a, b in itertools.pairwise(rows)) / (len(rows) / 3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open("/proc/self/status") as status:  # VmHWM: this process's own peak, not one inherited through exec
        rss = next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:")), rss)
    return {"seconds": seconds, "cpu": cpu, "rss": rss, "same": same, "distinct": distinct, "spread": spread}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 rows instead of 400,000")
    parser.add_argument("--runs", type=int, default=3, help="passes per mode, interleaved (median)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        store_url, options = json.loads(arguments.child)
        print(json.dumps(one_pass(store_url, options)))
        return
    rows = 20_000 if arguments.quick else 400_000
    with tempfile.TemporaryDirectory(prefix="datamount-bench-shuffle-") as folder:
        store_url = make_dataset(Path(folder), rows)
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for _ in range(arguments.runs):
            for mode, options in MODES.items():
                child = [sys.executable, __file__, "--child", json.dumps([store_url, options])]
                results[mode].append(json.loads(subprocess.run(child, check=True, capture_output=True).stdout))
    ideal_distinct = CLASSES * (1 - (1 - 1 / CLASSES) ** BATCH)
    print(
        f"\nOne epoch of {rows:,} class-sorted rows ({CLASSES} classes, ~1,000 rows per row group), "
        f"median of {arguments.runs} fresh processes each"
    )
    print(f"{'shuffle':<18}{'seconds':>9}{'CPU s':>8}{'peak MB':>9}{'same label':>12}{'labels/batch':>14}{'spread':>8}")
    for mode, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"{mode:<18}{median['seconds']:>9.2f}{median['cpu']:>8.2f}{median['rss']:>9.0f}"
            f"{median['same']:>12.3f}{median['distinct']:>14.1f}{median['spread']:>8.3f}"
        )
    print(f"{'ideal (uniform)':<18}{'':>9}{'':>8}{'':>9}{1 / CLASSES:>12.3f}{ideal_distinct:>14.1f}{1:>8.3f}")


if __name__ == "__main__":
    main()
