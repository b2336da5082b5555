"""A TCP proxy on loopback, in front of an HTTP storage server, that injects network and server faults on demand.

The proxy understands HTTP/1.1 framing (keep-alive, ``Content-Length``, chunked bodies, ``Expect: 100-continue``),
so a fault can hit one request among many on the same connection. Faults are set by rules::

    proxy.inject(Fault.status(503), times=1)             # the next request gets a throttling answer
    proxy.inject(Fault.reset_after(), methods={"PUT"})   # every PUT from now on: stored upstream, then reset
    proxy.inject(Fault.cut(100), skip=2, times=1)        # the 3rd request from now: its body cut after 100 bytes
    proxy.inject(Fault.stall(), containing="shard-")     # requests naming a shard (in the URL or the body)
    proxy.inject(Fault.delay(0.020))                     # every request answered 20 ms later, as far-away S3 is

Every request is logged with what the proxy did to it (:attr:`FaultProxy.requests`, :meth:`FaultProxy.count`).
For benchmarks, ``python -m tests.servers.fault_proxy UPSTREAM --delay-ms 20`` runs a delaying proxy in a process of
its own (so that its work is not the measured process's) and prints its endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import re
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

import pytest

Flavour = Literal["s3", "gcs"]
Unit = Literal["request", "connection"]

#: Bytes read from a socket at once when streaming a body through (heads are limited by asyncio's 64 KiB buffer).
PIPE_CHUNK = 64 << 10


class Action(enum.Enum):
    """What the proxy did with one request."""

    PASS = "pass"
    RESET_BEFORE = "reset-before"
    RESET_AFTER = "reset-after"
    STALL = "stall"
    CUT = "cut"
    STATUS = "status"
    DELAY = "delay"


@dataclass(frozen=True)
class Fault:
    """One fault to inject: build with the class methods."""

    action: Action
    body_bytes: int = 0
    status_code: int = 0
    seconds: float = 0.0

    @classmethod
    def reset_before(cls) -> Fault:
        """Read the request, then reset the connection (RST) without forwarding it."""
        return cls(Action.RESET_BEFORE)

    @classmethod
    def reset_after(cls) -> Fault:
        """Forward the request and read the whole answer (the server did the work), then reset the connection."""
        return cls(Action.RESET_AFTER)

    @classmethod
    def stall(cls) -> Fault:
        """Read the request and never answer (until the client gives up or the proxy closes)."""
        return cls(Action.STALL)

    @classmethod
    def cut(cls, body_bytes: int) -> Fault:
        """Forward the answer's head and its first ``body_bytes`` body bytes, then close the connection (an answer
        no longer than that goes through whole, though the request is still logged as cut)."""
        if body_bytes < 0:
            raise ValueError(f"body_bytes must be >= 0, got {body_bytes}")
        return cls(Action.CUT, body_bytes=body_bytes)

    @classmethod
    def status(cls, code: int) -> Fault:
        """Answer with HTTP ``code`` (500, 503...) and the error body the server kind sends, without forwarding."""
        if not 400 <= code <= 599:
            raise ValueError(f"an error status is 4xx or 5xx, got {code}")
        return cls(Action.STATUS, status_code=code)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Hold the request ``seconds`` before forwarding it (a server that far away); the answer goes through
        whole. Other requests are not held meanwhile, as on a real network."""
        if not seconds >= 0:
            raise ValueError(f"a delay is >= 0 seconds, got {seconds}")
        return cls(Action.DELAY, seconds=seconds)


@dataclass
class Rule:
    """A fault applied to matching requests (or connections): ``skip`` of them pass, then ``times`` are hit."""

    fault: Fault
    times: int | None
    skip: int
    methods: frozenset[str] | None
    containing: str | None
    unit: Unit
    seen: int = 0

    def matches(self, request: _Request) -> bool:
        if self.methods is not None and request.method not in self.methods:
            return False
        if self.containing is None:
            return True
        # Object names travel in the URL (percent-encoded) or, for some uploads, in a JSON body.
        return self.containing in unquote(request.target) or self.containing in request.body.decode("latin-1")

    def take(self) -> bool:
        """Count one matching request; whether the fault hits it."""
        self.seen += 1
        if self.seen <= self.skip:
            return False
        return self.times is None or self.seen <= self.skip + self.times

    @property
    def spent(self) -> bool:
        return self.times is not None and self.seen >= self.skip + self.times


@dataclass(frozen=True)
class RequestRecord:
    """One request the proxy saw and what it did with it."""

    method: str
    target: str
    action: Action
    connection: int
    #: The request's ``Range`` header (``bytes=START-END``), if it had one.
    range: str | None = None
    #: When the request was read (``time.monotonic()``).
    received: float = field(default_factory=time.monotonic)
    #: The access key the request was signed with (AWS Signature V4's ``Credential=KEY/...``), if it was signed.
    access_key: str | None = None
    #: The bytes of the upstream answer's body passed back to the client (as framed on the wire), counted before each
    #: is written; ``None`` before its head is, and for an answer the proxy made or dropped itself.
    answered: int | None = None


