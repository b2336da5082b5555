"""The web app of ``datamount ui``: its pages, and the rules every request goes through.

Every request is a GET (or HEAD): anything else is answered 405 before it reaches a page, and no page writes. Every
answer carries :data:`SECURITY_HEADERS`, errors included (a 405, a refused host name, a failure no page foresaw). A
request names a store by its key and a dataset version by its reference, both checked before anything is read
(:mod:`datamount.ui.browse`); a name that is not a dataset name is a 400, a store or version that is not there a
404, a damaged object or manifest a 502 naming it. Pages are rendered on the server with every value escaped; they
run no script (the Content-Security-Policy forbids any), and stored bytes are served only as the raster image they
are, else as a download (:mod:`datamount.ui.values`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from datamount.datasets import DatasetNotFoundError, Kind, Manifest, ManifestError
from datamount.datasets.names import PUBLIC_NAMESPACE, DatasetRef, parse_ref
from datamount.storage import DatamountError, IntegrityError, ObjectNotFoundError
from datamount.ui import charts
from datamount.ui.browse import Browser
from datamount.ui.stats_file import read_stats
from datamount.ui.stores import StoreShelf
from datamount.ui.values import (
    CARD_CELL,
    MAX_DECODED_PIXELS,
    ROW_CELL,
    cell,
    describe_pixels,
    drawn_size,
    image_type,
)

log = logging.getLogger(__name__)

#: Rows per page: an image grid, and a table of other rows; at most.
IMAGE_PAGE_ROWS = 100
TABLE_PAGE_ROWS = 50
MAX_PAGE_ROWS = 500
#: Rows of each kind of change the diff page shows.
DIFF_SAMPLES = 12
#: What a page may load: its own stylesheet and images, nothing else, and no script at all.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src 'self'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
#: The headers of every answer: the page is kept to itself (no script, no frame, no referrer, no sniffed type).
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
#: Host names a server bound to a loopback address answers to (a page elsewhere cannot reach it through a name of
#: its own that resolves to 127.0.0.1: DNS rebinding).
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
_FILENAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: How long a browser may keep a value asked for by the identity of its version (``m=``, the manifest's sha256): what
#: such a URL names never changes. A value asked for by name alone is checked again each time (``no-cache``): the name
#: may stop naming that version. Either way its ETag is the identity of the value: version, row and column.
_KEEP = "private, max-age=86400, immutable"
_CHECK_AGAIN = "private, no-cache"
_IDENTITY = re.compile(r"[0-9a-f]{64}")


class ReadOnly:
    """Answers anything but GET and HEAD with 405, and gives every answer the headers that keep a page to itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADER_LINES]
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):
            answer = PlainTextResponse("datamount ui is read-only: GET only", 405, headers={"Allow": "GET, HEAD"})
            await answer(scope, receive, with_headers)
            return
        await self.app(scope, receive, with_headers)


_SECURITY_HEADER_LINES = [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]


def href(path: str, **params: Any) -> str:
    """``path`` with ``params`` (those not None) as its query string."""
    query = urlencode({key: value for key, value in params.items() if value is not None})
    return f"{path}?{query}" if query else path


def crumbs(key: str | None = None, name: str | None = None, version: int | None = None, *more: str) -> list[Any]:
    """The links above a page: the stores, the store ``key``, dataset ``name``, its ``version``, then ``more``."""
    found: list[tuple[str, str | None]] = [("stores", "/")]
    if key is not None:
        found.append((key, f"/stores/{key}"))
    if key is not None and name is not None:
        found.append((name, href(f"/stores/{key}/dataset", name=name)))
    if key is not None and name is not None and version is not None:
        found.append((f"@{version}", href(f"/stores/{key}/samples", ref=f"{name}@{version}")))
    found.extend((text, None) for text in more)
    return found


def format_size(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size} B"


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("datamount.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.globals.update(
        href=href,
        size=format_size,
        PUBLIC=PUBLIC_NAMESPACE + "/",
        drawn_size=drawn_size,
        describe_pixels=describe_pixels,
        CARD_CELL=CARD_CELL,
        ROW_CELL=ROW_CELL,
    )
    for name in environment.list_templates():  # compiled now rather than on the first page that needs each
        environment.get_template(name)
    return environment


