"""Training at scale: a mixture against its slowest part, resume against a fresh start, datamount.torch against
``reader()``.

Usage::

    python benchmarks/bench_training.py [--quick] [--runs N]

Every figure comes from a fresh process per pass (as a job starts), medians of ``--runs`` interleaved passes, on
packed local datasets of 784-byte samples (an MNIST-sized image and its label):

- ``mixture``: ``mix({a: 1, b: 1, c: 1}, samples=N)`` against reading the slowest part alone (target >= 0.9x),
  for the first pass (opening three datasets against one) and the median of the next passes of the same reader;
- ``resume``: from ``DatasetReader.from_state_dict(state)`` to the first sample, against ``reader(name)`` to its
  first sample (target: resume <= fresh open + one row group);
- ``torch``: ``ReaderDataset`` in torch's DataLoader, sample by sample (``batch_size=None``) against iterating
  ``reader()``, and in batches of 64 (collated as lists) with 0 and 2 workers against ``batch(reader, 64)`` in
  the process (target with 0 workers >= 0.9x); with workers also the next epoch of persistent workers and the CPU
  the main process spends per sample receiving batches; skipped without torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_shards import make_dataset

SIZE = 784
BATCH = 64
#: Passes after the first of the same reader, whose median is the steady figure.
STEADY_PASSES = 4
PARTS = ("a", "b", "c")


def prepare(folder: Path, rows: int) -> str:
    from datamount.datasets.upload import upload
    from datamount.storage import open_store

    store = open_store(str(folder / "store"))
    for index, name in enumerate(PARTS):
        listing = make_dataset(folder / f"source-{name}", rows // (index + 1), SIZE)
        upload(listing, name, store=store, packed=True)
    return store.url


# ------------------------------------------------------------------------------------------ one pass per process


def child(what: str, store_url: str, rows: int) -> dict[str, float]:
    started = time.perf_counter()
    if what.startswith("alone:"):
        from datamount.readers import reader

        samples: Any = reader(what.split(":")[1], store_url)
    elif what == "mixture":
        from datamount.readers import mix

        samples = mix(dict.fromkeys(PARTS, 1), store_url, samples=rows)
    elif what in ("fresh", "resume"):
        return _first_sample(what, store_url, started)
    else:
        return _loader_pass(what, store_url)
    count = sum(1 for _ in samples())
    first = time.perf_counter() - started
    later = []
    for _ in range(STEADY_PASSES):  # the next passes of the same reader: reading alone, opened already
        started = time.perf_counter()
        sum(1 for _ in samples())
        later.append(time.perf_counter() - started)
    return {"seconds": first, "steady": statistics.median(later), "samples": count}


def _first_sample(what: str, store_url: str, started: float) -> dict[str, float]:
    from datamount.readers import DatasetReader, reader

    if what == "fresh":
        next(iter(reader("a", store_url, shuffle=True)()))
    else:
        state = json.loads(Path(store_url.removeprefix("file://"), "state.json").read_text())
        next(iter(DatasetReader.from_state_dict(state, store_url)()))
    return {"seconds": time.perf_counter() - started, "samples": 1}


def _loader_pass(what: str, store_url: str) -> dict[str, float]:
    """One pass of part ``a``: ``reader()`` iterated here, or through torch's DataLoader (timed without importing
    torch, reported apart)."""
    from datamount.readers import reader

    imported = 0.0
    if what != "reader":
        started = time.perf_counter()
        import torch.utils.data

        from datamount.torch import ReaderDataset

        imported = time.perf_counter() - started
    started = time.perf_counter()
    samples = reader("a", store_url)
    if what == "reader":
        count = sum(1 for _ in samples())
    elif what == "reader-batches":
        from datamount.readers import batch

        count = sum(len(group) for group in batch(samples, BATCH)())
    else:
        workers, size = (int(part) for part in what.removeprefix("torch-").split("x"))
        loader = torch.utils.data.DataLoader(
            ReaderDataset(samples),
            batch_size=size or None,
            num_workers=workers,
            collate_fn=_lists,
            persistent_workers=workers > 0,
        )
        count = sum(len(group) if size else 1 for group in loader)
        if workers:  # the next epoch, workers running already: the loader's own cost in this process
            first, started, cpu = time.perf_counter() - started, time.perf_counter(), time.process_time()
            sum(len(group) for group in loader)
            steady, cpu = time.perf_counter() - started, time.process_time() - cpu
            return {"seconds": first, "steady": steady, "main_cpu": cpu, "samples": count, "import": imported}
    return {"seconds": time.perf_counter() - started, "samples": count, "import": imported}


def _lists(samples: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A batch as the list of its samples (torch's default collate would make a tensor of labels as well)."""
    return samples


