"""``datamount ui`` over HTTP: what each page answers, how stored bytes are served, and the rules every request goes
through (read-only, escaped, damaged objects shown as damaged, requests only from this machine's names)."""

from __future__ import annotations

import http.client
import io
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from datamount.datasets import catalog, import_batches, layout, upload
from datamount.datasets.demo import png_bytes
from datamount.datasets.diff import MOST_CLASSES
from datamount.storage import Store, open_store
from datamount.ui.app import CONTENT_SECURITY_POLICY
from datamount.ui.values import THUMBNAIL_PIXELS
from tests.ui.showcase import UiServer

MARKUP = ["<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "\"quoted\" & 'single'"]
DAMAGED_ROW, MISSING_ROW, LARGE_ROW, NOT_AN_IMAGE_ROW = 3, 5, 2, 7
#: The headers every answer carries (docs/ui.md, "What holds").
KEPT_TO_ITSELF = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
#: An image a PNG of one colour holds in 420 KB: 576 MB once decoded (Pillow holds RGB in 4 bytes a pixel).
HUGE = (12_000, 12_000)


def write_pictures(folder: Path) -> Path:
    """A list of 12 files: 64x64 PNGs, but row 2 a 800x600 JPEG and row 7 bytes that are no image."""
    (folder / "files").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = []
    for index in range(12):
        path = folder / "files" / f"{index:02d}.bin"
        if index == LARGE_ROW:
            pixels = rng.integers(0, 255, (600, 800, 3), dtype=np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, "JPEG", quality=90)
            path.write_bytes(out.getvalue())
        elif index == NOT_AN_IMAGE_ROW:
            path.write_bytes(b"these bytes are no image\n" * 4)
        else:
            path.write_bytes(png_bytes(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)))
        rows.append(f"./files/{path.name}\t{['cat', 'dog', MARKUP[0]][index % 3]}\n")
    (folder / "pictures.list").write_text("".join(rows), encoding="utf-8")
    return folder / "pictures.list"


def build_store(folder: Path) -> Store:
    store = open_store(folder / "store")
    pictures = write_pictures(folder / "src")
    upload(pictures, "pictures", store=store, kind="image")
    upload(pictures, "packed-pictures", store=store, kind="image", packed=True)
    text = folder / "src" / "markup.list"
    text.write_text("".join(f"{value}\t{value}\n" for value in MARKUP), encoding="utf-8")
    upload(text, "markup", store=store, kind="text")
    table = pa.table({"x": pa.array(range(30), pa.int64()), "name": pa.array([f"n{i}" for i in range(30)])})
    import_batches(table.to_batches(), table.schema, "numbers", store=store)
    manifest = catalog.resolve(store, "pictures@1")
    entries = {entry.path: entry for entry in manifest.files}
    damaged = entries[f"files/{DAMAGED_ROW:02d}.bin"]
    Path(store.local_path(layout.object_path("pictures", damaged.sha256))).write_bytes(b"X" * damaged.size)
    missing = entries[f"files/{MISSING_ROW:02d}.bin"]
    os.remove(store.local_path(layout.object_path("pictures", missing.sha256)))
    return store


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[int, int]]]:
    folder = tmp_path_factory.mktemp("pages")
    build_store(folder)
    return folder, tree(folder / "store")


@pytest.fixture(scope="module")
def server(built: tuple[Path, dict[str, tuple[int, int]]]) -> Iterator[UiServer]:
    folder, _ = built
    running = UiServer([str(folder / "store")], folder / "ui.log")
    yield running
    running.stop()


def get(server: UiServer, path: str, *, method: str = "GET", host: str | None = None) -> http.client.HTTPResponse:
    """The answer to ``method path`` (read: ``.status``, ``.headers``, ``.body``)."""
    where = urlsplit(server.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    connection.request(method, path, headers={"Host": host} if host else {})
    answer = connection.getresponse()
    answer.body = answer.read()  # type: ignore[attr-defined]
    connection.close()
    return answer


def stored_file(built: tuple[Path, dict[str, tuple[int, int]]], row: int) -> bytes:
    return (built[0] / "src" / "files" / f"{row:02d}.bin").read_bytes()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/stores/store-1",
        "/stores/store-1/dataset?name=pictures",
        "/stores/store-1/samples?ref=pictures@1",
        "/stores/store-1/samples?ref=packed-pictures@1",
        "/stores/store-1/samples?ref=markup@1",
        "/stores/store-1/samples?ref=numbers@1",
        "/stores/store-1/labels?ref=pictures@1",
        "/stores/store-1/labels?ref=packed-pictures@1",
        "/stores/store-1/labels?ref=numbers@1",
        "/training",
    ],
    ids=lambda path: path,
)
def test_every_page_answers(server: UiServer, path: str) -> None:
    answer = get(server, path)
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "text/html; charset=utf-8"
    assert answer.body.startswith(b"<!doctype html>")  # type: ignore[attr-defined]


