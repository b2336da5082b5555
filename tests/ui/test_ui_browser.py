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
    STATS_RANKS,
    TEXT,
    Showcase,
    UiServer,
    build,
    chrome,
)

pytestmark = pytest.mark.slow
HAS_DIFF = importlib.util.find_spec("datamount.datasets.diff") is not None


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
    """The natural width of ``image`` once the browser has decoded it (0 when it could not)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return arguments[0].complete", image))
    return int(driver.execute_script("return arguments[0].naturalWidth", image))


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
    assert " 199 " in by_name[IMAGES] and " 16 " in by_name[TEXT]  # the latest versions' rows
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
    shot("5-samples-v2")
    large.click()  # the stored bytes, as the image they are
    arrive(driver, "body > img")
    assert decoded_width(driver, driver.find_element(By.TAG_NAME, "img")) == LARGE_IMAGE[0]
    driver.back()
    arrive(driver, "#labels-link")

    driver.find_element(By.ID, "labels-link").click()
    arrive(driver, "#histogram")
    histogram = {
        row.find_elements(By.TAG_NAME, "td")[0].text: row.find_elements(By.TAG_NAME, "td")[1].text
        for row in driver.find_elements(By.CSS_SELECTOR, "#histogram tbody tr")
    }
    assert histogram[MARKUP_LABEL] == "1"
    assert sum(int(count) for count in histogram.values()) == 199
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
