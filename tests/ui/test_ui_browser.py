"""``datamount ui`` in a real headless Chromium: a walk from the stores to the training page over the demo's datasets,
asserting what each page shows and saving a screenshot of each under the test's output; then the escape and path
cases."""

from __future__ import annotations

import importlib.util
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from datamount.ui.values import THUMBNAIL_PIXELS
from tests.ui.showcase import (
    EXPECTED_DIFF,
    IMAGES,
    LARGE_IMAGE,
    MARKUP_LABEL,
    ODD_IMAGES,
    STATS_RANKS,
    TEXT,
    Showcase,
    UiServer,
    build,
    chrome,
)

pytestmark = pytest.mark.slow
HAS_DIFF = importlib.util.find_spec("datamount.datasets.diff") is not None
#: The sides of the square cells a card and a table row draw images in (ui.css: .frame-144, .frame-96).
CARD_CELL, ROW_CELL = 144, 96


@pytest.fixture(scope="module")
def showcase(tmp_path_factory: pytest.TempPathFactory) -> Showcase:
    return build(tmp_path_factory.mktemp("showcase"))


@pytest.fixture(scope="module")
def server(showcase: Showcase) -> Iterator[UiServer]:
    running = UiServer([str(showcase.folder / "store")], showcase.folder / "ui.log", stats_file=showcase.stats_file)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    driver = chrome()
    yield driver
    driver.quit()


def arrive(driver, css: str) -> None:  # type: ignore[no-untyped-def]
    """Wait until the page the browser was sent to shows ``css``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def decoded_width(driver, image) -> int:  # type: ignore[no-untyped-def]
    """The natural width of ``image`` once the browser has decoded it (0 when it could not); it is scrolled into
    view first, for an image further down the page is loaded only then."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return arguments[0].complete", image))
    return int(driver.execute_script("return arguments[0].naturalWidth", image))


def assert_drawn_in_cells(driver, images, side: int) -> None:  # type: ignore[no-untyped-def]
    """Each of ``images`` says its size (``width``, ``height``), loads lazily, and is drawn inside its cell (a square
    of ``side``), filling it one way with the aspect of its pixels."""
    assert images
    for image in images:
        assert image.get_dom_attribute("loading") == "lazy"
        width, height = int(image.get_dom_attribute("width")), int(image.get_dom_attribute("height"))
        natural = decoded_width(driver, image), int(driver.execute_script("return arguments[0].naturalHeight", image))
        drawn, cell = image.rect, image.find_element("xpath", "..").rect
        assert (round(drawn["width"]), round(drawn["height"])) == (width, height)
        assert max(width, height) == side and abs(width / height - natural[0] / natural[1]) <= 1.5 / min(width, height)
        assert (cell["width"], cell["height"]) == (side, side)
        assert cell["x"] <= drawn["x"] and drawn["x"] + drawn["width"] <= cell["x"] + cell["width"]
        assert cell["y"] <= drawn["y"] and drawn["y"] + drawn["height"] <= cell["y"] + cell["height"]