def test_an_image_is_served_as_its_stored_bytes_with_its_type(server: UiServer, built) -> None:  # type: ignore[no-untyped-def]
    for ref in ("pictures@1", "packed-pictures@1"):
        answer = get(server, f"/stores/store-1/value?ref={ref}&row=0&column=0")
        assert answer.status == 200
        assert answer.headers["Content-Type"] == "image/png"
        assert answer.body == stored_file(built, 0)  # type: ignore[attr-defined]
        large = get(server, f"/stores/store-1/value?ref={ref}&row={LARGE_ROW}&column=0")
        assert (large.headers["Content-Type"], large.body) == ("image/jpeg", stored_file(built, LARGE_ROW))  # type: ignore[attr-defined]


def test_a_large_image_is_shown_as_a_thumbnail_a_small_one_as_itself(server: UiServer, built) -> None:  # type: ignore[no-untyped-def]
    thumbnail = get(server, f"/stores/store-1/value?ref=pictures@1&row={LARGE_ROW}&column=0&thumbnail=1")
    assert thumbnail.status == 200 and thumbnail.headers["Content-Type"] == "image/jpeg"
    with Image.open(io.BytesIO(thumbnail.body)) as small:  # type: ignore[attr-defined]
        assert max(small.size) == THUMBNAIL_PIXELS and small.size[0] > small.size[1]
    small_one = get(server, "/stores/store-1/value?ref=pictures@1&row=0&column=0&thumbnail=1")
    assert small_one.body == stored_file(built, 0)  # type: ignore[attr-defined]


def test_bytes_that_are_no_image_are_a_download_never_a_page(server: UiServer, built) -> None:  # type: ignore[no-untyped-def]
    answer = get(server, f"/stores/store-1/value?ref=pictures@1&row={NOT_AN_IMAGE_ROW}&column=0")
    assert answer.headers["Content-Type"] == "application/octet-stream"
    assert answer.headers["Content-Disposition"] == 'attachment; filename="pictures-1-row-7-column-0.bin"'
    assert answer.body == stored_file(built, NOT_AN_IMAGE_ROW)  # type: ignore[attr-defined]
    page = get(server, "/stores/store-1/samples?ref=pictures@1").body.decode()  # type: ignore[attr-defined]
    assert "100 bytes: 74 68 65 73" in page  # described, with its first bytes in hex


def test_a_damaged_object_shows_as_damaged_never_its_bytes(server: UiServer) -> None:
    page = get(server, "/stores/store-1/samples?ref=pictures@1").body.decode()  # type: ignore[attr-defined]
    card = page.split(f'id="row-{DAMAGED_ROW}"')[1].split("</figure>")[0]
    assert '<div class="problem">damaged</div>' in card and "does not match its xxh3-64" in card
    assert f"value?ref=pictures%401&amp;row={DAMAGED_ROW}&" not in card  # no link to its bytes
    for suffix in ("", "&thumbnail=1"):
        answer = get(server, f"/stores/store-1/value?ref=pictures@1&row={DAMAGED_ROW}&column=0{suffix}")
        assert answer.status == 502
        assert b"XXXX" not in answer.body  # type: ignore[attr-defined]
    assert page.count('class="card"') == 12 - 2  # the rows after them are shown as usual


def test_a_missing_object_shows_as_missing(server: UiServer) -> None:
    page = get(server, "/stores/store-1/samples?ref=pictures@1").body.decode()  # type: ignore[attr-defined]
    card = page.split(f'id="row-{MISSING_ROW}"')[1].split("</figure>")[0]
    assert '<div class="problem">missing</div>' in card and "is missing from the store" in card
    assert get(server, f"/stores/store-1/value?ref=pictures@1&row={MISSING_ROW}&column=0").status == 404


