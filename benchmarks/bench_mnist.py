"""MNIST as a public dataset: installing it from already-downloaded IDX files, and reading all 70,000 samples.

    python benchmarks/bench_mnist.py [--quick] [--runs N] [--idx-dir DIR] [--paddle-python PATH]

1. Install: ``public.install("mnist", source=DIR)`` into a fresh local store (check the md5s, decode, write the
   Parquet shards, commit), against decoding the same files with numpy alone (gunzip + ``frombuffer``), the least
   any install must do.
2. Read: every sample of ``mnist.train()`` and ``mnist.test()`` (``float32[784]`` in [-1, 1], int label) from the
   installed dataset, against the same samples decoded straight from the IDX files with numpy (vectorised scaling,
   one sample at a time out), and against Paddle's own ``paddle.dataset.mnist`` reader on the same files when
   paddlepaddle is importable here or in ``--paddle-python``.

``--idx-dir`` names a folder holding the four published files (e.g. ``~/.cache/paddle/dataset/mnist``); without
it, full-size files (60,000 + 10,000 images of random pixels) are generated in a temporary folder. Figures are
medians of ``--runs`` runs, the read cases interleaved.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, interleaved_medians, median_seconds, print_rows

SPLITS = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def idx_gz(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return gzip.compress(header + array.tobytes(), compresslevel=6)


def generate_idx(folder: Path, train: int, test: int) -> None:
    """Full-size MNIST-shaped IDX gzip files with random pixels and labels."""
    generator = np.random.default_rng(0)
    for split, count in (("train", train), ("test", test)):
        images_name, labels_name = SPLITS[split]
        (folder / images_name).write_bytes(idx_gz(generator.integers(0, 256, (count, 28, 28), dtype=np.uint8)))
        (folder / labels_name).write_bytes(idx_gz(generator.integers(0, 10, count, dtype=np.uint8)))


def numpy_split(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split decoded straight from its IDX files: uint8 images (n, 784) and labels."""
    images_name, labels_name = SPLITS[split]
    images = gzip.decompress((folder / images_name).read_bytes())
    labels = gzip.decompress((folder / labels_name).read_bytes())
    count = int.from_bytes(images[4:8], "big")
    return np.frombuffer(images, np.uint8, offset=16).reshape(count, -1), np.frombuffer(labels, np.uint8, offset=8)


def numpy_samples(folder: Path) -> Iterator[tuple[np.ndarray, int]]:
    """Paddle's samples computed with numpy from the IDX files: vectorised scaling, then one sample at a time."""
    for split in SPLITS:
        images, labels = numpy_split(folder, split)
        scaled = (images.astype(np.float32) / 255.0) * 2.0 - 1.0
        for index, label in enumerate(labels.tolist()):
            yield scaled[index], label


def drain(samples: Iterator[tuple[np.ndarray, int]]) -> int:
    count = 0
    for _ in samples:
        count += 1
    return count


def paddle_seconds(folder: Path, runs: int) -> tuple[float, str]:
    """Median seconds for Paddle's own reader to yield both splits' samples from the IDX files."""
    import warnings

    warnings.filterwarnings("ignore")
    import paddle
    import paddle.dataset.mnist as paddle_mnist

    def read() -> None:
        for images_name, labels_name in SPLITS.values():
            drain(paddle_mnist.reader_creator(str(folder / images_name), str(folder / labels_name), 100)())

    return median_seconds(read, runs), paddle.__version__


