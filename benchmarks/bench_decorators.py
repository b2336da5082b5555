"""Per-sample overhead of the reader decorators, against PaddlePaddle's own decorators when they are available.

Usage::

    python benchmarks/bench_decorators.py [--quick] [--runs N] [--paddle-python PATH]

Each figure is the median over ``--runs`` runs of (time to drain the reader) / (samples read), in nanoseconds.
Paddle is imported in this interpreter if it can be; otherwise ``--paddle-python`` names an interpreter that has
``paddlepaddle`` installed, and this script runs its Paddle half there (``--paddle-only`` prints JSON). The samples
are small ints, so the figures are the decorators' own overhead, not any I/O or decoding.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import platform
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace
from typing import Any

BUF_SIZE = 1000
BATCH_SIZE = 32
THREADS = 4
# Paddle's ordered xmap_readers spins (``while order != expected: pass``). Once the input outgrows its buffer it
# stalls for milliseconds per sample on two cores, so it gets fewer samples: just enough to outgrow the buffer.
PADDLE_ORDERED_XMAP_SAMPLES = 1500

CASES = {
    "source": "reader alone (range)",
    "pipeline": f"reader -> shuffle({BUF_SIZE}) -> batch({BATCH_SIZE})",
    "buffered": f"reader -> buffered({BUF_SIZE})",
    "xmap": f"xmap_readers(abs, {THREADS} threads, {BUF_SIZE})",
    "xmap_ordered": f"xmap_readers(abs, {THREADS} threads, {BUF_SIZE}, order=True)",
    "multiprocess": "multiprocess_reader(2 readers, pipe, fork)",
}


def sizes(quick: bool) -> dict[str, int]:
    pipeline = 100_000 if quick else 1_000_000
    background = 20_000 if quick else 200_000
    return {
        "source": pipeline,
        "pipeline": pipeline,
        "buffered": background,
        "xmap": background,
        "xmap_ordered": background,
        "multiprocess": background,
    }


def drain(iterable: Iterable[Any]) -> None:
    collections.deque(iterable, maxlen=0)


def median_ns_per_sample(make_reader: Callable[[], Callable[[], Iterable[Any]]], samples: int, runs: int) -> float:
    times = []
    for _ in range(runs):
        reader = make_reader()
        start = time.perf_counter()
        drain(reader())
        times.append(time.perf_counter() - start)
    return statistics.median(times) / samples * 1e9


def library_cases(lib: SimpleNamespace, counts: dict[str, int]) -> dict[str, Callable[[], Any]]:
    """Reader factories for the cases, built from one library's decorators (same calls for both)."""

    def source(key: str) -> Callable[[], Iterable[int]]:
        return functools.partial(range, counts[key])

    return {
        "pipeline": lambda: lib.batch(lib.shuffle(source("pipeline"), BUF_SIZE), BATCH_SIZE),
        "buffered": lambda: lib.buffered(source("buffered"), BUF_SIZE),
        "xmap": lambda: lib.xmap_readers(abs, source("xmap"), THREADS, BUF_SIZE),
        "xmap_ordered": lambda: lib.xmap_readers(abs, source("xmap_ordered"), THREADS, BUF_SIZE, True),
        "multiprocess": lambda: lib.multiprocess_reader(
            [functools.partial(range, start, counts["multiprocess"], 2) for start in (0, 1)]
        ),
    }


def measure(lib: SimpleNamespace, counts: dict[str, int], runs: int) -> dict[str, tuple[float, int]]:
    return {
        key: (median_ns_per_sample(factory, counts[key], runs), counts[key])
        for key, factory in library_cases(lib, counts).items()
    }


def datamount_library() -> SimpleNamespace:
    from datamount import readers

    return SimpleNamespace(
        batch=readers.batch,
        shuffle=readers.shuffle,
        buffered=readers.buffered,
        xmap_readers=readers.xmap_readers,
        multiprocess_reader=functools.partial(readers.multiprocess_reader, mp_context="fork"),
    )


def paddle_library() -> tuple[SimpleNamespace, str]:
    import paddle
    import paddle.reader

    lib = SimpleNamespace(
        batch=paddle.batch,
        shuffle=paddle.reader.shuffle,
        buffered=paddle.reader.buffered,
        xmap_readers=paddle.reader.xmap_readers,
        multiprocess_reader=paddle.reader.multiprocess_reader,
    )
    return lib, paddle.__version__