def create_app(
    stores: StoreShelf,
    *,
    stats_file: str | Path | None = None,
    allowed_hosts: Sequence[str] | None = LOOPBACK_NAMES,
) -> Starlette:
    """The app serving the stores of ``stores`` (and the statistics file ``stats_file`` on its training page).

    ``allowed_hosts``: the host names requests may name (the loopback names by default; None: any, for a server
    bound to another address).
    """
    pages = _Pages(Browser(stores), _environment(), None if stats_file is None else str(stats_file))
    routes = [
        Route("/", pages.stores),
        Route("/stores/{store}", pages.datasets),
        Route("/stores/{store}/dataset", pages.versions),
        Route("/stores/{store}/samples", pages.samples),
        Route("/stores/{store}/value", pages.value),
        Route("/stores/{store}/labels", pages.labels),
        Route("/stores/{store}/diff", pages.diff),
        Route("/training", pages.training),
        Mount("/static", StaticFiles(packages=[("datamount.ui", "static")]), name="static"),
    ]
    middleware = [Middleware(ReadOnly)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    # A failure no page foresaw is answered by Starlette's outermost middleware, outside ReadOnly: its page carries the
    # security headers itself.
    handlers: dict[Any, Any] = {HTTPException: pages.http_error, Exception: pages.server_error}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


def _value_headers(identity: str, row: int, column: int, small: bool, by_identity: bool) -> dict[str, str]:
    """The caching headers of a value (its thumbnail: ``small``) of the version whose manifest's sha256 is
    ``identity``, asked for by that identity or (``by_identity`` false) by name alone."""
    tag = f'"{identity[:32]}-{row}-{column}{"-small" if small else ""}"'
    return {"Cache-Control": _KEEP if by_identity else _CHECK_AGAIN, "ETag": tag}


def _answered(page: Callable[[_Pages, Request], Response]) -> Callable[[_Pages, Request], Response]:
    """``page``, with what goes wrong while it is made answered as an error page with its status."""

    @functools.wraps(page)
    def answering(self: _Pages, request: Request) -> Response:
        try:
            return page(self, request)
        except HTTPException:
            raise
        except (IntegrityError, ManifestError) as exc:
            return self.error(request, 502, "damaged", str(exc))
        except (DatasetNotFoundError, ObjectNotFoundError, IndexError) as exc:
            return self.error(request, 404, "not found", str(exc))
        except ValueError as exc:
            return self.error(request, 400, "bad request", str(exc))
        except (DatamountError, OSError) as exc:
            return self.error(request, 502, "the store failed", str(exc))

    return answering


class _Pages:
    """The pages, over one :class:`Browser`."""

    def __init__(self, browser: Browser, environment: jinja2.Environment, stats_file: str | None) -> None:
        self.browser = browser
        self.environment = environment
        self.stats_file = stats_file

    def render(self, request: Request, template: str, code: int = 200, **context: Any) -> HTMLResponse:
        body = self.environment.get_template(template).render(stats_file=self.stats_file, **context)
        return HTMLResponse(body, code)

    def error(self, request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return self.render(request, "error.html", status, status=status, title=title, message=message, crumbs=crumbs())

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status, detail = getattr(exc, "status_code", 500), getattr(exc, "detail", "")
        return self.error(request, status, "not found" if status == 404 else "error", detail)

    def server_error(self, request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        why = f"{type(exc).__name__}: this page failed (the server's log says where)"
        answer = self.error(request, 500, "internal error", why)
        answer.headers.update(SECURITY_HEADERS)
        return answer

    # -- reading a request ---------------------------------------------------------------------------------------

    def store_key(self, request: Request) -> str:
        key = request.path_params["store"]
        try:
            self.browser.shelf.entry(key)
        except KeyError:
            raise HTTPException(404, f"this server shows no store named {key!r}") from None
        return key

    @staticmethod
    def ref(request: Request, name: str = "ref") -> DatasetRef:
        text = request.query_params.get(name)
        if not text:
            raise ValueError(f"name a version: ?{name}=NAME@N")
        ref = parse_ref(text)
        if ref.version is None:
            raise ValueError(f"name a version: {text}@N")
        return ref

    @staticmethod
    def identity(request: Request) -> str | None:
        """The identity of the version a link was made for (``m=``, its manifest's sha256), when it carries one."""
        text = request.query_params.get("m")
        if text is None:
            return None
        if not _IDENTITY.fullmatch(text):
            raise ValueError(f"?m= is a version's manifest sha256 (64 lowercase hex characters), not {text!r}")
        return text

    @staticmethod
    def number(
        request: Request, name: str, default: int | None = None, *, low: int = 0, high: int | None = None
    ) -> int:
        text = request.query_params.get(name)
        if text is None or text == "":
            if default is None:
                raise ValueError(f"?{name}= is needed")
            return default
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= (int(text) if high is None else high):
            allowed = f"at least {low}" if high is None else f"from {low} to {high}"
            raise ValueError(f"?{name}= must be a whole number {allowed}, not {text!r}")
        return int(text)

    # -- pages ---------------------------------------------------------------------------------------------------

    @_answered
    def stores(self, request: Request) -> Response:
        return self.render(request, "stores.html", entries=self.browser.shelf.entries(), crumbs=crumbs())

    @_answered
    def datasets(self, request: Request) -> Response:
        key = self.store_key(request)
        summaries = self.browser.datasets(key)
        own = [s for s in summaries if not s.name.startswith(PUBLIC_NAMESPACE + "/")]
        public = [s for s in summaries if s.name.startswith(PUBLIC_NAMESPACE + "/")]
        entry = self.browser.shelf.entry(key)
        return self.render(request, "datasets.html", key=key, entry=entry, own=own, public=public, crumbs=crumbs(key))

    @_answered
    def versions(self, request: Request) -> Response:
        key = self.store_key(request)
        name = request.query_params.get("name") or ""
        manifests = self.browser.versions(key, name)
        return self.render(request, "versions.html", key=key, name=name, manifests=manifests, crumbs=crumbs(key, name))

    @_answered
    def samples(self, request: Request) -> Response:
        key = self.store_key(request)
        ref = self.ref(request)
        manifest = self.browser.manifest(key, ref)
        default = IMAGE_PAGE_ROWS if manifest.kind is Kind.IMAGE else TABLE_PAGE_ROWS
        size = self.number(request, "size", default, low=1, high=MAX_PAGE_ROWS)
        target = request.query_params.get("row")
        if target:
            row = self.number(request, "row")
            if row >= manifest.rows:
                raise IndexError(f"row {row} is out of range: {manifest.ref} has {manifest.rows:,} rows")
            number = row // size
        else:
            row = None
            number = self.number(request, "page", 0)
        last = max(0, (manifest.rows - 1) // size)
        if number > last:
            raise IndexError(f"{manifest.ref} has {last + 1:,} pages of {size} rows")
        page = self.browser.page(key, manifest, number * size, size)
        return self.render(
            request,
            "samples.html",
            key=key,
            manifest=manifest,
            page=page,
            number=number,
            last=last,
            size=size,
            size_param=None if size == default else size,
            target=row,
            crumbs=crumbs(key, manifest.name, manifest.version, "samples"),
        )

    async def value(self, request: Request) -> Response:
        """A value's bytes: a thumbnail made already is answered at once, anything else on a worker thread."""
        made = self.made_thumbnail(request)
        return made if made is not None else await run_in_threadpool(self.read_value, request)

    def made_thumbnail(self, request: Request) -> Response | None:
        if not request.query_params.get("thumbnail"):
            return None
        try:
            key, ref, identity = self.store_key(request), self.ref(request), self.identity(request)
            row, column = self.number(request, "row"), self.number(request, "column", 0)
            found = None if identity is None else self.browser.made_thumbnail(key, ref, identity, row, column)
        except (HTTPException, ValueError):
            return None  # answered by read_value, with why
        if found is None:
            return None
        assert identity is not None
        return Response(found[0], media_type=found[1], headers=_value_headers(identity, row, column, True, True))

    @_answered
    def read_value(self, request: Request) -> Response:
        key = self.store_key(request)
        ref = self.ref(request)
        identity = self.identity(request)
        row = self.number(request, "row")
        column = self.number(request, "column", 0)
        small = bool(request.query_params.get("thumbnail"))
        manifest = self.browser.manifest(key, ref, identity)
        cache = _value_headers(manifest.manifest_sha256, row, column, small, identity is not None)
        if request.headers.get("if-none-match") == cache["ETag"]:
            return Response(status_code=304, headers=cache)
        if small:
            found = self.browser.thumbnail(key, manifest, row, column)
            if found is None:
                return PlainTextResponse(self.no_thumbnail(key, manifest, row, column), 415)
            return Response(found[0], media_type=found[1], headers=cache)
        value = self.browser.value(key, manifest, row, column)
        if isinstance(value, str):
            return PlainTextResponse(value, headers=cache)
        if not isinstance(value, bytes):
            return PlainTextResponse(f"column {column} holds {type(value).__name__} values: see the samples page", 415)
        content_type = image_type(value)
        if content_type is not None:
            return Response(value, media_type=content_type, headers=cache)
        name = _FILENAME_UNSAFE.sub("_", f"{ref.name}-{ref.version}-row-{row}-column-{column}.bin")
        cache["Content-Disposition"] = f'attachment; filename="{name}"'
        return Response(value, media_type="application/octet-stream", headers=cache)

    def no_thumbnail(self, key: str, manifest: Manifest, row: int, column: int) -> str:
        shown = cell(self.browser.value(key, manifest, row, column))
        ref = manifest.ref
        if shown.kind == "large-image":
            stored = href(f"/stores/{key}/value", ref=ref, row=row, column=column, m=manifest.manifest_sha256)
            return (
                f"row {row} of {ref} is an image of {describe_pixels(shown)}, more than a thumbnail is made from "
                f"({MAX_DECODED_PIXELS:,} pixels): its stored bytes are at {stored}"
            )
        return f"row {row} of {ref}, column {column}: not an image that can be shown small"

    @_answered
    def labels(self, request: Request) -> Response:
        key = self.store_key(request)
        ref = self.ref(request)
        manifest = self.browser.manifest(key, ref)
        if manifest.kind is Kind.TABLE or len(manifest.columns) < 2:
            histogram = None
        else:
            column = self.number(request, "column", 1, low=1, high=len(manifest.columns) - 1)
            histogram = self.browser.histogram(key, manifest, column)
        chart = None
        if histogram is not None and histogram.bars:
            bars = [(label, [float(rows)]) for label, rows in histogram.bars]
            title = f"rows per {manifest.columns[histogram.column]}"
            chart = charts.bar_chart(bars, parts=["rows"], title=title)
        crumbs_shown = crumbs(key, manifest.name, manifest.version, "labels")
        return self.render(
            request, "labels.html", key=key, manifest=manifest, histogram=histogram, chart=chart, crumbs=crumbs_shown
        )

    @_answered
    def diff(self, request: Request) -> Response:
        key = self.store_key(request)
        a, b = self.ref(request, "a"), self.ref(request, "b")
        manifest_a, manifest_b = self.browser.manifest(key, a), self.browser.manifest(key, b)
        try:
            found = self.browser.diff(key, manifest_a, manifest_b)
        except ImportError:
            return self.error(request, 501, "not available", "this datamount has no version diffs")
        samples = {category: found.sample_rows(category, DIFF_SAMPLES) for category in ("added", "removed", "changed")}
        labels = sorted(set(found.label_counts_a) | set(found.label_counts_b)) if found.labels_are_classes else []
        shown = self.diff_rows(key, (manifest_a, manifest_b), samples)
        crumbs_shown = crumbs(key, a.name, a.version, f"diff with {b}")
        return self.render(
            request,
            "diff.html",
            key=key,
            a=manifest_a,
            b=manifest_b,
            found=found,
            samples=samples,
            labels=labels,
            shown=shown,
            crumbs=crumbs_shown,
        )

    def diff_rows(self, key: str, manifests: tuple[Manifest, Manifest], samples: dict[str, Any]) -> dict[str, Any]:
        """The rows of image versions the diff page shows, by version and row, read as the samples page reads them."""
        wanted: dict[str, set[int]] = {manifest.ref: set() for manifest in manifests if manifest.kind is Kind.IMAGE}
        for rows in samples.values():
            for row in rows:
                for manifest, index in zip(manifests, (row.row_a, row.row_b), strict=True):
                    if manifest.ref in wanted and index is not None:
                        wanted[manifest.ref].add(index)
        found = {manifest.ref: manifest for manifest in manifests}
        return {ref: self.browser.rows(key, found[ref], indices) for ref, indices in wanted.items()}

    @_answered
    def training(self, request: Request) -> Response:
        if self.stats_file is None:
            return self.render(
                request, "training.html", report=None, charts_shown=[], crumbs=crumbs(None, None, None, "training")
            )
        try:
            report = read_stats(self.stats_file)
        except OSError as exc:
            return self.error(
                request, 500, "cannot read the statistics file", f"{self.stats_file}: {exc.strerror or exc}"
            )
        shown = []
        if report.ranks:
            named = [f"rank {summary.rank}" for summary in report.ranks]
            shown.append(
                charts.line_chart(
                    [charts.Series(n, s.times, s.wait_share) for n, s in zip(named, report.ranks, strict=True)],
                    title="share of time waiting for samples (the rest: the training step's own time)",
                    x_label="seconds",
                    y_top=1.0,
                    y_format=lambda share: f"{share:.0%}",
                )
            )
            shown.append(
                charts.line_chart(
                    [charts.Series(n, s.times, s.samples_per_s) for n, s in zip(named, report.ranks, strict=True)],
                    title="samples per second",
                    x_label="seconds",
                )
            )
            bars = [
                (n, [s.totals["waited_s"], s.totals["compute_s"]]) for n, s in zip(named, report.ranks, strict=True)
            ]
            shown.append(charts.bar_chart(bars, parts=["waited", "training step"], title="seconds per rank", unit=" s"))
        return self.render(
            request, "training.html", report=report, charts_shown=shown, crumbs=crumbs(None, None, None, "training")
        )