def run_child(what: str, store_url: str, rows: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", json.dumps([what, store_url, rows])]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def medians(whats: list[str], store_url: str, rows: int, runs: int) -> dict[str, dict[str, float]]:
    results: dict[str, list[dict[str, float]]] = {what: [] for what in whats}
    for _ in range(runs):
        for what in whats:
            results[what].append(run_child(what, store_url, rows))
    return {
        what: {key: statistics.median(r[key] for r in found) for key in found[0]} for what, found in results.items()
    }


def save_state(store_url: str) -> None:
    """A state halfway through a shuffled epoch of part ``a`` (saved by 2 ranks, resumed by one: a new segment)."""
    from datamount.readers import reader

    samples = reader("a", store_url, shuffle=True, rank=0, world_size=2)
    state = samples.state_dict(consumed=samples.share_size // 2)
    Path(store_url.removeprefix("file://"), "state.json").write_text(json.dumps(state))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4,000 samples in the largest part instead of 120,000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        what, store_url, rows = json.loads(arguments.child)
        print(json.dumps(child(what, store_url, rows)))
        return
    rows = 4_000 if arguments.quick else 120_000
    with tempfile.TemporaryDirectory(prefix="datamount-bench-training-") as folder:
        store_url = prepare(Path(folder), rows)
        save_state(store_url)
        mixed = medians(["mixture", *(f"alone:{name}" for name in PARTS)], store_url, rows, arguments.runs)
        started = medians(["fresh", "resume"], store_url, rows, arguments.runs)
        torch_whats = ["reader", "reader-batches"]
        torch_whats += ["torch-0x0", "torch-0x64", "torch-1x64", "torch-2x64"] if _has_torch() else []
        torched = medians(torch_whats, store_url, rows, arguments.runs)
    report(mixed, started, torched, rows, arguments.runs)


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def report(mixed: dict[str, Any], started: dict[str, Any], torched: dict[str, Any], rows: int, runs: int) -> None:
    def rate(result: dict[str, float]) -> float:
        return result["samples"] / result["seconds"]

    print(f"\n{SIZE}-byte samples, packed, local disk; medians of {runs} fresh processes each")
    for key, what in (
        ("seconds", "first pass, opening included"),
        ("steady", f"median of the next {STEADY_PASSES} passes of the same reader"),
    ):
        slowest = min(mixed[f"alone:{name}"]["samples"] / mixed[f"alone:{name}"][key] for name in PARTS)
        mixture = mixed["mixture"]["samples"] / mixed["mixture"][key]
        print(
            f"mixture of 3 parts, {rows:,} samples, {what}: {mixture:,.0f} samples/s; slowest part alone "
            f"{slowest:,.0f} samples/s: {mixture / slowest:.2f}x (target >= 0.9)"
        )
    fresh, resume = started["fresh"]["seconds"], started["resume"]["seconds"]
    print(
        f"first sample: fresh reader {fresh * 1000:.0f} ms, resumed from a state (new segment) "
        f"{resume * 1000:.0f} ms: {resume / fresh:.2f}x (target <= about 1: fresh open + one row group)"
    )
    base, batched = rate(torched["reader"]), rate(torched["reader-batches"])
    print(f"reader() in the process: {base:,.0f} samples/s; batch(reader, {BATCH}): {batched:,.0f} samples/s")
    for what, label, against, name in (
        ("torch-0x0", "0 workers, batch_size=None", base, "reader()"),
        ("torch-0x64", f"0 workers, batches of {BATCH}", batched, "batch(reader)"),
        ("torch-1x64", f"1 worker, batches of {BATCH}", batched, "batch(reader)"),
        ("torch-2x64", f"2 workers, batches of {BATCH}", batched, "batch(reader)"),
    ):
        if what in torched:
            result = torched[what]
            print(
                f"torch DataLoader over ReaderDataset, {label}: {rate(result):,.0f} samples/s, "
                f"{rate(result) / against:.2f}x {name}; importing torch {result['import']:.2f} s more"
            )
            if "steady" in result:
                print(
                    f"  next epoch (persistent workers): {result['samples'] / result['steady']:,.0f} samples/s; the "
                    f"main process's CPU {result['main_cpu'] / result['samples'] * 1e6:.1f} us per sample"
                )
    if "torch-0x0" not in torched:
        print("torch: not installed, skipped")


if __name__ == "__main__":
    main()
