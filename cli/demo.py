"""``datamount demo``: upload a small image dataset and a translation dataset, read both back, show them."""

from __future__ import annotations

import itertools
import tempfile
import time

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
    started = time.perf_counter()
    count = total = 0
    for sample in samples():
        count += 1
        total += sum(len(v) for v in sample)
    elapsed = time.perf_counter() - started
    click.echo(
        f"  read {count} samples, {format_size(total)} in {elapsed * 1000:.2f} ms: "
        f"{count / elapsed:,.0f} samples/s, {format_size(int(total / elapsed))}/s"
    )
