"""Network namespaces joined by veth pairs with a bandwidth cap: servers on a link of their own, as in a data center.

A :class:`Link` is a veth pair between two places, each the machine's own namespace or a namespace made here, with a
``tbf`` qdisc on both ends (a 1 Gb/s cap by default, each way). Its two addresses are a /30 of ``198.18.0.0/15``,
the range set aside for benchmarking network devices (RFC 2544), so no real host is ever reached. Servers run inside
a namespace through ``ip netns exec`` (:meth:`Namespace.start`).

Everything is removed by :meth:`Namespace.remove` (every process still inside is killed first, so the namespace and
its veth ends really go), by the context managers, and at interpreter exit. A run killed before any of these leaves
namespaces named after its PID (``datamount-<pid>-<n>``); the next run removes those of PIDs that no longer run
(:func:`remove_stale`). Needs root, ``ip`` and ``tc`` (iproute2); the kernel needs veth and the ``tbf`` qdisc.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.servers._launch import environment_path, pid_alive, start_daemon
from tests.servers._lifetime import tied_to_parent

#: Every namespace made here starts with this, then the PID of the process that made it.
PREFIX = "datamount-"
#: Addresses of the links: RFC 2544's benchmarking range, carved into /30s.
LINK_RANGE = ipaddress.IPv4Network("198.18.0.0/15")
#: The default cap on each direction of a link.
DEFAULT_RATE = "1gbit"
#: Bits per second of :data:`DEFAULT_RATE`.
DEFAULT_RATE_BITS = 1_000_000_000
COMMAND_TIMEOUT = 30.0

_STALE_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-\d+$")
_counter = itertools.count()
_made: set[str] = set()
_made_lock = threading.Lock()


class NetnsError(RuntimeError):
    """An ``ip`` or ``tc`` command failed; the message names it and what it said."""


def _tool(name: str) -> str | None:
    return shutil.which(name, path=environment_path())


def _run(command: list[str]) -> str:
    full = [_tool(command[0]) or command[0], *command[1:]]
    try:
        done = subprocess.run(full, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"`{' '.join(command)}` failed: {exc}") from exc
    if done.returncode != 0:
        raise NetnsError(f"`{' '.join(command)}` failed with status {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def why_netns_cannot_run() -> str | None:
    """Why this machine cannot make capped namespaces, or ``None`` when it can (it makes and removes one to know)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    missing = [tool for tool in ("ip", "tc") if _tool(tool) is None]
    if missing:
        return f"no {', '.join(missing)} on PATH (apt-get install iproute2)"
    try:
        remove_stale()
        with namespace() as probe:
            link(probe)
    except NetnsError as exc:
        return f"cannot make a capped veth link in a network namespace: {exc}"
    return None