@dataclass
class _Request:
    method: str
    target: str
    head: bytes
    body: bytes
    close: bool
    range: str | None = None


@dataclass
class _Connection:
    number: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    forced: Fault | None = None
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = field(default=None, repr=False)


class FaultProxy:
    """A proxy on ``127.0.0.1`` in front of ``upstream_url`` (an ``http://host:port`` endpoint).

    Parameters
    ----------
    upstream_url
        The server to forward to.
    flavour
        Which error bodies :meth:`Fault.status` answers with: S3's XML (``SlowDown`` for 503) or GCS's JSON.
    port
        The port to listen on (default: any free one).
    """

    def __init__(self, upstream_url: str, *, flavour: Flavour = "s3", port: int = 0) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"the upstream must be http://HOST:PORT, got {upstream_url!r}")
        self.upstream = (parts.hostname, parts.port)
        self.flavour = flavour
        self._port = port
        self._rules: list[Rule] = []
        self._records: list[RequestRecord] = []
        self._connections = 0
        self._faulty_connections = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._thread.start()
        self._ready.wait(10)
        if self._server is None:
            raise RuntimeError("the fault proxy did not start")
        self.port: int = self._server.sockets[0].getsockname()[1]

    @property
    def endpoint_url(self) -> str:
        """The URL clients use instead of the upstream's."""
        return f"http://127.0.0.1:{self.port}"

    # -- control -------------------------------------------------------------------------------------------------

    def inject(
        self,
        fault: Fault,
        *,
        times: int | None = None,
        skip: int = 0,
        methods: Collection[str] | None = None,
        containing: str | None = None,
        unit: Unit = "request",
    ) -> Rule:
        """Apply ``fault`` from now on to matching requests: ``skip`` of them pass first, then ``times`` are hit
        (``None``: all).

        A request matches when its method is one of ``methods`` and ``containing`` is in its (decoded) URL or its
        body. With ``unit="connection"``, new connections are counted instead (``methods`` and ``containing`` do
        not apply), and every request on a hit connection gets the fault (a reset before any request is read)."""
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1 or None, got {times}")
        rule = Rule(
            fault,
            times=times,
            skip=skip,
            methods=frozenset(m.upper() for m in methods) if methods is not None else None,
            containing=containing,
            unit=unit,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule: requests pass through again (stalled ones stay stalled)."""
        with self._lock:
            self._rules.clear()

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request seen so far, in arrival order."""
        with self._lock:
            return list(self._records)

    def count(self, action: Action | None = None, *, method: str | None = None, path_contains: str = "") -> int:
        """How many requests got ``action`` (any, with ``None``), optionally only those of ``method`` whose decoded
        URL holds ``path_contains``."""
        return sum(
            1
            for r in self.requests
            if (action is None or r.action is action)
            and (method is None or r.method == method)
            and path_contains in unquote(r.target)
        )

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return self._connections

    @property
    def faulty_connections(self) -> int:
        """Connections hit by a ``unit="connection"`` rule so far."""
        with self._lock:
            return self._faulty_connections

    def close(self) -> None:
        """Stop accepting, drop every connection (stalled ones too) and stop the proxy's thread."""
        if self._loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _choose(self, request: _Request | None) -> Fault | None:
        """The fault for ``request``, or for a new connection when ``None``; counts it against the rules."""
        unit = "request" if request is not None else "connection"
        with self._lock:
            for rule in self._rules:
                if rule.unit != unit or rule.spent or (request is not None and not rule.matches(request)):
                    continue
                if rule.take():
                    return rule.fault
        return None

    def _record(self, request: _Request, action: Action, connection: _Connection) -> int:
        with self._lock:
            self._records.append(
                RequestRecord(
                    request.method,
                    request.target,
                    action,
                    connection.number,
                    request.range,
                    access_key=_access_key(request.head),
                )
            )
            return len(self._records) - 1

    def _record_answer(self, index: int, answered: int) -> None:
        with self._lock:
            self._records[index] = dataclasses.replace(self._records[index], answered=answered)

    # -- the event loop ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", self._port))
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # the server runs each connection in its own task
            self._tasks.add(task)
        with self._lock:
            self._connections += 1
            number = self._connections
        connection = _Connection(number, reader, writer)
        try:
            connection.forced = self._choose(None)
            if connection.forced is not None:
                with self._lock:
                    self._faulty_connections += 1
            if connection.forced is not None and connection.forced.action is Action.RESET_BEFORE:
                _reset(writer)
                return
            await self._serve(connection)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # either side went away, or a fault ended the connection
        except asyncio.CancelledError:
            pass  # the proxy is closing; asyncio's server treats a cancelled connection task as an error
        finally:
            if task is not None:
                self._tasks.discard(task)
            await _close_upstream(connection)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, connection: _Connection) -> None:
        while True:
            request = await _read_request(connection)
            if request is None:
                return
            fault = connection.forced or self._choose(request)
            # Recorded before answering, so that a client that has its answer also finds its request logged.
            index = self._record(request, fault.action if fault is not None else Action.PASS, connection)
            keep_open = await self._handle(connection, request, fault, index)
            if not keep_open or request.close:
                return

    async def _handle(self, connection: _Connection, request: _Request, fault: Fault | None, record: int) -> bool:
        """Answer request number ``record`` as ``fault`` says; whether the client connection stays usable."""
        writer = connection.writer
        if fault is None:
            _, reusable = await self._forward(connection, request, record)
            return reusable
        if fault.action is Action.RESET_BEFORE:
            _reset(writer)
            return False
        if fault.action is Action.STALL:
            await _wait_for_hangup(connection.reader)
            return False
        if fault.action is Action.STATUS:
            writer.write(_error_answer(fault.status_code, request, self.flavour))
            await writer.drain()
            return True
        if fault.action is Action.DELAY:
            await asyncio.sleep(fault.seconds)
            _, reusable = await self._forward(connection, request, record)
            return reusable
        if fault.action is Action.RESET_AFTER:
            await self._forward(connection, request, record, send=False)
            _reset(writer)
            return False
        _, reusable = await self._forward(connection, request, record, limit=fault.body_bytes)
        return reusable

    async def _forward(
        self,
        connection: _Connection,
        request: _Request,
        record: int,
        *,
        limit: int | None = None,
        send: bool = True,
    ) -> tuple[bool, bool]:
        """Send ``request`` upstream and its answer back: the head, then at most ``limit`` body bytes when given
        (nothing at all without ``send``). Returns whether the whole answer went back, and whether the client
        connection may carry another request. The bytes passed back are counted in request ``record`` before they
        are written: a client that has the answer finds them counted."""
        upstream_reader, head = await self._exchange(connection, request)
        status, headers = _parse_head(head)
        client = connection.writer
        if send:
            self._record_answer(record, 0)
            client.write(head)
        sent = 0
        whole = True
        async for piece in _body(upstream_reader, headers, request.method, status):
            if not send:
                continue
            if limit is not None and sent + len(piece) > limit:
                self._record_answer(record, limit)
                client.write(piece[: limit - sent])
                whole = False
                break
            sent += len(piece)
            self._record_answer(record, sent)
            client.write(piece)
            await client.drain()
        await client.drain()
        reusable = whole and _framed(headers, request.method, status) and not _closes(headers)
        if not reusable:
            await _close_upstream(connection)
        return whole, reusable

    async def _exchange(self, connection: _Connection, request: _Request) -> tuple[asyncio.StreamReader, bytes]:
        """Send ``request`` upstream and read the answer's head. A kept-alive upstream connection that the server
        closed meanwhile is replaced, once: only the faults the proxy is told to make reach the client."""
        if connection.upstream is not None:
            try:
                return await self._send(connection, request)
            except (asyncio.IncompleteReadError, ConnectionError):
                await _close_upstream(connection)
        return await self._send(connection, request)

    async def _send(self, connection: _Connection, request: _Request) -> tuple[asyncio.StreamReader, bytes]:
        reader, writer = await self._upstream(connection)
        writer.write(request.head + request.body)
        await writer.drain()
        return reader, await reader.readuntil(b"\r\n\r\n")

    async def _upstream(self, connection: _Connection) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if connection.upstream is None or connection.upstream[1].is_closing() or connection.upstream[0].at_eof():
            await _close_upstream(connection)
            connection.upstream = await asyncio.open_connection(*self.upstream)
        return connection.upstream