def test_names_labels_and_text_are_escaped(server: UiServer) -> None:
    for path in ("/stores/store-1/samples?ref=markup@1", "/stores/store-1/samples?ref=pictures@1",
                 "/stores/store-1/labels?ref=pictures@1", "/stores/store-1/labels?ref=markup@1"):  # fmt: skip
        page = get(server, path).body.decode()  # type: ignore[attr-defined]
        assert "<script" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    text = get(server, "/stores/store-1/samples?ref=markup@1").body.decode()  # type: ignore[attr-defined]
    assert "&lt;img src=x onerror=alert(2)&gt;" in text and "&#34;quoted&#34; &amp; &#39;single&#39;" in text
    refused = get(server, "/stores/store-1/dataset?name=%3Cscript%3Ealert(1)%3C/script%3E")
    assert refused.status == 400
    assert b"<script>" not in refused.body and b"&lt;script&gt;" in refused.body  # type: ignore[attr-defined]


def test_a_table_version_shows_its_values_and_has_no_histogram(server: UiServer) -> None:
    page = get(server, "/stores/store-1/samples?ref=numbers@1").body.decode()  # type: ignore[attr-defined]
    assert page.count('<tr id="row-') == 30 and ">n29<" in page
    labels = get(server, "/stores/store-1/labels?ref=numbers@1").body.decode()  # type: ignore[attr-defined]
    assert "A table version has no label column" in labels


def test_a_histogram_counts_every_row_from_the_list_or_the_shards(server: UiServer) -> None:
    for ref in ("pictures@1", "packed-pictures@1"):
        page = get(server, f"/stores/store-1/labels?ref={ref}").body.decode()  # type: ignore[attr-defined]
        rows = page.split('id="histogram"')[1]
        assert '<td class="label">cat</td><td class="n">4</td>' in rows
        assert '<td class="label">dog</td><td class="n">4</td>' in rows
        assert "12 rows, 3 distinct values of label" in page


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/stores/store-2", 404),
        ("/stores/store-1/samples?ref=pictures", 400),
        ("/stores/store-1/samples?ref=pictures@9", 404),
        ("/stores/store-1/samples?ref=nothing@1", 404),
        ("/stores/store-1/samples?ref=pictures@1&page=1", 404),
        ("/stores/store-1/samples?ref=pictures@1&row=12", 404),
        ("/stores/store-1/samples?ref=pictures@1&row=-1", 400),
        ("/stores/store-1/samples?ref=pictures@1&size=0", 400),
        ("/stores/store-1/value?ref=pictures@1&row=0&column=5", 404),
        ("/stores/store-1/value?ref=pictures@1&row=99&column=0", 404),
        ("/stores/store-1/labels?ref=pictures@1&column=0", 400),
    ],
    ids=lambda value: str(value),
)
def test_a_wrong_request_is_told_why(server: UiServer, path: str, status: int) -> None:
    answer = get(server, path)
    assert answer.status == status
    assert b'id="message"' in answer.body  # type: ignore[attr-defined]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_only_get_is_answered(server: UiServer, method: str) -> None:
    for path in ("/", "/stores/store-1/samples?ref=pictures@1", "/static/ui.css"):
        answer = get(server, path, method=method)
        assert answer.status == 405 and answer.headers["Allow"] == "GET, HEAD"


def test_a_request_naming_another_host_is_refused(server: UiServer) -> None:
    assert get(server, "/", host="attacker.example").status == 400
    assert get(server, "/", host="localhost").status == 200


