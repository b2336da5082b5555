"""The stream format through an OS pipe between two processes, against the same bytes with no format at all.

Usage::

    python benchmarks/bench_stream.py [--quick] [--runs N]

1. Tensors: a writer process sends 1 MiB float32 arrays with ``write_to("-")``; a reader process takes them with
   ``read_from("-")``. References through the same kind of pipe: raw ``os.write``/``os.readv`` of the same bytes
   (the pipe's own limit) and ``pickle`` (protocol 5) of the same arrays. Target: >= 1 GB/s.
2. Scalars: entries of (int, float, str), in entries per second, against pickling each tuple.
3. Decoding: reading 1 MiB tensors from memory as read-only views (no copy) against ``writable=True`` (a copy).

Each figure is the median of ``--runs`` runs. The reader times itself from its first entry to the end of the
stream, so process start-up and imports are not counted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
from _harness import Row, median_seconds, print_rows

from datamount.readers.stream import read_from, widen_pipe, write_to

TENSOR = 1 << 20
TENSOR_VALUES = TENSOR // 4


# ------------------------------------------------------------------------------------------------ writers


def write_tensors(kind: str, count: int) -> None:
    array = np.random.default_rng(0).random(TENSOR_VALUES, dtype=np.float32)
    if kind.startswith("raw"):
        if kind == "raw-wide":
            widen_pipe(sys.stdout.buffer)
        data = array.tobytes()
        for _ in range(count):
            os.write(1, data)
    elif kind == "pickle":
        out = sys.stdout.buffer
        for _ in range(count):
            pickle.dump(array, out, protocol=5)
        out.flush()
    else:
        with write_to("-") as stream:
            stream.set_columns("x")
            for _ in range(count):
                stream.write(array)


def write_scalars(kind: str, count: int) -> None:
    entries = ((index, index * 0.5, f"label {index % 1000}") for index in range(count))
    if kind == "pickle":
        out = sys.stdout.buffer
        for entry in entries:
            pickle.dump(entry, out, protocol=5)
        out.flush()
    else:
        with write_to("-") as stream:
            stream.set_columns("index", "score", "label")
            for entry in entries:
                stream.write(*entry)


# ------------------------------------------------------------------------------------------------ readers


def read_tensors(kind: str) -> dict[str, float]:
    """Drain stdin; bytes and seconds counted from the first entry on."""
    if kind.startswith("raw"):
        buffer = bytearray(TENSOR)
        total = os.readv(0, [buffer])
        started, first = time.perf_counter(), total
        while chunk := os.readv(0, [buffer]):
            total += chunk
        return {"bytes": total - first, "seconds": time.perf_counter() - started, "entries": 0}
    entries = _pickled(sys.stdin.buffer) if kind == "pickle" else (e["x"] for e in read_from("-"))
    first = next(entries)
    started, total, count = time.perf_counter(), 0, 0
    for array in entries:
        total += array.nbytes
        count += 1
    if first.dtype != np.float32 or first.nbytes != TENSOR:
        raise RuntimeError(f"the reader got {first.dtype} arrays of {first.nbytes} bytes")
    return {"bytes": total, "seconds": time.perf_counter() - started, "entries": count}


def read_scalars(kind: str) -> dict[str, float]:
    entries = _pickled(sys.stdin.buffer) if kind == "pickle" else read_from("-").rows()
    next(entries)
    started, count = time.perf_counter(), 0
    for _ in entries:
        count += 1
    return {"bytes": 0, "seconds": time.perf_counter() - started, "entries": count}


def _pickled(source: IO[bytes]) -> Iterator[Any]:
    try:
        while True:
            yield pickle.load(source)
    except EOFError:
        return


# ------------------------------------------------------------------------------------------------ driver


def through_pipe(role: str, kind: str, count: int) -> dict[str, float]:
    """One run: a writer process piped into a reader process; the reader's figures."""
    me = [sys.executable, __file__]
    writer = subprocess.Popen(
        [*me, "--role", f"write-{role}", "--kind", kind, "--count", str(count)], stdout=subprocess.PIPE
    )
    assert writer.stdout is not None
    reader = subprocess.run(
        [*me, "--role", f"read-{role}", "--kind", kind],
        stdin=writer.stdout,
        capture_output=True,
        check=True,
        timeout=600,
    )
    writer.stdout.close()
    if writer.wait(timeout=60) != 0:
        raise RuntimeError(f"the {kind} writer failed with status {writer.returncode}")
    return dict(json.loads(reader.stdout))


