"""Serving the app: one socket, bound before the server starts (so that port 0 can be given and the port taken
said), and uvicorn answering on it until SIGINT or SIGTERM."""

from __future__ import annotations

import ipaddress
import socket

from starlette.types import ASGIApp


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


def serve(app: ASGIApp, listening: socket.socket, *, log_level: str = "warning") -> None:
    """Answer requests to ``app`` on ``listening`` until the process is interrupted (SIGINT, SIGTERM)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        proxy_headers=False,  # nothing stands in front of it: no client names itself through a header
        server_header=False,
        lifespan="off",
    )
    uvicorn.Server(config).run(sockets=[listening])