@pytest.mark.parametrize(
    ("method", "path", "host", "status"),
    [
        ("GET", "/", None, 200),
        ("HEAD", "/", None, 200),
        ("GET", "/stores/store-1/value?ref=pictures@1&row=0&column=0", None, 200),
        ("GET", "/static/ui.css", None, 200),
        ("POST", "/", None, 405),
        ("DELETE", "/stores/store-1/samples?ref=pictures@1", None, 405),
        ("PUT", "/static/ui.css", None, 405),
        ("GET", "/stores/nothing", None, 404),
        ("GET", "/no/such/page", None, 404),
        ("GET", "/static/none.css", None, 404),
        ("GET", "/stores/store-1/samples?ref=pictures", None, 400),
        ("GET", "/", "attacker.example", 400),
        ("GET", f"/stores/store-1/value?ref=pictures@1&row={NOT_AN_IMAGE_ROW}&column=0&thumbnail=1", None, 415),
        ("GET", f"/stores/store-1/value?ref=pictures@1&row={DAMAGED_ROW}&column=0", None, 502),
    ],
    ids=lambda value: str(value),
)
def test_every_answer_keeps_the_page_to_itself(
    server: UiServer, method: str, path: str, host: str | None, status: int
) -> None:
    answer = get(server, path, method=method, host=host)
    assert answer.status == status
    assert {name: answer.headers[name] for name in KEPT_TO_ITSELF if name in answer.headers} == KEPT_TO_ITSELF


def test_nothing_in_the_store_is_written(server: UiServer, built) -> None:  # type: ignore[no-untyped-def]
    folder, before = built
    paths = [
        "/stores/store-1",
        "/stores/store-1/dataset?name=pictures",
        "/stores/store-1/labels?ref=pictures@1",
        "/stores/store-1/samples?ref=pictures@1&size=3&page=2",
        "/stores/store-1/diff?a=pictures@1&b=pictures@1",
        "/stores/store-1/value?ref=packed-pictures@1&row=4&column=0&thumbnail=1",
    ]
    for path in paths:
        get(server, path)
    assert tree(folder / "store") == before


