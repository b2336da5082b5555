"""``datamount ui`` stops at once on Ctrl-C (SIGINT), whatever its connections are doing: an idle keep-alive one, and
one whose page is still being read from a store that does not answer."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from datamount.datasets import upload
from datamount.storage import Store
from tests.generated import MakeImageList
from tests.servers._launch import wait_until
from tests.servers.fault_proxy import Action, Fault, FaultProxyFactory
from tests.servers.moto import S3Server
from tests.ui.showcase import UiServer

#: How long the process may take to exit after SIGINT: a liveness bound, not a measure (it stops within 1 s).
EXIT_BOUND_S = 5.0


@pytest.mark.s3
def test_ctrl_c_stops_the_server_while_a_connection_idles_and_a_page_waits_on_the_store(
    s3_store: Store, s3_server: S3Server, fault_proxy: FaultProxyFactory, make_image_list: MakeImageList, tmp_path: Path
) -> None:
    upload(make_image_list(3), "cats", store=s3_store)
    proxy = fault_proxy(s3_server.endpoint_url)
    server = UiServer([s3_store.url], tmp_path / "ui.log", options={"endpoint_url": proxy.endpoint_url})
    try:
        where = urlsplit(server.url)
        idle = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
        idle.request("GET", "/stores/store-1/dataset?name=cats")
        answer = idle.getresponse()
        assert answer.status == 200 and answer.getheader("Connection") != "close"
        answer.read()  # the connection stays open, kept alive, asking nothing
        proxy.inject(Fault.stall(), containing="/objects/")  # the store never answers for a file's bytes
        waiting = socket.create_connection((where.hostname, where.port), timeout=30)
        waiting.sendall(f"GET /stores/store-1/value?ref=cats@1&row=0 HTTP/1.1\r\nHost: {where.netloc}\r\n\r\n".encode())
        wait_until(lambda: proxy.count(Action.STALL) > 0, timeout=30, failed=lambda: None, what="the stalled read")
        server.process.send_signal(signal.SIGINT)
        try:
            status = server.process.wait(timeout=EXIT_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"datamount ui still ran {EXIT_BOUND_S} s after SIGINT (a connection idle, a page waiting)")
        assert status == 130, (status, (tmp_path / "ui.log").read_text())
        assert "datamount: interrupted" in (tmp_path / "ui.log").read_text()
        assert waiting.recv(1 << 16) == b"" and idle.sock is not None and idle.sock.recv(1) == b""  # both closed
    finally:
        server.stop()
