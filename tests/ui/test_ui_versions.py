"""``datamount ui`` keeps a version by its manifest's sha256: a name reused after ``rm`` is never answered with the
removed version's bytes, and what a browser may keep depends on whether the URL names the version's identity."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from datamount.datasets import catalog, upload
from datamount.storage import Store, open_store
from tests.generated import MakeImageList, image_rows
from tests.ui.showcase import UiServer


def get(server: UiServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
    where = urlsplit(server.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    connection.request("GET", path, headers=headers or {})
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer.status, answer.headers, body


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store")


@pytest.fixture
def server(store: Store, tmp_path: Path) -> Iterator[UiServer]:
    running = UiServer([store.url], tmp_path / "ui.log")
    yield running
    running.stop()


def value_link(server: UiServer, ref: str) -> str:
    """The link of row 0's value on the samples page of ``ref``."""
    status, _, page = get(server, f"/stores/store-1/samples?ref={ref}")
    assert status == 200, page
    found = re.search(rb'href="(/stores/store-1/value\?ref=[^"&]*&amp;row=0&amp;column=0&amp;m=[0-9a-f]{64})"', page)
    assert found is not None, page
    return found.group(1).decode().replace("&amp;", "&")


def test_a_removed_version_s_bytes_are_never_served_under_its_name(
    store: Store, server: UiServer, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(3)
    first = upload(list_file, "cats", store=store).manifest
    old_bytes = image_rows(list_file)[0][0]
    link = value_link(server, "cats@1")
    assert get(server, link)[2] == old_bytes  # kept by the server from now on
    assert get(server, "/stores/store-1/value?ref=cats@1&row=0&column=0")[2] == old_bytes
    catalog.remove(store, "cats")
    (list_file.parent / "data" / "img0000.jpg").write_bytes(b"\xff\xd8\xff the next version")
    second = upload(list_file, "cats", store=store).manifest
    assert second.version == 2 and second.manifest_sha256 != first.manifest_sha256
    status, _, body = get(server, "/stores/store-1/value?ref=cats@1&row=0&column=0")
    assert status == 404 and b"cats@1" in body and b"was removed" in body
    status, _, body = get(server, "/stores/store-1/samples?ref=cats@1")
    assert status == 404 and b"was removed" in body
    assert get(server, "/stores/store-1/value?ref=cats@2&row=0&column=0")[2] == b"\xff\xd8\xff the next version"
    status, _, body = get(server, link)  # the link made for cats@1: what was kept of it, or gone; never cats@2
    assert (status, body) == (200, old_bytes)


def test_a_link_whose_version_the_server_never_kept_is_answered_only_while_its_name_names_it(
    store: Store, tmp_path: Path, make_image_list: MakeImageList
) -> None:
    list_file = make_image_list(3)
    upload(list_file, "cats", store=store)
    first = UiServer([store.url], tmp_path / "first.log")
    try:
        link = value_link(first, "cats@1")
    finally:
        first.stop()
    catalog.remove(store, "cats@1")
    upload(list_file, "cats", store=store)
    later = UiServer([store.url], tmp_path / "later.log")  # knows nothing of cats@1
    try:
        status, _, body = get(later, link)
        assert status == 404 and b"cats@1" in body and b"was removed" in body
        wrong = re.sub(r"m=[0-9a-f]{64}", "m=" + "0" * 64, value_link(later, "cats@2"))
        status, _, body = get(later, wrong)
        assert status == 404 and b"not the version this link was made for" in body
        assert get(later, link.replace("m=", "m=X"))[0] == 400
    finally:
        later.stop()


def test_a_value_by_name_is_checked_again_and_one_by_identity_is_kept(
    store: Store, server: UiServer, make_image_list: MakeImageList
) -> None:
    upload(make_image_list(3), "cats", store=store)
    by_name = "/stores/store-1/value?ref=cats@1&row=0&column=0"
    status, headers, _ = get(server, by_name)
    assert status == 200 and headers["Cache-Control"] == "private, no-cache" and headers["ETag"]
    link = value_link(server, "cats@1")
    status, kept_headers, _ = get(server, link)
    assert status == 200 and kept_headers["Cache-Control"] == "private, max-age=86400, immutable"
    assert kept_headers["ETag"] == headers["ETag"]  # the same value of the same version
    status, again, body = get(server, by_name, {"If-None-Match": headers["ETag"]})
    assert (status, body) == (304, b"") and again["ETag"] == headers["ETag"]
    thumbnail = get(server, link + "&thumbnail=1")[1]
    assert thumbnail["ETag"] != headers["ETag"]