def test_a_statistics_file_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "datamount.cli.main", "ui", "--stats", str(tmp_path / "none.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "none.jsonl" in done.stderr and "does not exist" in done.stderr


def test_a_missing_package_of_the_extra_is_named_with_the_extra() -> None:
    code = "import sys; sys.modules['starlette'] = None; from datamount.cli.main import main; main(['ui'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "datamount: error: datamount ui needs starlette: pip install 'datamount[ui]'"


def peak_rss(pid: int) -> int:
    """The most memory process ``pid`` has held resident so far, in bytes (``VmHWM``)."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert found is not None, status
    return int(found.group(1)) * 1024


@pytest.fixture(scope="module")
def huge_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UiServer, bytes]]:
    """A server over a version of two rows, each a PNG of one colour of :data:`HUGE` pixels, and the PNG's bytes."""
    folder = tmp_path_factory.mktemp("huge")
    (folder / "src").mkdir()
    Image.new("RGB", HUGE, (200, 60, 20)).save(folder / "src" / "a.png")
    png = (folder / "src" / "a.png").read_bytes()
    (folder / "src" / "b.png").write_bytes(png)
    (folder / "src" / "huge.list").write_text("./a.png\tone\n./b.png\ttwo\n", encoding="utf-8")
    upload(folder / "src" / "huge.list", "huge", store=open_store(folder / "store"), kind="image")
    running = UiServer([str(folder / "store")], folder / "ui.log")
    yield running, png
    running.stop()


def test_an_image_of_too_many_pixels_is_a_placeholder_never_decoded(huge_images: tuple[UiServer, bytes]) -> None:
    server, png = huge_images
    assert len(png) < 500_000
    assert get(server, "/stores/store-1/dataset?name=huge").status == 200
    before = peak_rss(server.process.pid)
    page = get(server, "/stores/store-1/samples?ref=huge@1")
    thumbnails = [get(server, f"/stores/store-1/value?ref=huge@1&row={row}&column=0&thumbnail=1") for row in (0, 1)]
    grown = peak_rss(server.process.pid) - before
    assert grown < 100 << 20, f"the server grew by {grown / 1e6:,.0f} MB: it decoded an image of {HUGE} pixels"
    assert page.status == 200
    html = page.body.decode()  # type: ignore[attr-defined]
    assert html.count("12,000 × 12,000 pixels") == 2 and "<img" not in html
    for answer in thumbnails:
        assert answer.status == 415
        assert "an image of 12,000 × 12,000 pixels, more than a thumbnail is made from" in answer.body.decode()  # type: ignore[attr-defined]
    stored = get(server, "/stores/store-1/value?ref=huge@1&row=1&column=0")  # one click away, as it is
    assert (stored.status, stored.headers["Content-Type"], stored.body) == (200, "image/png", png)  # type: ignore[attr-defined]


def stats_line(time: float, interval_s: float, rank: int, samples: int, **changes: object) -> str:
    record = {
        "format": 1, "time": time, "rank": rank, "world_size": 2, "worker": None, "dataset": "pictures@1",
        "pass": 0, "interval_s": interval_s, "samples": samples, "bytes": 1000 * samples, "waited_s": 0.1,
        "compute_s": interval_s - 0.1, "requests": 1, "retries": 0, "throttled_s": 0.0, "cache_hits": 0,
        "bytes_verified": 0, "final": False,
    }  # fmt: skip
    record.update(changes)
    return json.dumps(record)


def test_the_training_page_names_what_it_leaves_out_and_draws_each_rank_over_its_own_time(
    built: tuple[Path, dict[str, tuple[int, int]]], tmp_path: Path
) -> None:
    """Rank 0 writes a line every 0.5 s for 60 s, rank 1 one every 0.51 s for its first 30 s; three lines hold NaN,
    Infinity and 10**400."""
    start = 1_750_000_000.0
    lines = [stats_line(start + 0.5 * n, 0.5, 0, 100) for n in range(1, 121)]
    lines += [stats_line(start + 0.51 * n, 0.51, 1, 100) for n in range(1, 59)]
    lines[10] = stats_line(start + 5.5, 0.5, 0, 100, waited_s=math.nan)
    lines[20] = stats_line(math.inf, 0.5, 0, 100)
    lines[30] = stats_line(start + 15.5, 0.5, 0, 10**400)
    stats = tmp_path / "stats.jsonl"
    stats.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    running = UiServer([str(built[0] / "store")], tmp_path / "ui.log", stats_file=stats)
    try:
        answer = get(running, "/training")
    finally:
        running.stop()
    assert answer.status == 200
    page = answer.body.decode()  # type: ignore[attr-defined]
    assert "3 lines left out" in page
    assert "<li>line 11: &#39;waited_s&#39; is nan: not a finite number within ±2**63</li>" in page
    assert (
        "<li>line 21: &#39;time&#39; is inf:" in page
        and "<li>line 31: &#39;samples&#39; is a number of 401 digits:" in page
    )
    rows = page.split('id="ranks"')[1].split("<tbody>")[1].split("</tr>")[:-1]
    rates = [re.findall(r"<td[^>]*>([^<]*)</td>", row)[4] for row in rows]  # the samples/s column
    assert rates == ["200", "196"]  # rank 1: 5,800 samples over its 29.6 s, not over the file's 60 s
    chart = page.split('aria-label="samples per second"')[1].split("</svg>")[0]
    baseline = re.search(r'y1="([\d.]+)" y2="\1" stroke="#555"', chart)
    assert baseline is not None
    heights = [float(point.split(",")[1]) for line in re.findall(r'points="([^"]+)"', chart) for point in line.split()]
    assert len(heights) == 120 + 60 and max(heights) < float(baseline.group(1)) - 50  # no step drops towards 0


@pytest.fixture(scope="module")
def translations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    """A server over a text version whose targets are all different: more labels than classes ever are."""
    folder = tmp_path_factory.mktemp("translations")
    rows = "".join(f"source {i}\ttarget {i}\n" for i in range(MOST_CLASSES + 1))
    (folder / "pairs.list").write_text(rows, encoding="utf-8")
    upload(folder / "pairs.list", "pairs", store=open_store(folder / "store"), kind="text")
    running = UiServer([str(folder / "store")], folder / "ui.log")
    yield running
    running.stop()


def test_labels_that_are_not_classes_are_counted_not_tabled(translations: UiServer, server: UiServer) -> None:
    page = get(translations, "/stores/store-1/diff?a=pairs@1&b=pairs@1")
    html = page.body.decode()  # type: ignore[attr-defined]
    assert page.status == 200 and 'id="label-counts"' not in html and "target 17" not in html
    assert "labels: 1,001 distinct in pairs@1, 1,001 in pairs@1 (not classes: no table)" in html
    classes = get(server, "/stores/store-1/diff?a=pictures@1&b=pictures@1").body.decode()  # type: ignore[attr-defined]
    assert 'id="label-counts"' in classes and 'id="distinct-labels"' not in classes
