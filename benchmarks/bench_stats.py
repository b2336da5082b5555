"""What reader statistics cost on the fastest path: 60,000 packed samples of 784 B read from local disk.

    python benchmarks/bench_stats.py [--quick] [--runs N] [--passes N] [--instructions]

Three readers of the same version, in each of ``--runs`` fresh Python processes:

- ``off``: ``reader(name, measure=False)``, samples handed out one by one, nothing measured;
- ``on``: ``reader(name)`` (the default): each pass timed a chunk at a time, ``samples.stats()`` available;
- ``on+reports``: as ``on``, with ``DATAMOUNT_STATS=1`` and ``DATAMOUNT_STATS_FILE`` set (a log line and a JSON line
  at each pass's end; a pass here is shorter than the 10 s between two reports).

Each process opens the three and reads each once untimed (the page cache is warm), then reads ``--passes`` passes
of each, the three taking turns (interleaved, so that a change in the machine's load meets them alike), and keeps
each one's median. Shown: the medians over the processes of the wall seconds per pass, of the consuming thread's CPU
seconds (the reader's decoding threads work beside it), and of each process's ratio to ``off`` (target: under 2 %).

On a machine shared with other work the wall times of passes this short vary by several percent from one pass to
the next. ``--instructions`` counts instead the instructions a pass executes, in all its threads, under valgrind
(``cachegrind``, no cache simulation): the same work gives the same count whatever the load. Each mode runs once with
one pass and once with three, and the difference is two passes' work (about ten minutes in all). Under valgrind every
pass is some 50 times slower, so a measured pass's chunks would stay small: ``on`` lets them grow to their largest
(1,024 samples, as a fast machine makes them), ``on, 128-sample chunks`` holds them to 128, as a slower one does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_shards import make_dataset

MODES = ("off", "on", "on+reports")
SAMPLE_BYTES = 784
#: ``--instructions``: each mode's largest chunk (None: not measured).
COUNTED_MODES = {"off": None, "on": 1024, "on, 128-sample chunks": 128}


def prepare(tmp: Path, count: int) -> Path:
    from datamount.datasets.upload import upload
    from datamount.storage import open_store

    store = tmp / "store"
    upload(make_dataset(tmp / "source", count, SAMPLE_BYTES), "small", store=open_store(store), packed=True)
    return store


def child(store: str, passes: int, reports: str) -> None:
    from datamount.readers import reader
    from datamount.storage import open_store

    opened = open_store(store)
    readers = {mode: reader("small", opened, measure=mode != "off") for mode in MODES}
    reporting = {"DATAMOUNT_STATS": "1", "DATAMOUNT_STATS_FILE": reports}
    counts = {mode: sum(1 for _ in samples()) for mode, samples in readers.items()}  # the page cache warm
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpus: dict[str, list[float]] = {mode: [] for mode in MODES}
    for turn in range(passes):
        shift = turn % len(MODES)  # each mode takes its turn going first
        for mode in MODES[shift:] + MODES[:shift]:
            for variable, value in reporting.items():  # read by each measured pass as it begins
                if mode == "on+reports":
                    os.environ[variable] = value
                else:
                    os.environ.pop(variable, None)
            cpu, started = time.thread_time(), time.perf_counter()
            for _ in readers[mode]():
                pass
            walls[mode].append(time.perf_counter() - started)
            cpus[mode].append(time.thread_time() - cpu)
    found = {
        mode: {
            "count": counts[mode],
            "wall": statistics.median(walls[mode]),
            "cpu": statistics.median(cpus[mode]),
        }
        for mode in MODES
    }
    found["on"]["wait_share"] = readers["on"].stats()["wait_share"]
    print(json.dumps(found))


def counted_child(store: str, passes: int, chunk: int) -> None:
    """``passes`` passes of one reader, under valgrind; ``chunk`` 0: not measured."""
    from datamount.readers import reader, stats
    from datamount.storage import open_store

    if chunk:
        stats.MAX_CHUNK, stats.CHUNK_TARGET_NS = chunk, 1 << 60  # chunks as large as on a machine 50 times faster
    samples = reader("small", open_store(store), measure=bool(chunk))
    for _ in range(passes):
        for _ in samples():
            pass


def instructions(store: Path, mode: str, passes: int) -> int:
    """The instructions a process reading ``passes`` passes in ``mode`` executes, counted by valgrind."""
    chunk = COUNTED_MODES[mode] or 0
    with tempfile.NamedTemporaryFile(prefix="datamount-cachegrind-") as output:
        command = [
            *("valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={output.name}"),
            *(sys.executable, __file__, "--counted", str(store), str(passes), str(chunk)),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    counted = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or counted is None:
        raise SystemExit(f"valgrind failed:\n{done.stderr[-2000:]}")
    return int(counted.group(1).replace(",", ""))


def count_instructions(store: Path) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    per_pass = {mode: (instructions(store, mode, 3) - instructions(store, mode, 1)) / 2 for mode in COUNTED_MODES}
    print("\ninstructions per pass, all threads (valgrind), against off")
    for mode, count in per_pass.items():
        print(f"{mode:<24} {count / 1e6:>10,.1f} M {count / per_pass['off'] - 1:>+8.1%}")


def run_child(store: Path, passes: int, reports: Path) -> dict[str, dict[str, float]]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("DATAMOUNT_STATS")}
    command = [sys.executable, __file__, "--child", str(store), str(passes), str(reports)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if done.returncode != 0:
        raise SystemExit(f"the benchmark's process failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--counted":
        counted_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and runs, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="fresh processes (medians over them reported)")
    parser.add_argument("--passes", type=int, default=None, help="timed passes of each mode in each process")
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    args = parser.parse_args()
    count = 6_000 if args.quick else 60_000
    runs = args.runs or (2 if args.quick else 15)
    passes = args.passes or (3 if args.quick else 9)
    with tempfile.TemporaryDirectory(prefix="datamount-bench-stats-") as folder:
        tmp = Path(folder)
        store = prepare(tmp, count)
        if args.instructions:
            count_instructions(store)
            return
        reports = tmp / "stats.jsonl"
        results = [run_child(store, passes, reports) for _ in range(runs)]
        lines = reports.read_text(encoding="utf-8").splitlines()
    for result in results:
        for mode in MODES:
            if result[mode]["count"] != count:
                raise SystemExit(f"{mode} read {result[mode]['count']} samples, not {count}")

    def median(mode: str, key: str) -> float:
        return statistics.median(result[mode][key] for result in results)

    def cost(mode: str, key: str) -> str:
        ratios = sorted(result[mode][key] / result["off"][key] - 1 for result in results)
        low, high = ratios[len(ratios) // 4], ratios[-1 - len(ratios) // 4]
        return f"{statistics.median(ratios):+.1%} ({low:+.1%} to {high:+.1%})"

    print(f"\n{count:,} packed samples of {SAMPLE_BYTES} B, local disk; {runs} fresh processes, each the median of")
    print(f"{passes} interleaved passes per mode; cost: the median of the processes' ratios to off (middle half)")
    print(f"{'mode':<12} {'wall s/pass':>12} {'samples/s':>10} {'wall cost':>26} {'thread CPU s':>13} {'CPU cost':>26}")
    for mode in MODES:
        print(
            f"{mode:<12} {median(mode, 'wall'):>12.4f} {count / median(mode, 'wall'):>10,.0f} "
            f"{cost(mode, 'wall'):>26} {median(mode, 'cpu'):>13.4f} {cost(mode, 'cpu'):>26}"
        )
    shares = [result["on"]["wait_share"] for result in results]
    print(f"\nwait share reported by 'on' (a consumer that does nothing): median {statistics.median(shares):.2f}")
    print(f"stats file: {len(lines)} lines, from the 'on+reports' passes of {runs} processes")


if __name__ == "__main__":
    main()