def assert_fits_the_page(driver, width: int) -> None:  # type: ignore[no-untyped-def]
    """In a window ``width`` pixels wide, nothing on the page is wider than the window: no table pushes it
    sideways."""
    from selenium.webdriver.common.by import By

    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        page = int(driver.execute_script("return document.documentElement.clientWidth"))
        assert page == width
        assert int(driver.execute_script("return document.documentElement.scrollWidth")) <= page
        for table in driver.find_elements(By.TAG_NAME, "table"):
            assert table.rect["x"] + table.rect["width"] <= page, table.get_attribute("id")
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_walk_from_the_stores_to_the_training_page(server: UiServer, browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser
    shots = tmp_path / "screenshots"
    shots.mkdir()

    def shot(name: str) -> None:
        driver.save_screenshot(str(shots / f"{name}.png"))

    driver.get(server.url + "/")
    stores = driver.find_elements(By.CSS_SELECTOR, "#stores tbody tr")
    assert len(stores) == 1
    shot("1-stores")
    stores[0].find_element(By.TAG_NAME, "a").click()
    arrive(driver, "#own")

    own = driver.find_elements(By.CSS_SELECTOR, "#own tbody tr")
    assert sorted(row.find_element(By.TAG_NAME, "a").text for row in own) == [IMAGES, TEXT]
    by_name = {row.find_element(By.TAG_NAME, "a").text: row.text for row in own}
    assert " 202 " in by_name[IMAGES] and " 16 " in by_name[TEXT]  # the latest versions' rows
    shot("2-datasets")
    driver.find_element(By.LINK_TEXT, IMAGES).click()
    arrive(driver, "#versions")

    versions = driver.find_elements(By.CSS_SELECTOR, "#versions tbody tr")
    assert [row.find_element(By.TAG_NAME, "a").text for row in versions] == ["@2", "@1"]
    assert "200" in versions[1].text and "not verified here" in versions[1].text
    shot("3-versions")
    versions[1].find_element(By.LINK_TEXT, "samples").click()
    arrive(driver, "#samples")

    cards = driver.find_elements(By.CSS_SELECTOR, "#samples figure.card")
    assert len(cards) == 100
    first = cards[0]
    assert first.find_element(By.CLASS_NAME, "index").text == "#0"
    assert first.find_element(By.CLASS_NAME, "label").text == "0"
    assert decoded_width(driver, first.find_element(By.TAG_NAME, "img")) == 64
    assert "rows 0–99 of 200" in driver.find_element(By.CLASS_NAME, "pager").text
    assert_drawn_in_cells(driver, driver.find_elements(By.CSS_SELECTOR, "#samples img")[:12], CARD_CELL)
    shot("4-samples")

    jump = driver.find_element(By.CSS_SELECTOR, "#jump input[name=row]")
    jump.send_keys("150")
    jump.submit()
    arrive(driver, "#row-150")
    target = driver.find_element(By.ID, "row-150")
    assert "target" in target.get_attribute("class")
    assert target.find_element(By.CLASS_NAME, "label").text == str(150 % 4)
    assert "rows 100–199 of 200" in driver.find_element(By.CLASS_NAME, "pager").text

    driver.get(f"{server.url}/stores/store-1/samples?ref={IMAGES}@2&page=1")
    markup = driver.find_element(By.ID, "row-197")
    assert markup.find_element(By.CLASS_NAME, "label").text == MARKUP_LABEL
    assert driver.find_elements(By.TAG_NAME, "script") == []
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018
    large = driver.find_element(By.CSS_SELECTOR, "#row-198 img")
    assert 0 < decoded_width(driver, large) <= THUMBNAIL_PIXELS
    assert_drawn_in_cells(driver, [large], CARD_CELL)
    shot("5-samples-v2")
    large.click()  # the stored bytes, as the image they are
    arrive(driver, "body > img")
    assert decoded_width(driver, driver.find_element(By.TAG_NAME, "img")) == LARGE_IMAGE[0]
    driver.back()
    arrive(driver, "#labels-link")

    driver.get(f"{server.url}/stores/store-1/samples?ref={IMAGES}@2&row={min(ODD_IMAGES)}&size=12")
    arrive(driver, "#samples")
    speck, strip, too_many = (driver.find_element(By.ID, f"row-{row}") for row in sorted(ODD_IMAGES))
    assert_drawn_in_cells(driver, [speck.find_element(By.TAG_NAME, "img")], CARD_CELL)  # 16x16, drawn 144x144
    assert_drawn_in_cells(driver, [strip.find_element(By.TAG_NAME, "img")], CARD_CELL)  # 1024x64, drawn 144x9
    assert too_many.find_elements(By.TAG_NAME, "img") == []
    assert "5,000 × 4,000 pixels" in too_many.find_element(By.CLASS_NAME, "placeholder").text
    assert_fits_the_page(driver, 800)
    shot("5-samples-odd-sizes")
    driver.back()
    arrive(driver, "#labels-link")

    driver.find_element(By.ID, "labels-link").click()
    arrive(driver, "#histogram")
    histogram = {
        row.find_elements(By.TAG_NAME, "td")[0].text: row.find_elements(By.TAG_NAME, "td")[1].text
        for row in driver.find_elements(By.CSS_SELECTOR, "#histogram tbody tr")
    }
    assert histogram[MARKUP_LABEL] == "1"
    assert sum(int(count) for count in histogram.values()) == 202
    assert driver.find_elements(By.CSS_SELECTOR, "svg.chart rect")
    shot("6-labels")

    driver.get(f"{server.url}/stores/store-1/dataset?name={IMAGES}")
    form = driver.find_element(By.CSS_SELECTOR, "form[action$='/diff']")
    assert Select(form.find_element(By.NAME, "a")).first_selected_option.text == "@1"
    assert Select(form.find_element(By.NAME, "b")).first_selected_option.text == "@2"
    form.submit()
    arrive(driver, "#counts, #message")
    if HAS_DIFF:
        for category, count in EXPECTED_DIFF.items():
            assert driver.find_element(By.ID, category).text == str(count)
        changed = driver.find_elements(By.CSS_SELECTOR, "#changed-rows tbody tr")
        assert changed and all(decoded_width(driver, img) == 64 for img in changed[0].find_elements(By.TAG_NAME, "img"))
        assert MARKUP_LABEL in driver.find_element(By.ID, "added-rows").text
        assert_drawn_in_cells(driver, driver.find_elements(By.CSS_SELECTOR, ".changes img"), ROW_CELL)
        assert "5,000 × 4,000 pixels" in driver.find_element(By.ID, "added-rows").text
        assert_fits_the_page(driver, 800)
        driver.execute_script("window.scrollTo(0, 0)")
        shot("7-diff")

    driver.find_element(By.LINK_TEXT, "training").click()
    arrive(driver, "#ranks")
    ranks = driver.find_elements(By.CSS_SELECTOR, "#ranks tbody tr")
    assert [row.find_element(By.TAG_NAME, "td").text for row in ranks] == [str(rank) for rank in range(STATS_RANKS)]
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == 3
    assert len(driver.find_elements(By.CSS_SELECTOR, "svg.chart polyline")) >= 2 * STATS_RANKS
    shot("8-training")
    assert sorted(path.name for path in shots.iterdir())[-1] == "8-training.png"
    if not HAS_DIFF:
        pytest.skip("datamount.datasets.diff is not in this tree: the diff page's assertions did not run")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/stores/store-1/samples?ref=..%2F..%2Fsecret@1", 400),
        ("/stores/store-1/samples?ref=%2Fetc%2Fpasswd@1", 400),
        ("/stores/store-1/dataset?name=..", 400),
        ("/stores/store-1/dataset?name=public%2F..%2F..%2Fsecret", 400),
        ("/stores/store-1/value?ref=demo-images@1%2F..%2F..&row=0", 400),
        ("/stores/..%2F..%2Fsecret", 404),
        ("/stores/%2Fetc", 404),
        ("/stores/store-1%2F..%2F..%2Fsecret/dataset?name=x", 404),
        ("/static/..%2F..%2Fsecret.txt", 404),
        ("/static/%2e%2e/%2e%2e/secret.txt", 404),
    ],
    ids=lambda value: str(value),
)
def test_a_path_in_a_url_never_reaches_the_store(server: UiServer, showcase: Showcase, path: str, status: int) -> None:
    (showcase.folder / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
    request = urllib.request.Request(server.url + path)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == status
    assert b"TOP SECRET" not in refused.value.read()


def test_a_path_typed_in_the_browser_shows_an_error_page(server: UiServer, browser) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    browser.get(server.url + "/stores/store-1/samples?ref=..%2F..%2Fsecret@1")
    assert browser.title.startswith("400")
    assert "invalid dataset name" in browser.find_element(By.ID, "message").text
