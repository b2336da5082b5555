"""``datamount demo``: upload a small image dataset and a translation dataset, read both back, show them."""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import click

from datamount.cli.formatting import describe, format_size
from datamount.cli.options import store_options
from datamount.cli.progress import ProgressBar
from datamount.datasets import upload
from datamount.datasets.demo import write_demo_lists
from datamount.readers import reader
from datamount.storage import Store

IMAGE_DATASET = "demo-images"
TEXT_DATASET = "demo-translation"
#: Passes are read again until they took this long together: a rate measured over less says nothing (one pass of the
#: 16 translation pairs takes a few hundredths of a millisecond).
MEASURED_SECONDS = 0.25


@click.command()
@store_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def demo(store: Store, quiet: bool) -> None:
    """Upload a small image dataset and a translation-pair dataset, read them back and show a few samples.

    Works offline with no configuration: the data is generated here and goes to the default store.
    """
    click.echo(f"store: {store.url}")
    with tempfile.TemporaryDirectory(prefix="datamount-demo-") as folder:
        image_list, text_list = write_demo_lists(folder)
        for list_file, name in ((image_list, IMAGE_DATASET), (text_list, TEXT_DATASET)):
            with ProgressBar(quiet=quiet) as bar:
                result = upload(list_file, name, store=store, progress=bar)
            state = "uploaded" if result.created else "already up to date:"
            click.echo(f"{state} {result.manifest.ref} ({result.manifest.kind}, {result.manifest.rows} rows)")
    for name in (IMAGE_DATASET, TEXT_DATASET):
        _show(store, name)
    click.echo("\nnext: datamount ls; datamount info demo-images; datamount head demo-translation -n 3")


def _show(store: Store, name: str) -> None:
    samples = reader(name, store, rank=0, world_size=1)
    click.echo(f"\nreader({name!r}) -> {samples.manifest.ref}, columns {samples.manifest.columns}")
    for sample in itertools.islice(samples(), 3):
        click.echo("  (" + ", ".join(describe(value) for value in sample) + ")")
    passes, count, total, elapsed = _measured(samples)
    click.echo(
        f"  {passes:,} pass(es) of {count // passes} samples ({format_size(total // passes)}) in {elapsed:.2f} s: "
        f"{count / elapsed:,.0f} samples/s, {format_size(int(total / elapsed))}/s"
    )


def _measured(samples: Callable[[], Iterable[tuple[Any, ...]]]) -> tuple[int, int, int, float]:
    """Whole passes of ``samples`` until they took :data:`MEASURED_SECONDS` at least: the passes, the samples and
    their bytes, and the seconds they took."""
    passes = count = total = 0
    started = time.perf_counter()
    while True:
        for sample in samples():
            count += 1
            total += sum(len(value) for value in sample)
        passes += 1
        elapsed = time.perf_counter() - started
        if elapsed >= MEASURED_SECONDS:
            return passes, count, total, elapsed
