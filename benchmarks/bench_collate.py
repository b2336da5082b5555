"""Raw samples through PyTorch's DataLoader: ``collate_bytes`` (one shared-memory tensor per batch) against
``default_collate`` (a list of ``bytes``, pickled sample by sample through the workers' queues).

    python benchmarks/bench_collate.py [--quick] [--workers 1,2,4] [--count N] [--size BYTES] [--batch N] [--runs N]

A packed version of ``--count`` samples of ``--size`` random bytes (JPEG-sized by default) on local disk, read by
``ReaderDataset(reader(name, worker_chunk=batch))`` in ``torch.utils.data.DataLoader`` workers (fork), ``--batch``
samples a batch (the workers take whole batches of the share in turn, as ``docs/sharding.md`` says to); the
main process takes every batch and touches its bytes' size. Each figure is an epoch of persistent workers after a
first one (which starts them and warms the page cache), in samples/s, and the main process's CPU time per sample
(what it spends receiving batches: with enough workers, its ceiling); the median of ``--runs``, the two collates
taking turns. ``collate_bytes`` reads with ``zero_copy=True`` (each value is copied once, into the shared tensor);
``default_collate`` cannot (it would turn each memoryview into a list of ints). On a many-core machine,
``--workers 1,2,4,8,16`` shows how each scales.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.utils.data

from datamount.datasets.pack import pack
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import Store, open_store
from datamount.torch import ByteBatch, ReaderDataset, collate_bytes

COLLATES: dict[str, Callable[[list[Any]], Any]] = {
    "default_collate": torch.utils.data.default_collate,
    "collate_bytes": collate_bytes,
}


def make_version(folder: Path, count: int, size: int) -> Store:
    (folder / "data").mkdir(parents=True)
    rows = []
    for index in range(count):
        (folder / "data" / f"{index:06d}.jpg").write_bytes(os.urandom(size))
        rows.append(f"data/{index:06d}.jpg\t{index % 1000}\n")
    (folder / "samples.list").write_text("".join(rows), encoding="utf-8")
    store = open_store(folder / "store")
    upload(folder / "samples.list", "jpegs", store=store)
    pack("jpegs", store=store)
    return store


def batch_bytes(batch: Any) -> int:
    """What the training loop would touch: each batch's bytes, counted."""
    if isinstance(batch, ByteBatch):
        return batch.data.numel()
    data, _labels = batch
    return sum(map(len, data))


def epoch_rate(
    loader: torch.utils.data.DataLoader[Any], dataset: ReaderDataset, epoch: int, count: int
) -> tuple[float, float]:
    """Samples/s of one epoch, and the main process's CPU microseconds per sample."""
    dataset.set_epoch(epoch)
    started, cpu = time.perf_counter(), time.process_time()
    size = sum(batch_bytes(batch) for batch in loader)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if size == 0:
        raise SystemExit("the loader gave no bytes")
    return count / seconds, cpu / count * 1e6


def measure(store: Store, collate: str, workers: int, batch: int, count: int) -> tuple[float, float]:
    """Samples/s of one epoch of persistent workers, after a first epoch that starts them, and the main process's
    CPU microseconds per sample."""
    dataset = ReaderDataset(reader("jpegs", store, zero_copy=collate == "collate_bytes", worker_chunk=batch))
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        num_workers=workers,
        collate_fn=COLLATES[collate],
        persistent_workers=True,
        multiprocessing_context="fork",
        prefetch_factor=2,
    )
    epoch_rate(loader, dataset, 0, count)
    rate = epoch_rate(loader, dataset, 1, count)
    del loader  # its workers stop
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and one run, for a smoke run")
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default 1,2,4)")
    parser.add_argument("--count", type=int, default=None, help="samples (default 32,000; --quick 2,000)")
    parser.add_argument("--size", type=int, default=21_000, help="bytes per sample (default 21,000)")
    parser.add_argument("--batch", type=int, default=256, help="samples per batch (default 256)")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure, median reported (default 3)")
    args = parser.parse_args()
    count = args.count or (2_000 if args.quick else 32_000)
    runs = args.runs or (1 if args.quick else 3)
    try:
        workers = [int(part) for part in (args.workers or ("1,2" if args.quick else "1,2,4")).split(",")]
    except ValueError:
        parser.error(f"--workers: comma-separated whole numbers, not {args.workers!r}")
    if any(number < 1 for number in workers):
        parser.error("--workers: each count must be at least 1 (a worker process is what is measured)")
    load = os.getloadavg()
    print(f"{count:,} samples of {args.size:,} B, batch {args.batch}, {os.cpu_count()} CPUs, load {load[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="datamount-bench-collate-") as folder:
        store = make_version(Path(folder), count, args.size)
        print(f"\n{'workers':>7}  {'default_collate':>16}  {'collate_bytes':>14}  {'ratio':>6}  main CPU us/sample")
        for number in workers:
            rates: dict[str, list[float]] = {name: [] for name in COLLATES}
            cpus: dict[str, list[float]] = {name: [] for name in COLLATES}
            for _ in range(runs):
                for name in COLLATES:  # taking turns: a slower moment of the machine falls on both
                    rate, cpu = measure(store, name, number, args.batch, count)
                    rates[name].append(rate)
                    cpus[name].append(cpu)
            plain, ours = (statistics.median(rates[name]) for name in COLLATES)
            plain_cpu, our_cpu = (statistics.median(cpus[name]) for name in COLLATES)
            print(
                f"{number:>7}  {plain:>14,.0f}/s  {ours:>12,.0f}/s  {ours / plain:>5.2f}x  "
                f"{plain_cpu:.1f} vs {our_cpu:.1f}",
                flush=True,
            )
    print(f"\nsamples/s through torch.utils.data.DataLoader, median of {runs}; load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
