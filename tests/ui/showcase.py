"""What the UI tests and the README's screenshots look at: a store holding the demo's datasets and a second version
of the images, a reader statistics file, a ``datamount ui`` process serving them, and a headless Chromium.

The second version of ``demo-images`` differs from the first in known ways (:data:`EXPECTED_DIFF`): rows removed,
relabelled, re-encoded and added, among the added a large JPEG (shown as a thumbnail), a row whose label is markup
(shown as text), and images of awkward sizes (:data:`ODD_IMAGES`: a speck, a strip, and one of more pixels than a
thumbnail is made from).
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamount.datasets import upload
from datamount.datasets.demo import png_bytes, write_demo_lists
from datamount.storage import Store, open_store
from tests.servers._launch import cannot_run, exit_report, stop_process, wait_until

IMAGES, TEXT = "demo-images", "demo-translation"
#: The label of one added row: it must show as these characters, and run nothing.
MARKUP_LABEL = "<script>alert(1)</script>"
#: Size of the large image added in version 2 (its thumbnail is smaller).
LARGE_IMAGE = (640, 480)
#: Images of awkward sizes added in version 2 after the large one, by their row there: width, height.
ODD_IMAGES = {199: (16, 16), 200: (1024, 64), 201: (5000, 4000)}
#: How demo-images@2 differs from demo-images@1.
EXPECTED_DIFF = {"added": 12, "removed": 10, "changed": 8, "unchanged": 182}
#: The statistics file's shape: ranks, DataLoader workers per rank, lines per worker, seconds per line.
STATS_RANKS, STATS_WORKERS, STATS_INTERVALS, STATS_INTERVAL_S = 2, 2, 24, 5.0
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@dataclass(frozen=True)
class Showcase:
    folder: Path
    store: Store
    stats_file: Path


def build(folder: Path) -> Showcase:
    """The store under ``folder`` with the demo's datasets, ``demo-images@2``, and a statistics file."""
    store = open_store(folder / "store")
    image_list, text_list = write_demo_lists(folder / "demo")
    upload(image_list, IMAGES, store=store)
    upload(text_list, TEXT, store=store)
    upload(_second_version(image_list), IMAGES, store=store)
    stats_file = folder / "stats.jsonl"
    write_stats_file(stats_file)
    return Showcase(folder, store, stats_file)


def _second_version(image_list: Path) -> Path:
    """The list of demo-images@2, beside ``image_list``: rows 0-9 removed, 10-14 relabelled, the files of 15-17
    redrawn, and 12 rows added (7 small images, one labelled with markup, one large JPEG, then :data:`ODD_IMAGES`)."""
    from PIL import Image

    root = image_list.parent
    rows = [line.split("\t") for line in image_list.read_text(encoding="utf-8").splitlines()]
    kept = rows[10:]
    for row in kept[:5]:
        row[1] = str((int(row[1]) + 1) % 4)
    rng = np.random.default_rng(2)
    for path, _ in kept[5:8]:
        (root / path).write_bytes(png_bytes(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    added = []
    for index in range(8):
        name = f"images/added-{index}.png"
        (root / name).write_bytes(png_bytes(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)))
        added.append([f"./{name}", "3" if index < 7 else MARKUP_LABEL])
    width, height = LARGE_IMAGE
    gradient = np.linspace(0, 255, width, dtype=np.float32)[None, :, None] * np.ones((height, 1, 3), np.float32)
    noisy = np.clip(gradient + rng.normal(0, 40, (height, width, 3)), 0, 255).astype(np.uint8)
    jpeg = io.BytesIO()
    Image.fromarray(noisy).save(jpeg, "JPEG", quality=95)
    (root / "images/large.jpg").write_bytes(jpeg.getvalue())
    added.append(["./images/large.jpg", "1"])
    for index, (width, height) in enumerate(ODD_IMAGES.values()):
        name = f"images/odd-{width}x{height}.png"
        if width * height > 1 << 20:  # one colour: a few KB, whatever its size
            Image.new("RGB", (width, height), (40, 120, 200)).save(root / name)
        else:  # a gradient across, under the size a thumbnail is made from: served as itself
            across = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
            pixels = (across * np.ones((height, 1, 3), np.float32) * (0.3, 0.7, 1.0)).astype(np.uint8)
            (root / name).write_bytes(png_bytes(pixels))
        added.append([f"./{name}", str(index)])
    second = root / "images-2.list"
    second.write_text("".join(f"{path}\t{label}\n" for path, label in kept + added), encoding="utf-8")
    return second


def write_stats_file(path: Path) -> None:
    """A statistics file as ``DATAMOUNT_STATS_FILE`` holds it: two ranks of two DataLoader workers reading
    ``demo-images@2`` for two minutes; rank 1 waits on its store for a while in the middle."""
    lines = []
    start = 1_750_000_000.0
    for interval in range(STATS_INTERVALS):
        for rank in range(STATS_RANKS):
            for worker in range(STATS_WORKERS):
                slow = rank == 1 and 8 <= interval < 16
                waited = STATS_INTERVAL_S * (0.6 if slow else 0.05 + 0.02 * math.sin(interval + worker))
                samples = int((150 if slow else 420) + 10 * worker)
                lines.append({
                    "format": 1, "time": start + (interval + 1) * STATS_INTERVAL_S, "rank": rank,
                    "world_size": STATS_RANKS, "worker": worker, "dataset": f"{IMAGES}@2",
                    "pass": interval // 12, "interval_s": STATS_INTERVAL_S, "samples": samples,
                    "bytes": samples * 11_000, "waited_s": round(waited, 3),
                    "compute_s": round(STATS_INTERVAL_S - waited, 3), "requests": samples // 16,
                    "retries": 1 if slow and worker == 0 else 0, "throttled_s": 0.4 if slow else 0.0,
                    "cache_hits": 0, "bytes_verified": samples * 11_000, "final": interval % 12 == 11,
                })  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


class UiServer:
    """``datamount ui`` serving ``stores`` (``--store`` values) on a free loopback port, its output in ``log``."""

    def __init__(
        self,
        stores: list[str],
        log: Path,
        *,
        stats_file: Path | None = None,
        cwd: Path | None = None,
        options: dict[str, str] | None = None,
    ) -> None:
        command = [sys.executable, "-m", "datamount.cli.main", "ui", "--port", "0"]
        for store in stores:
            command += ["--store", store]
        for option, value in (options or {}).items():
            command += ["-o", f"{option}={value}"]
        if stats_file is not None:
            command += ["--stats", str(stats_file)]
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd
            )
        self.url = ""
        try:
            wait_until(self._ready, timeout=60, failed=lambda: exit_report(self.process, log), what="datamount ui")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        found = re.search(r" at (http://127\.0\.0\.1:\d+)/", self.log.read_text(encoding="utf-8", errors="replace"))
        if found:
            self.url = found.group(1)
        return bool(found)

    def stop(self) -> None:
        stop_process(self.process)


def chrome(width: int = 1280, height: int = 900):  # type: ignore[no-untyped-def]
    """A headless Chromium driven by Selenium through Debian's chromedriver (never one downloaded)."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists() and not shutil.which(path.name)]
    if missing:
        cannot_run("browser", f"{', '.join(missing)} missing (Debian's chromium and chromium-driver: .ci/run)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
                     f"--window-size={width},{height}", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
