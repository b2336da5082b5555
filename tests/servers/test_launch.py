"""The test servers' start: ports picked where no outgoing connection takes them, and a start again when a port was
taken all the same before the server bound it."""

from __future__ import annotations

import socket

import pytest

from tests.servers._launch import PORTS, START_ATTEMPTS, ServerStartError, free_port, start_on_free_ports


class _Started:
    def stop(self) -> None:
        pass


def test_a_free_port_is_outside_the_range_of_outgoing_connections_and_free() -> None:
    port = free_port()
    assert port in PORTS
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))


def test_a_start_whose_port_was_taken_is_made_again() -> None:
    attempts: list[int] = []

    def start() -> _Started:
        attempts.append(free_port())
        if len(attempts) == 1:
            raise ServerStartError("the namenode exited: java.net.BindException: Address already in use")
        return _Started()

    assert isinstance(start_on_free_ports(start), _Started) and len(attempts) == 2


def test_other_failures_and_the_last_attempt_are_raised() -> None:
    calls = []

    def broken() -> _Started:
        calls.append(1)
        raise ServerStartError("no java on PATH")

    with pytest.raises(ServerStartError, match="no java"):
        start_on_free_ports(broken)
    assert len(calls) == 1

    def always_taken() -> _Started:
        calls.append(1)
        raise ServerStartError("Port in use: localhost:35983")

    calls.clear()
    with pytest.raises(ServerStartError, match="Port in use"):
        start_on_free_ports(always_taken)
    assert len(calls) == START_ATTEMPTS