def measure_paddle_here(counts: dict[str, int], runs: int) -> tuple[dict[str, tuple[float, int]], str]:
    lib, version = paddle_library()
    counts = dict(counts, xmap_ordered=min(counts["xmap_ordered"], PADDLE_ORDERED_XMAP_SAMPLES))
    return measure(lib, counts, runs), version


def plain_shuffle_batch(count: int, buf_size: int, batch_size: int, seed: int = 0) -> Iterator[list[int]]:
    """The pipeline written by hand as one generator: sliding-buffer shuffle and batching, no decorators."""
    rng = random.Random(seed)
    draw = rng.random
    buffer: list[int] = []
    chunk: list[int] = []
    for sample in range(count):
        if len(buffer) < buf_size:
            buffer.append(sample)
            continue
        slot = int(draw() * buf_size)
        chunk.append(buffer[slot])
        buffer[slot] = sample
        if len(chunk) == batch_size:
            yield chunk
            chunk = []
    rng.shuffle(buffer)
    for sample in buffer:
        chunk.append(sample)
        if len(chunk) == batch_size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def plain_references(counts: dict[str, int], runs: int) -> dict[str, tuple[float, int]]:
    pipeline = functools.partial(plain_shuffle_batch, counts["pipeline"], BUF_SIZE, BATCH_SIZE)
    source = functools.partial(range, counts["source"])
    return {
        "source": (median_ns_per_sample(lambda: source, counts["source"], runs), counts["source"]),
        "pipeline": (median_ns_per_sample(lambda: pipeline, counts["pipeline"], runs), counts["pipeline"]),
    }


def paddle_in_subprocess(python: str, quick: bool, runs: int) -> tuple[dict[str, tuple[float, int]], str] | str:
    command = [python, os.path.abspath(__file__), "--paddle-only", "--runs", str(runs)] + (["--quick"] * quick)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    except OSError as exc:
        return f"cannot run {python}: {exc}"
    if done.returncode != 0:
        return f"{python} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {key: (value[0], value[1]) for key, value in report["results"].items()}, report["version"]


def paddle_results(args: argparse.Namespace, counts: dict[str, int]) -> tuple[dict[str, Any], str]:
    try:
        results, version = measure_paddle_here(counts, args.runs)
        return results, f"paddlepaddle {version} (this interpreter)"
    except ImportError:
        pass
    if args.paddle_python:
        outcome = paddle_in_subprocess(args.paddle_python, args.quick, args.runs)
        if isinstance(outcome, str):
            return {}, f"Paddle unavailable: {outcome}"
        return outcome[0], f"paddlepaddle {outcome[1]} ({args.paddle_python})"
    return {}, "Paddle unavailable: paddlepaddle is not importable here and --paddle-python was not given"


def cell(result: tuple[float, int] | None, row_samples: int) -> str:
    if result is None:
        return "-"
    value, samples = result
    text = f"{value:,.0f}"
    return text if samples == row_samples else f"{text} (n={samples:,})"


def print_table(rows: list[tuple[str, str, str, str, str]]) -> None:
    header = ("case", "samples", "datamount ns/sample", "Paddle ns/sample", "plain Python ns/sample")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * width for width in widths), *rows]:
        cells = [row[0].ljust(widths[0])] + [text.rjust(width) for text, width in zip(row[1:], widths[1:], strict=True)]
        print("  ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the samples")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument("--paddle-python", help="interpreter with paddlepaddle installed, if this one lacks it")
    parser.add_argument("--paddle-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = sizes(args.quick)
    if args.paddle_only:
        results, version = measure_paddle_here(counts, args.runs)
        print(json.dumps({"version": version, "results": results}))
        return

    ours = measure(datamount_library(), counts, args.runs)
    plain = plain_references(counts, args.runs)
    paddle, paddle_note = paddle_results(args, counts)
    rows = [
        (
            label,
            f"{counts[key]:,}",
            cell(ours.get(key), counts[key]),
            cell(paddle.get(key), counts[key]),
            cell(plain.get(key), counts[key]),
        )
        for key, label in CASES.items()
    ]
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"median of {args.runs} runs; {paddle_note}"
    )
    print_table(rows)


if __name__ == "__main__":
    main()