def interleaved_rates(role: str, kinds: list[str], count: int, runs: int, *, per: str) -> dict[str, float]:
    """The median rate of each kind over ``runs`` rounds; each round runs every kind once, so that other load on
    the machine falls on all of them alike."""
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(runs):
        for kind in kinds:
            figures = through_pipe(role, kind, count)
            rates[kind].append(figures[per] / figures["seconds"])
    return {kind: statistics.median(found) for kind, found in rates.items()}


def bench_tensors(count: int, runs: int) -> list[Row]:
    rates = interleaved_rates("tensors", ["stream", "raw", "raw-wide", "pickle"], count, runs, per="bytes")
    ours, raw, wide, pickled = (rates[kind] / 1e9 for kind in ("stream", "raw", "raw-wide", "pickle"))
    operation = f"{count} x 1 MiB float32"
    return [
        Row("pipe", operation, ours, wide, "GB/s", "raw os.write/os.readv, pipe widened to 1 MiB as datamount does"),
        Row("pipe", operation, ours, raw, "GB/s", "raw os.write/os.readv, default 64 KiB pipe"),
        Row("pipe", operation, ours, pickled, "GB/s", "pickle protocol 5 of the same arrays"),
    ]


def bench_scalars(count: int, runs: int) -> list[Row]:
    rates = interleaved_rates("scalars", ["stream", "pickle"], count, runs, per="entries")
    operation = f"{count:,} (int, float, str)"
    ours, pickled = rates["stream"] / 1e3, rates["pickle"] / 1e3
    return [Row("pipe", operation, ours, pickled, "k entries/s", "pickle.dump per entry")]


def bench_decoding(count: int, runs: int) -> list[Row]:
    buffer = io.BytesIO()
    with write_to(buffer) as stream:
        stream.set_columns("x")
        array = np.ones(TENSOR_VALUES, np.float32)
        for _ in range(count):
            stream.write(array)
    data = buffer.getvalue()

    def drain(writable: bool) -> None:
        for _ in read_from(io.BytesIO(data), writable=writable):
            pass

    shared = median_seconds(lambda: drain(False), runs)
    copied = median_seconds(lambda: drain(True), runs)
    size = count * TENSOR / 1e9
    return [Row("memory", f"read {count} x 1 MiB tensors", size / shared, size / copied, "GB/s", "writable=True")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (median reported; default 5, 3)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        run_role(args.role, args.kind, args.count)
        return
    runs = args.runs or (3 if args.quick else 5)
    tensors, scalars = (256, 200_000) if args.quick else (2048, 2_000_000)
    rows = bench_tensors(tensors, runs) + bench_scalars(scalars, runs) + bench_decoding(tensors // 4, runs)
    print_rows(rows, f"stream format through an OS pipe between two processes (median of {runs} runs)")
    print(f"\ntarget for 1 MiB tensors through a pipe: >= 1 GB/s; measured {rows[0].ours:.2f} GB/s")


def run_role(role: str, kind: str, count: int | None) -> None:
    if role == "write-tensors":
        write_tensors(kind, count or 0)
    elif role == "write-scalars":
        write_scalars(kind, count or 0)
    elif role == "read-tensors":
        print(json.dumps(read_tensors(kind)))
    elif role == "read-scalars":
        print(json.dumps(read_scalars(kind)))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
