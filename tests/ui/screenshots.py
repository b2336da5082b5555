"""The README's screenshots of ``datamount ui``: the sample view and the training page, taken in headless Chromium
(the browser test's set-up) over the demo's datasets and a generated statistics file.

    python -m tests.ui.screenshots [FOLDER]     (default: docs/images)

Each image is reduced to a palette of at most 128 colours and kept under 200 KB.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

from PIL import Image
from selenium.webdriver.support.ui import WebDriverWait

from tests.ui.showcase import IMAGES, UiServer, build, chrome

#: Each screenshot: its file, the page, and the window's size.
SHOTS = [
    ("ui-samples.png", f"/stores/store-1/samples?ref={IMAGES}@1", (1100, 640)),
    ("ui-training.png", "/training", (1280, 1040)),
]
MAX_BYTES = 200_000
#: Whether every image in the window is loaded and decoded (images further down load lazily, as they come into view;
#: the page's load event does not wait for them).
IMAGES_IN_VIEW_DRAWN = """
return Array.from(document.images)
    .filter(image => image.getBoundingClientRect().top < window.innerHeight)
    .every(image => image.complete && image.naturalWidth > 0);
"""


def small_png(png: bytes) -> bytes:
    """``png`` with a palette of the fewest colours (128, 64 or 32) that keeps it under :data:`MAX_BYTES`."""
    with Image.open(io.BytesIO(png)) as image:
        rgb = image.convert("RGB")
    for colours in (128, 64, 32):
        out = io.BytesIO()
        rgb.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(out, "PNG", optimize=True)
        if out.tell() < MAX_BYTES:
            return out.getvalue()
    raise ValueError(f"a screenshot stays over {MAX_BYTES:,} bytes even with 32 colours")


def take(folder: Path) -> list[Path]:
    """Take the screenshots into ``folder``; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="datamount-screenshots-") as temporary:
        showcase = build(Path(temporary))
        # Named relative to the folder the server runs in: the page shows the statistics file by the name it is given.
        server = UiServer(["store"], showcase.folder / "ui.log", stats_file=Path("stats.jsonl"), cwd=showcase.folder)
        try:
            for name, page, (width, height) in SHOTS:
                driver = chrome(width, height)
                try:
                    # The window's size is not the page's: the page's is set exactly.
                    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
                    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
                    driver.get(server.url + page)
                    driver.execute_script("return document.fonts.ready")
                    WebDriverWait(driver, 30).until(lambda d: d.execute_script(IMAGES_IN_VIEW_DRAWN))
                    png = small_png(driver.get_screenshot_as_png())
                finally:
                    driver.quit()
                (folder / name).write_bytes(png)
                written.append(folder / name)
        finally:
            server.stop()
    return written


if __name__ == "__main__":
    for path in take(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")):
        print(f"{path}: {path.stat().st_size:,} bytes")
