"""Serving the app: one socket, bound before the server starts (so that port 0 can be given and the port taken
said), and uvicorn answering on it until SIGINT or SIGTERM, then stopping at once (NOTE [ Stopping at once ]).

NOTE [ Stopping at once ]
A Ctrl-C of ``datamount ui`` took seconds, and with a page waiting on a store that does not answer, as long as the
store's client waits (30 s and more): uvicorn's graceful shutdown waits for every request being answered, with no
limit; ``asyncio.run`` then waits for the tasks it cancels, and a page made on a worker thread cannot be cancelled
(Starlette's thread pool finishes what it started); and the interpreter's exit joins the threads still making pages
(anyio's workers, a page's thumbnail pool, and obstore's exit hook waits up to 30 s for its requests in flight)
before it tears down its modules. So a request being answered when the signal comes gets :data:`STOP_GRACE_S` to
finish, and then the command's ``stopped`` ends the process there, without those waits: the server writes nothing
(every request is a read), so nothing it leaves unfinished needs finishing. Its idle keep-alive connections are
closed by uvicorn first, as always. The process is gone within a second of the signal, whatever its connections do
(``tests/ui/test_ui_stop.py``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

from starlette.types import ASGIApp

#: Seconds a request being answered when the server is told to stop may still take (NOTE [ Stopping at once ]).
STOP_GRACE_S = 0.25


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (``port`` 0: a free one; its number is ``getsockname()[1]``)."""
    family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    listening = socket.socket(family, kind, protocol)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
        listening.listen(128)
    except OSError:
        listening.close()
        raise
    return listening


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_of(listening: socket.socket) -> str:
    """The URL a browser opens for what ``listening`` serves."""
    host, port = listening.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(
    app: ASGIApp,
    listening: socket.socket,
    *,
    log_level: str = "warning",
    stopped: Callable[[int], Any] | None = None,
) -> None:
    """Answer requests to ``app`` on ``listening`` until the process is interrupted (SIGINT, SIGTERM). The requests
    being answered then get :data:`STOP_GRACE_S` seconds to finish; after that, ``stopped(signal)`` is called where
    the server stopped, before anything waits for them (to end the process: NOTE [ Stopping at once ]). Without it,
    the signal is raised again once they are done (a ``KeyboardInterrupt`` after SIGINT), as uvicorn does."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        """uvicorn's server, telling ``stopped`` which signal stopped it as soon as it has stopped."""

        signal: int | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            self.signal = self.signal or sig
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets=sockets)
            if stopped is not None and self.signal is not None:
                stopped(self.signal)

    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        proxy_headers=False,  # nothing stands in front of it: no client names itself through a header
        server_header=False,
        lifespan="off",
        timeout_graceful_shutdown=STOP_GRACE_S,  # type: ignore[arg-type]  # typed int, used as asyncio.timeout's seconds
    )
    StoppingServer(config).run(sockets=[listening])