# -- HTTP framing ----------------------------------------------------------------------------------------------------


def _access_key(head: bytes) -> str | None:
    found = re.search(rb"Credential=([^/\s]+)/", head)
    return found.group(1).decode() if found else None


async def _read_request(connection: _Connection) -> _Request | None:
    """The next request on the connection (head and body), ``None`` when the client closed it."""
    reader, writer = connection.reader, connection.writer
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    request_line, headers = _parse_request_head(head)
    method, target = request_line[0], request_line[1]
    if headers.get("expect", "").lower() == "100-continue":
        # Answer the interim response ourselves, so that faults never depend on how the upstream handles it.
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        head = _drop_header(head, b"expect")
    body = b"".join([piece async for piece in _request_body(reader, headers)])
    close = headers.get("connection", "").lower() == "close" or request_line[2] == "HTTP/1.0"
    return _Request(method.upper(), target, head, body, close, headers.get("range"))


async def _request_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        async for piece in _chunked(reader):
            yield piece
        return
    length = int(headers.get("content-length", "0") or 0)
    if length:
        yield await reader.readexactly(length)


async def _body(
    reader: asyncio.StreamReader, headers: dict[str, str], method: str, status: int
) -> AsyncIterator[bytes]:
    """The raw bytes of an answer's body, as framed on the wire (chunk framing kept)."""
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return
    if "chunked" in headers.get("transfer-encoding", "").lower():
        async for piece in _chunked(reader):
            yield piece
        return
    if "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining:
            piece = await reader.read(min(remaining, PIPE_CHUNK))
            if not piece:
                raise asyncio.IncompleteReadError(b"", remaining)
            remaining -= len(piece)
            yield piece
        return
    while piece := await reader.read(PIPE_CHUNK):  # no framing: the body runs until the server closes
        yield piece


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body, framing included, up to and with its terminating chunk and trailers."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        yield size_line
        if size == 0:
            while True:
                trailer = await reader.readuntil(b"\r\n")
                yield trailer
                if trailer == b"\r\n":
                    return
        yield await reader.readexactly(size + 2)


