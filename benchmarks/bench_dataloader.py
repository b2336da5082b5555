"""DataLoader benchmarks: prefetch overlap, shared-memory transfer, per-sample overhead.

Run ``python benchmarks/bench_dataloader.py [--quick]``. Each figure is the median of several runs (of one with
``--quick``, a smoke run).

1. Overlap: a reader that spends 5 ms per batch in I/O (a sleep) and a training step of 5 ms (a sleep, as a
   GPU step releases the GIL). With prefetching an epoch should take at most 1.1 x the larger of the two.
2. Transfer: 64 MiB batches from a worker process, through the DataLoader's shared-memory ring, against
   pickling them through a ``multiprocessing.Queue`` and against a fresh shared-memory segment per batch.
3. Overhead: ``reader -> shuffle -> batch -> DataLoader`` on small samples, in ns per sample.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any, cast

import numpy as np

from datamount.readers import DataLoader

try:
    from datamount.readers.decorators import batch, shuffle
except ImportError:  # the decorators are optional here: without them the pipeline is reader -> DataLoader
    batch = shuffle = None

CONTEXT = multiprocessing.get_context("fork")
MIB = 2**20


def median_seconds(run: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``run``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def print_table(title: str, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    for row in [header, tuple("-" * width for width in widths), *rows]:
        print(
            "  ".join(
                cell.rjust(width) if i else cell.ljust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            )
        )


# ------------------------------------------------------------------------------------------------- overlap


def slow_batches(count: int, delay: float) -> Iterator[tuple[np.ndarray]]:
    for index in range(count):
        time.sleep(delay)
        yield (np.full(256, index, dtype=np.float32),)


def bench_overlap(count: int, repeats: int, delay: float = 0.005) -> None:
    def reader() -> Iterator[tuple[np.ndarray]]:
        return slow_batches(count, delay)

    def read_only() -> None:
        for _ in reader():
            pass

    def train_only() -> None:
        for _ in range(count):
            time.sleep(delay)

    io_time = median_seconds(read_only, repeats)
    compute_time = median_seconds(train_only, repeats)
    rows = []
    for mode, multiprocess in (("thread", False), ("process", True)):
        loader = DataLoader.from_generator(capacity=4, use_multiprocess=multiprocess).set_batch_generator(reader)

        def epoch(loader: DataLoader = loader) -> None:
            for _ in loader:
                time.sleep(delay)

        epoch_time = median_seconds(epoch, repeats)
        ratio = epoch_time / max(io_time, compute_time)
        rows.append(
            (
                mode,
                f"{io_time * 1e3:.0f}",
                f"{compute_time * 1e3:.0f}",
                f"{(io_time + compute_time) * 1e3:.0f}",
                f"{epoch_time * 1e3:.0f}",
                f"{ratio:.3f}",
                "ok" if ratio <= 1.1 else "MISSED",
            )
        )
    print_table(
        f"Prefetch overlap: {count} batches, {delay * 1e3:.0f} ms I/O + {delay * 1e3:.0f} ms compute each",
        ("prefetch", "I/O ms", "compute ms", "sum ms", "epoch ms", "epoch/max", "<= 1.1"),
        rows,
    )


# ------------------------------------------------------------------------------------------------ transfer


def _payload(nbytes: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)


def pickling_worker(channel: Any, nbytes: int, count: int) -> None:
    payload = _payload(nbytes)
    for _ in range(count):
        channel.put(payload)
    channel.put(None)


def segment_per_batch_worker(channel: Any, nbytes: int, count: int) -> None:
    payload = _payload(nbytes)
    for _ in range(count):
        segment = SharedMemory(create=True, size=nbytes)
        np.frombuffer(cast(memoryview, segment.buf), dtype=np.uint8, count=nbytes)[:] = payload
        channel.put(segment.name)
        segment.close()
    channel.put(None)


def through_queue(worker: Callable[..., None], receive: Callable[[Any], np.ndarray], nbytes: int, count: int) -> None:
    channel = CONTEXT.Queue(maxsize=2)
    process = CONTEXT.Process(target=worker, args=(channel, nbytes, count))
    process.start()
    received = 0
    while (item := channel.get()) is not None:
        assert receive(item).nbytes == nbytes
        received += 1
    process.join()
    assert received == count


def receive_segment(name: str) -> np.ndarray:
    segment = SharedMemory(name=name)
    view = np.frombuffer(cast(memoryview, segment.buf), dtype=np.uint8)
    array = view.copy()
    del view
    segment.close()
    segment.unlink()
    return array


def bench_transfer(count: int, repeats: int, nbytes: int = 64 * MIB) -> None:
    resource_tracker.ensure_running()  # shared by the workers, so their segments are unlinked in step
    payload = _payload(nbytes)
    loader = DataLoader.from_generator(capacity=2, use_multiprocess=True, mp_context="fork")
    loader.set_batch_generator(lambda: ((payload,) for _ in range(count)))

    def ring() -> None:
        assert sum(1 for _ in loader) == count

    timings = {
        "pickled through multiprocessing.Queue": median_seconds(
            lambda: through_queue(pickling_worker, lambda array: array, nbytes, count), repeats
        ),
        "shared memory, new segment per batch": median_seconds(
            lambda: through_queue(segment_per_batch_worker, receive_segment, nbytes, count), repeats
        ),
        "DataLoader shared-memory ring": median_seconds(ring, repeats),
    }
    baseline = timings["pickled through multiprocessing.Queue"]
    rows = [
        (
            name,
            f"{seconds / count * 1e3:.1f}",
            f"{nbytes * count / seconds / 2**30:.2f}",
            f"{baseline / seconds:.1f}x",
        )
        for name, seconds in timings.items()
    ]
    print_table(
        f"Worker -> parent transfer: {count} batches of {nbytes // MIB} MiB (epoch incl. worker start)",
        ("transport", "ms/batch", "GiB/s", "vs pickle"),
        rows,
    )


# ------------------------------------------------------------------------------------------------ overhead


def small_samples(count: int) -> Iterator[tuple[int, float]]:
    for index in range(count):
        yield index, index * 0.5


def bench_overhead(count: int, repeats: int, batch_size: int = 256) -> None:
    def reader() -> Iterator[tuple[int, float]]:
        return small_samples(count)

    def consume(iterable: Any) -> None:
        for _ in iterable:
            pass

    def timed(label: str, make: Callable[[], Any]) -> tuple[str, float]:
        return label, median_seconds(lambda: consume(make()), repeats)

    batching = DataLoader.from_generator(capacity=8).set_sample_generator(reader, batch_size=batch_size)
    rows = [
        timed("reader alone", reader),
        timed("reader -> DataLoader.set_sample_generator", lambda: batching),
    ]
    if shuffle is not None and batch is not None:
        pipeline = batch(shuffle(reader, 8192, seed=0), batch_size, drop_last=True)
        loader = DataLoader.from_generator(capacity=8).set_sample_list_generator(pipeline)
        rows.append(timed("reader -> shuffle -> batch", pipeline))
        rows.append(timed("reader -> shuffle -> batch -> DataLoader", lambda: loader))
    print_table(
        f"Per-sample overhead: {count:,} samples of (int, float), batches of {batch_size}",
        ("pipeline", "ns/sample"),
        [(label, f"{seconds / count * 1e9:.0f}") for label, seconds in rows],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches and samples, one run each (a smoke run)")
    args = parser.parse_args()
    repeats = 1 if args.quick else 5
    bench_overlap(count=100 if args.quick else 200, repeats=repeats)
    bench_transfer(count=8 if args.quick else 24, repeats=repeats)
    bench_overhead(count=200_000 if args.quick else 1_000_000, repeats=repeats)


if __name__ == "__main__":
    main()
