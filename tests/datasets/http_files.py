"""A real HTTP file server on loopback for the download tests: GET with ``Range``, and faults to inject (a body cut
short, an error status, other bytes than the file's, a server that ignores ``Range``)."""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


@dataclass
class Fault:
    """What the server does wrong for a path, ``times`` times (``None``: always)."""

    kind: str  # "cut", "status", "wrong", "ignore_range"
    times: int | None = 1
    cut_after: int = 0
    status: int = 500


@dataclass(frozen=True)
class Request:
    path: str
    range: str | None
    status: int


@dataclass
class _State:
    files: dict[str, bytes] = field(default_factory=dict)
    faults: dict[str, list[Fault]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_fault(self, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults.get(path, []):
                if fault.times is None:
                    return fault
                if fault.times > 0:
                    fault.times -= 1
                    return fault
        return None


class _QuietHTTPServer(ThreadingHTTPServer):
    """Keeps a request's failure (often a client that hung up mid-answer, which the faults provoke) instead of
    printing it to ``sys.stderr``, where it would land in the output of the command under test."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.errors: list[BaseException] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None:
            self.errors.append(error)


class FileServer:
    """Files from memory at ``{url}/{path}``, served by a threaded HTTP/1.1 server on 127.0.0.1."""

    def __init__(self) -> None:
        self._state = _State()
        self._server = _QuietHTTPServer(("127.0.0.1", 0), _handler_for(self._state))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="test-file-server")
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FileServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def add(self, path: str, data: bytes) -> str:
        """Serve ``data`` at ``path``; return its URL."""
        self._state.files[path.lstrip("/")] = data
        return f"{self.url}/{path.lstrip('/')}"

    def inject(self, path: str, fault: Fault) -> None:
        self._state.faults.setdefault(path.lstrip("/"), []).append(fault)

    def cut(self, path: str, after: int, *, times: int | None = 1) -> None:
        """Announce the whole length but close the connection after ``after`` bytes of the body."""
        self.inject(path, Fault("cut", times, cut_after=after))

    def fail(self, path: str, status: int, *, times: int | None = None) -> None:
        self.inject(path, Fault("status", times, status=status))

    def corrupt(self, path: str, *, times: int | None = None) -> None:
        """Serve other bytes of the same length."""
        self.inject(path, Fault("wrong", times))

    def ignore_range(self, path: str, *, times: int | None = None) -> None:
        self.inject(path, Fault("ignore_range", times))

    @property
    def requests(self) -> list[Request]:
        with self._state.lock:
            return list(self._state.requests)

    def requests_for(self, path: str) -> list[Request]:
        return [request for request in self.requests if request.path == path.lstrip("/")]


def _handler_for(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            asked = self.headers.get("Range")
            data = state.files.get(path)
            fault = state.take_fault(path)
            if data is None:
                return self._answer(path, asked, 404, b"not found")
            if fault is not None and fault.kind == "status":
                return self._answer(path, asked, fault.status, b"failing on purpose")
            if fault is not None and fault.kind == "wrong":
                data = bytes(reversed(data)) if len(set(data)) > 1 else bytes(b ^ 0xFF for b in data)
            start, end = 0, len(data)
            partial = asked is not None and not (fault is not None and fault.kind == "ignore_range")
            if partial:
                match = _RANGE.match(asked or "")
                if match is None:
                    return self._answer(path, asked, 400, b"bad range")
                start = int(match.group(1))
                end = min(len(data), int(match.group(2)) + 1) if match.group(2) else len(data)
                if start >= len(data):
                    return self._answer(path, asked, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
            body = data[start:end]
            headers = {"Content-Range": f"bytes {start}-{end - 1}/{len(data)}"} if partial else {}
            sent = body[: fault.cut_after] if fault is not None and fault.kind == "cut" else body
            self._answer(path, asked, 206 if partial else 200, sent, headers, length=len(body))

        def _answer(
            self,
            path: str,
            asked: str | None,
            status: int,
            body: bytes,
            headers: dict[str, str] | None = None,
            *,
            length: int | None = None,
        ) -> None:
            with state.lock:
                state.requests.append(Request(path, asked, status))
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body) if length is None else length))
            if length is not None and length != len(body):
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

    return Handler