def _parse_request_head(head: bytes) -> tuple[list[str], dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    request_line = lines[0].split(" ")
    if len(request_line) != 3:
        raise ConnectionError(f"not an HTTP request line: {lines[0]!r}")
    return request_line, _headers(lines[1:])


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    return int(lines[0].split(" ")[1]), _headers(lines[1:])


def _headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return headers


def _drop_header(head: bytes, name: bytes) -> bytes:
    lines = head.split(b"\r\n")
    kept = [line for line in lines if not line.lower().startswith(name + b":")]
    return b"\r\n".join(kept)


def _closes(headers: dict[str, str]) -> bool:
    return headers.get("connection", "").lower() == "close"


def _framed(headers: dict[str, str], method: str, status: int) -> bool:
    """Whether the answer's end is known without the server closing the connection."""
    no_body = method == "HEAD" or status in (204, 304)
    return no_body or "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()


def _error_answer(code: int, request: _Request, flavour: Flavour) -> bytes:
    """An HTTP error as the server kind sends it: S3's XML error document, or GCS's JSON one."""
    if flavour == "s3":
        s3_code, message = {
            503: ("SlowDown", "Please reduce your request rate."),
            500: ("InternalError", "We encountered an internal error. Please try again."),
        }.get(code, ("ServiceUnavailable", "Injected by the fault proxy."))
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{s3_code}</Code><Message>{message}</Message>"
            "<RequestId>FAULTPROXY</RequestId></Error>"
        ).encode()
        content_type = "application/xml"
    else:
        reason = "backendError" if code >= 500 else "invalid"
        message = "Injected by the fault proxy."
        body = json.dumps(
            {"error": {"code": code, "message": message, "errors": [{"reason": reason, "message": message}]}}
        ).encode()
        content_type = "application/json; charset=UTF-8"
    head = (
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: keep-alive\r\n\r\n"
    ).encode()
    return head if request.method == "HEAD" else head + body


_REASONS = {500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


# -- sockets ---------------------------------------------------------------------------------------------------------


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN: SO_LINGER on with a zero timeout, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _wait_for_hangup(reader: asyncio.StreamReader) -> None:
    """Hold a connection open until the client closes it (what it sends meanwhile is ignored)."""
    while await reader.read(PIPE_CHUNK):
        pass


async def _close_upstream(connection: _Connection) -> None:
    if connection.upstream is None:
        return
    _, writer = connection.upstream
    connection.upstream = None
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


# -- the pytest fixture ----------------------------------------------------------------------------------------------

FaultProxyFactory = Callable[..., FaultProxy]


@pytest.fixture
def fault_proxy() -> Iterator[FaultProxyFactory]:
    """Start fault proxies in front of endpoints: ``fault_proxy(upstream_url, flavour="s3")``; all are closed after
    the test."""
    proxies: list[FaultProxy] = []

    def start(upstream_url: str, *, flavour: Flavour = "s3") -> FaultProxy:
        proxy = FaultProxy(upstream_url, flavour=flavour)
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.close()


def main() -> None:
    """Run a proxy in front of an endpoint until interrupted, delaying every request: for benchmarks."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("upstream", help="http://HOST:PORT of the server")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added to every request (default 0)")
    parser.add_argument("--flavour", choices=["s3", "gcs"], default="s3")
    parser.add_argument("--port", type=int, default=0, help="to listen on (default: any free one)")
    options = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # for sigwait, in every thread
    with FaultProxy(options.upstream, flavour=options.flavour, port=options.port) as proxy:
        proxy.inject(Fault.delay(options.delay_ms / 1000))
        print(proxy.endpoint_url, flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})


if __name__ == "__main__":
    main()
