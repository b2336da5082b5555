"""Random sequences of uploads and removals under one name, with a ``datamount ui`` server, a long-lived
``datamount://`` filesystem and a pickled one open across them: every read returns the bytes of the version it was
pinned to, or a clear error, never another version's bytes; and no number is ever given to two versions."""

from __future__ import annotations

import http.client
import itertools
import pickle
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.datasets import catalog, upload
from datamount.datasets.errors import DatasetNotFoundError
from datamount.storage import IntegrityError, Store
from datamount.urlfs import DatamountFileSystem
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET
from tests.stores import STORE_BACKENDS
from tests.ui.showcase import UiServer

FILE = "data/img0000.jpg"
_NAMES = itertools.count()
#: upload (packed or not), remove every version, remove the version at a position among those there, look at the
#: latest version through every front end (a pin each keeps).
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("upload"), st.booleans()),
        st.tuples(st.just("rm"), st.none()),
        st.tuples(st.just("rm@"), st.integers(0, 3)),
        st.tuples(st.just("pin"), st.none()),
    ),
    min_size=3,
    max_size=9,
)


@dataclass
class Pins:
    """What the front ends opened, and the bytes each must keep giving (or fail on)."""

    instance: DatamountFileSystem
    #: For each pin: the path it read, its version's bytes, a pickle of the filesystem that read it, and the UI link
    #: (none when the page said the version was removed).
    held: list[tuple[str, bytes, bytes, str | None]] = field(default_factory=list)


@pytest.fixture(params=[STORE_BACKENDS[0], STORE_BACKENDS[2]])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, UiServer, dict[str, object]]]:
    """A store on a local folder or moto, a ``datamount ui`` serving it, and the options of a filesystem on it."""
    store: Store = request.getfixturevalue(f"{request.param}_store")
    options: dict[str, str] = {}
    if store.local_path() is None:
        options = {"endpoint_url": request.getfixturevalue("s3_server").endpoint_url}
    server = UiServer([store.url], tmp_path / "ui.log", options=options)
    fs_options = {**options, "key": S3_TEST_KEY, "secret": S3_TEST_SECRET} if options else {}
    yield store, server, {"store": store.url, "options": fs_options, "cache": False}
    server.stop()


def _get(server: UiServer, path: str) -> tuple[int, bytes]:
    where = urlsplit(server.url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    connection.request("GET", path)
    answer = connection.getresponse()
    body = answer.read()
    connection.close()
    return answer.status, body


def _read(filesystem: DatamountFileSystem, path: str) -> bytes | None:
    """``path``'s bytes, or None for the clear errors a removed version may give."""
    try:
        return filesystem.cat_file(path)
    except (FileNotFoundError, IntegrityError):
        return None


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_every_read_gives_the_pinned_version_s_bytes_or_a_clear_error(
    served: tuple[Store, UiServer, dict[str, object]], tmp_path: Path, operations: list[tuple[str, object]]
) -> None:
    store, server, options = served
    name = f"d{next(_NAMES)}"
    source = tmp_path / name
    made: dict[int, bytes] = {}  # every version ever made: its number and the bytes of FILE in it
    live: list[int] = []
    pins = Pins(DatamountFileSystem(**options, skip_instance_cache=True))  # type: ignore[arg-type]
    for step, (operation, argument) in enumerate(operations):
        if operation == "upload":
            content = b"\xff\xd8\xff" + f"{name} step {step}".encode() * 40
            version = _upload(source, name, store, content, packed=bool(argument))
            assert version not in made, f"{name}@{version} was given twice"
            made[version] = content
            live.append(version)
        elif operation == "rm" and live:
            assert catalog.remove(store, name) == live
            live.clear()
        elif operation == "rm@" and live:
            doomed = live.pop(int(argument) % len(live))  # type: ignore[call-overload]
            assert catalog.remove(store, f"{name}@{doomed}") == [doomed]
        elif operation == "pin" and live:
            _pin(pins, server, name, made)
        _check(pins, server, store, name, made, live, options)


def _upload(source: Path, name: str, store: Store, content: bytes, *, packed: bool) -> int:
    (source / "data").mkdir(parents=True, exist_ok=True)
    (source / FILE).write_bytes(content)
    (source / "data" / "img0001.jpg").write_bytes(b"\xff\xd8\xff the same in every version")
    (source / "train.list").write_text(f"./{FILE}\t0\n./data/img0001.jpg\t1\n", encoding="utf-8")
    return upload(source / "train.list", name, store=store, packed=packed).manifest.version


def _pin(pins: Pins, server: UiServer, name: str, made: dict[int, bytes]) -> None:
    """Open ``latest`` through each front end (the long-lived filesystem keeps the version it resolved first: one
    removed since is a clear error, checked by :func:`_check`), and keep what each must give from now on."""
    path = f"_/{name}@latest/{FILE}"
    content = _read(pins.instance, path)
    if content is None:
        return
    version = next(number for number, kept in made.items() if kept == content)
    status, page = _get(server, f"/stores/store-1/samples?ref={name}@{version}")
    link = re.search(rb'href="(/stores/store-1/value\?ref=[^"&]*&amp;row=0&amp;column=0&amp;m=[0-9a-f]{64})"', page)
    assert status == 404 or link is not None, page
    shown = link.group(1).decode().replace("&amp;", "&") if link is not None else None
    pins.held.append((path, content, pickle.dumps(pins.instance), shown))


def _check(
    pins: Pins,
    server: UiServer,
    store: Store,
    name: str,
    made: dict[int, bytes],
    live: list[int],
    options: dict[str, object],
) -> None:
    for path, content, sent, link in pins.held:
        assert _read(pins.instance, path) in (content, None)
        assert _read(pickle.loads(sent), path) in (content, None)
        if link is not None:
            status, body = _get(server, link)
            assert (status, body) == (200, content) or status == 404, (status, body[:80])
    fresh = DatamountFileSystem(**options, skip_instance_cache=True)  # type: ignore[arg-type]
    for version, content in made.items():
        expected = content if version in live else None
        assert _read(fresh, f"_/{name}@{version}/{FILE}") == expected
        status, body = _get(server, f"/stores/store-1/value?ref={name}@{version}&row=0&column=0")
        assert (status, body) == ((200, content) if version in live else (404, body)), (version, status, body[:80])
    if not live:
        with pytest.raises(DatasetNotFoundError):
            catalog.resolve(store, name)