@dataclass
class Namespace:
    """A network namespace made here, with its loopback up; :meth:`remove` kills what runs inside and deletes it."""

    name: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this namespace (``ip netns exec`` execs it: the PID stays the command's)."""
        return [_tool("ip") or "ip", "netns", "exec", self.name, *argv]

    def start(self, argv: list[str], log: Path, *, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """Start the daemon ``argv`` inside this namespace (see :func:`tests.servers._launch.start_daemon`), tied to
        this process so that a killed run does not leave it behind."""
        program = shutil.which(argv[0], path=environment_path()) or argv[0]
        process = start_daemon(tied_to_parent(self.command([program, *argv[1:]])), log, cwd=cwd)
        self.processes.append(process)
        return process

    def run(self, argv: list[str], *, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to completion inside this namespace."""
        program = shutil.which(argv[0], path=environment_path()) or argv[0]
        return subprocess.run(self.command([program, *argv[1:]]), capture_output=True, text=True, timeout=timeout)

    def pids(self) -> list[int]:
        """The processes running inside this namespace."""
        return _namespace_pids(self.name)

    def remove(self) -> None:
        """Kill every process inside, then delete the namespace (its veth ends go with it)."""
        _remove(self.name)
        for process in self.processes:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                process.wait(timeout=5.0)
        with _made_lock:
            _made.discard(self.name)


@dataclass(frozen=True)
class Link:
    """A capped veth pair: ``address_a`` is on side A (``None``: this machine's own namespace), ``address_b`` in
    namespace B; ``device_a`` / ``device_b`` name the ends, each inside its own side."""

    address_a: str
    address_b: str
    device_a: str
    device_b: str
    rate: str


def _namespace_pids(name: str) -> list[int]:
    try:
        return [int(pid) for pid in _run(["ip", "netns", "pids", name]).split()]
    except NetnsError:
        return []


def _remove(name: str) -> None:
    """Kill what runs in namespace ``name`` (SIGKILL: a test's servers have nothing to save) and delete it."""
    for _ in range(3):
        pids = _namespace_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(NetnsError):
        _run(["ip", "netns", "delete", name])


def remove_stale() -> list[str]:
    """Remove the namespaces left by runs that were killed (their maker's PID no longer runs); their names."""
    try:
        listed = _run(["ip", "netns", "list"])
    except NetnsError:
        return []
    stale = []
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        found = _STALE_NAME.match(name)
        if found and not pid_alive(int(found.group(1))):
            _remove(name)
            stale.append(name)
    return stale


def make_namespace() -> Namespace:
    """A new namespace of a unique name, loopback up; removed at interpreter exit unless removed before."""
    name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
    _run(["ip", "netns", "add", name])
    with _made_lock:
        _made.add(name)
    made = Namespace(name)
    try:
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
    except BaseException:
        made.remove()
        raise
    return made


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A new namespace (see :func:`make_namespace`), removed on leaving, whatever happened."""
    made = make_namespace()
    try:
        yield made
    finally:
        made.remove()


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 of :data:`LINK_RANGE` that no interface of this machine's namespace has an address in."""
    used = set()
    with contextlib.suppress(NetnsError):
        for word in _run(["ip", "-o", "-4", "addr", "show"]).split():
            with contextlib.suppress(ValueError):
                used.add(ipaddress.ip_interface(word).network)
    subnets = LINK_RANGE.num_addresses // 4
    for _ in range(64):
        subnet = ipaddress.IPv4Network((int(LINK_RANGE.network_address) + 4 * random.randrange(subnets), 30))
        if subnet not in used:
            return subnet
    raise NetnsError(f"no free /30 left in {LINK_RANGE}")


def _cap(device: str, rate: str, netns: str | None) -> None:
    """A token bucket on ``device``'s egress: ``rate`` with a burst of 512 KiB (4 ms at 1 Gb/s: enough for the
    kernel's timer, small enough that the cap holds over any tenth of a second)."""
    where = ["-n", netns] if netns else []
    shaping = ["tbf", "rate", rate, "burst", "512kb", "latency", "50ms"]
    _run(["tc", *where, "qdisc", "replace", "dev", device, "root", *shaping])


def link(b: Namespace, a: Namespace | None = None, *, rate: str | None = DEFAULT_RATE) -> Link:
    """Join namespace ``b`` to ``a`` (``None``: this machine's own namespace) by a veth pair capped at ``rate``
    each way (``None``: no cap); the link goes when either namespace is removed."""
    subnet = _free_subnet()
    first, second = list(subnet.hosts())
    tag = f"{os.getpid() % 100000:05d}{next(_counter) % 1000:03d}"
    device_a, device_b = f"dma{tag}", f"dmb{tag}"
    where_a = ["netns", a.name] if a is not None else []
    _run(["ip", "link", "add", device_b, "netns", b.name, "type", "veth", "peer", "name", device_a, *where_a])
    for device, netns, address in ((device_a, a, first), (device_b, b, second)):
        ns = ["-n", netns.name] if netns is not None else []
        _run(["ip", *ns, "addr", "add", f"{address}/30", "dev", device])
        _run(["ip", *ns, "link", "set", device, "up"])
        if rate is not None:
            _cap(device, rate, netns.name if netns is not None else None)
    return Link(str(first), str(second), device_a, device_b, rate or "none")


@dataclass
class CappedHost:
    """A namespace reached from this machine over a capped link: servers started in it listen on :attr:`address`,
    which this machine reaches at the link's rate."""

    netns: Namespace
    link: Link

    @property
    def address(self) -> str:
        """The host's address, as this machine reaches it."""
        return self.link.address_b

    def remove(self) -> None:
        self.netns.remove()


@contextlib.contextmanager
def capped_host(rate: str | None = DEFAULT_RATE) -> Iterator[CappedHost]:
    """A namespace joined to this machine by a veth pair capped at ``rate``; removed on leaving."""
    with namespace() as made:
        yield CappedHost(made, link(made, rate=rate))


@atexit.register
def _remove_made() -> None:
    with _made_lock:
        names = list(_made)
    for name in names:
        _remove(name)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.servers.netns --clean``: remove the namespaces of killed runs; ``--list``: show them."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.servers.netns", description=__doc__.splitlines()[0])
    parser.add_argument("--clean", action="store_true", help="remove namespaces whose maker no longer runs")
    args = parser.parse_args(argv)
    if args.clean:
        for name in remove_stale():
            print(f"removed {name}")
    listed = [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line.startswith(PREFIX)]
    print("\n".join(listed) if listed else "no datamount namespaces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