def paddle_elsewhere(python: str, folder: Path, runs: int) -> tuple[float, str] | str:
    command = [python, os.path.abspath(__file__), "--paddle-only", "--idx-dir", str(folder), "--runs", str(runs)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    except OSError as exc:
        return f"cannot run {python}: {exc}"
    if done.returncode != 0:
        return f"{python} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return float(report["seconds"]), str(report["version"])


def paddle_reference(args: argparse.Namespace, folder: Path) -> tuple[float | None, str]:
    try:
        seconds, version = paddle_seconds(folder, args.runs)
        return seconds, f"paddlepaddle {version} (this interpreter)"
    except ImportError:
        pass
    if not args.paddle_python:
        return None, "paddlepaddle is not importable here and --paddle-python was not given"
    outcome = paddle_elsewhere(args.paddle_python, folder, args.runs)
    if isinstance(outcome, str):
        return None, outcome
    return outcome[0], f"paddlepaddle {outcome[1]} ({args.paddle_python})"


def source_folder(args: argparse.Namespace, scratch: Path) -> tuple[Path, str]:
    if args.idx_dir:
        return Path(args.idx_dir).expanduser(), f"IDX files in {args.idx_dir}"
    folder = scratch / "idx"
    folder.mkdir()
    train, test = (6_000, 1_000) if args.quick else (60_000, 10_000)
    generate_idx(folder, train, test)
    return folder, f"generated IDX files ({train:,} + {test:,} images of random pixels)"


def checksums(folder: Path) -> dict[str, str]:
    return {
        name: hashlib.md5((folder / name).read_bytes(), usedforsecurity=False).hexdigest()
        for pair in SPLITS.values()
        for name in pair
    }


def measure(args: argparse.Namespace, folder: Path, scratch: Path) -> tuple[list[Row], int, str]:
    from datamount.datasets import mnist, public

    public.register(public.get("mnist").with_checksums(checksums(folder)), replace=True)
    store_path = scratch / "store"
    install_seconds = median_seconds(
        lambda: public.install("mnist", store=str(store_path), source=folder),
        args.runs,
        setup=lambda: shutil.rmtree(store_path, ignore_errors=True),
    )
    decode_seconds = median_seconds(lambda: [numpy_split(folder, split) for split in SPLITS], args.runs)
    public.install("mnist", store=str(store_path), source=folder)

    def ours() -> Iterator[tuple[np.ndarray, int]]:
        yield from mnist.train(store=str(store_path))()
        yield from mnist.test(store=str(store_path))()

    _check_same(ours(), numpy_samples(folder))
    samples = drain(ours())
    reads: dict[str, Callable[[], object]] = {
        "datamount": lambda: drain(ours()),
        "numpy": lambda: drain(numpy_samples(folder)),
    }
    medians = interleaved_medians(reads, args.runs)
    paddle, paddle_note = paddle_reference(args, folder)
    rows = [
        Row("local disk", "install (all samples)", install_seconds * 1e3, decode_seconds * 1e3, "ms", "numpy decode"),
        Row("local disk", "read train+test", medians["datamount"] * 1e3, medians["numpy"] * 1e3, "ms", "numpy"),
    ]
    if paddle is not None:
        rows.append(Row("local disk", "read train+test", medians["datamount"] * 1e3, paddle * 1e3, "ms", "Paddle"))
    return rows, samples, paddle_note


def _check_same(ours: Iterator[tuple[np.ndarray, int]], reference: Iterator[tuple[np.ndarray, int]]) -> None:
    for (pixels, label), (want_pixels, want_label) in zip(ours, reference, strict=True):
        if label != want_label or not np.array_equal(pixels, want_pixels):
            raise SystemExit("datamount's samples differ from the IDX files' decoded with numpy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the samples (generated files only)")
    parser.add_argument("--runs", type=int, default=5, help="runs per figure; the median is reported")
    parser.add_argument("--idx-dir", help="a folder holding the four MNIST IDX .gz files")
    parser.add_argument("--paddle-python", help="interpreter with paddlepaddle installed, if this one lacks it")
    parser.add_argument("--paddle-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paddle_only:
        seconds, version = paddle_seconds(Path(args.idx_dir), args.runs)
        print(json.dumps({"seconds": seconds, "version": version}))
        return
    with tempfile.TemporaryDirectory(prefix="datamount-bench-mnist-") as scratch:
        os.environ.setdefault("XDG_CACHE_HOME", str(Path(scratch) / "cache"))
        folder, described = source_folder(args, Path(scratch))
        rows, samples, paddle_note = measure(args, folder, Path(scratch))
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; {described}; "
        f"{samples:,} samples read; median of {args.runs} runs; Paddle: {paddle_note}"
    )
    print_rows(rows, "MNIST: install from local IDX files, and read every sample (lower is better)")
    seconds = rows[1].ours / 1e3
    print(f"\ndatamount read: {seconds * 1e6 / samples:,.2f} us per sample, {samples / seconds:,.0f} samples/s")


if __name__ == "__main__":
    main()
