"""A Ceph cluster (one monitor, one OSD or more) with the RADOS Gateway (S3) on loopback, and the ``ceph_server``
/ ``ceph_store`` fixtures.

Built by hand as Ceph's own ``vstart.sh`` does: ``monmaptool`` and ``ceph-mon --mkfs`` for the monitor, ``ceph osd
new`` and ``ceph-osd --mkfs`` for an OSD on ``memstore`` (objects live in the OSD's memory), then ``radosgw`` with
the beast frontend on 127.0.0.1 and a user from ``radosgw-admin user create`` with known test keys. Authentication
between the daemons is off, pools have one replica per OSD (three OSDs: size 3, min size 2, so that one OSD may
die without stopping I/O), and every file — configuration, monitor store, logs, sockets —
is in temporary folders, so the machine's own Ceph state is never read or changed. Needs the Debian packages
``ceph-mon``, ``ceph-osd`` and ``radosgw`` (Ceph Pacific, 16.2).

Given a :class:`~tests.servers.netns.CappedHost`, every daemon runs inside its network namespace (the monitor and
OSDs on the namespace's loopback) and RGW listens on the namespace's address, reached over the capped link.

``python -m tests.servers.ceph`` runs a cluster until interrupted and prints its endpoint and keys.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from datamount.storage import Store, open_store
from tests.servers._launch import (
    ServerStartError,
    can_bind,
    environment_path,
    free_port,
    log_tail,
    serve_until_stopped,
    session_server,
    shared_bucket,
    start_daemon,
    stop_process,
    wait_until,
)
from tests.servers._lifetime import exit_on_sigterm, tied_to_parent
from tests.servers.netns import CappedHost

CEPH_TEST_KEY = "DATAMOUNTCEPHTESTKEY"
CEPH_TEST_SECRET = "datamount-ceph-test-secret-value"
TEST_USER = "datamount-test"
MON_ID = "a"
RGW_NAME = "client.rgw.test"
#: Each tool and the Debian package that brings it.
TOOLS = {
    "monmaptool": "ceph-base",
    "ceph-mon": "ceph-mon",
    "ceph-osd": "ceph-osd",
    "ceph": "ceph-common",
    "radosgw": "radosgw",
    "radosgw-admin": "ceph-common",
}
START_TIMEOUT = 120.0
COMMAND_TIMEOUT = 60.0
REQUEST_TIMEOUT = 10.0

CEPH_CONF = """\
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
public addr = 127.0.0.1
ms bind msgr1 = false
# No cephx: nothing to keep secret on a throwaway cluster. RGW still asks the monitor for a secure session
# unless told that a crc one will do.
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc secure
keyring = /dev/null
run dir = {run}
admin socket = {run}/$name.asok
crash dir = {workdir}/crash
log file = {logs}/$name.log
mon cluster log file = default={logs}/ceph.$channel.log cluster={logs}/ceph.log
# One replica per OSD, few placement groups, no warnings about either.
osd pool default size = {size}
osd pool default min size = {min_size}
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
# The monitor stops serving when its disk is nearly full; a CI disk may well be.
mon data avail warn = 2
mon data avail crit = 1
# A killed OSD is refused connections at once, and its peers report it then; the grace bounds the other cases.
osd heartbeat interval = 1
osd heartbeat grace = 6
# Recovery at full speed (a zero sleep falls back to the per-device-kind sleeps, 0.1 s between ops on a "hdd"):
# the objects are in memory, and a test waits for it.
osd recovery sleep = 0
osd recovery sleep hdd = 0
osd recovery sleep ssd = 0
osd recovery sleep hybrid = 0
osd recovery max active = 8
osd max backfills = 8

[mon]
mon data = {workdir}/mon
# Proposals (every pool RGW creates) are batched for a second by default: RGW's start-up waited on a dozen of them.
paxos propose interval = 0.05
paxos min wait = 0.01

[osd]
osd data = {workdir}/osd-$id
osd objectstore = memstore
memstore device bytes = {memstore_bytes}

[{rgw_name}]
# Without TCP_NODELAY a small GET waits for the client's delayed ACK: ~45 ms per object instead of ~4.
rgw frontends = beast endpoint={rgw_address}:{rgw_port} tcp_nodelay=1
rgw data = {workdir}/rgw
"""
MEMSTORE_BYTES = 4 << 30
#: The Python that has Debian's ``python3-rados`` (a virtual environment's does not).
SYSTEM_PYTHON = "/usr/bin/python3"


def _tool(name: str) -> str | None:
    return shutil.which(name, path=environment_path())


def why_ceph_cannot_run() -> str | None:
    """Why this machine cannot run the Ceph RGW tests, or ``None`` when it can."""
    if not sys.platform.startswith("linux"):
        return "Ceph daemons run on Linux only"
    missing = [tool for tool in TOOLS if _tool(tool) is None]
    if missing:
        packages = " ".join(sorted({TOOLS[tool] for tool in missing}))
        return f"no {', '.join(missing)} on PATH (apt-get install {packages})"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 is not installed (it comes with s3fs)"
    if not can_bind("127.0.0.1"):
        return "cannot listen on 127.0.0.1"
    return None


@dataclass
class CephServer:
    """A running Ceph cluster with RGW; :meth:`stop` ends every daemon by PID and removes their files."""

    endpoint_url: str
    key: str
    secret: str = field(repr=False)
    log_dir: Path
    workdir: Path = field(repr=False)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    #: The namespace the daemons run in (``None``: this machine's own, on 127.0.0.1).
    host: CappedHost | None = field(default=None, repr=False)
    osds: int = 1

    @property
    def conf(self) -> Path:
        """The cluster's ``ceph.conf`` (for ``ceph -c``, ``radosgw-admin -c``)."""
        return self.workdir / "ceph.conf"

    @cached_property
    def s3(self) -> Any:
        """A boto3 S3 client with the test user's keys."""
        import boto3
        from botocore.config import Config

        config = Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            connect_timeout=REQUEST_TIMEOUT,
            read_timeout=30,
            retries={"max_attempts": 2, "mode": "standard"},
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
            config=config,
        )

    def create_bucket(self, name: str) -> None:
        """Create the bucket ``name``."""
        self.s3.create_bucket(Bucket=name)

    def delete_bucket(self, name: str) -> None:
        """Delete every object and unfinished upload of the bucket ``name``, then the bucket."""
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                self.s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for upload in page.get("Uploads", []):
                self.s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
        self.s3.delete_bucket(Bucket=name)

    def answers(self) -> bool:
        """Whether RGW answers an anonymous S3 request (the bucket listing)."""
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/", timeout=REQUEST_TIMEOUT) as response:
                return response.status == 200
        except OSError:
            return False

    def exited(self) -> str | None:
        """Which daemon has exited and how its log ends, or ``None`` while all run."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self.log_dir / f"{_daemon_name(name)}.log"
                if not log_tail(log):  # it failed before opening its log: its own output says why
                    log = self.log_dir / f"{name}.out"
                return f"{name} exited with status {process.returncode}; {log} ends with:{log_tail(log)}"
        return None

    def stop(self, *, keep_logs: bool = False) -> None:
        """Stop RGW, the OSD and the monitor by PID; remove their state (and logs unless ``keep_logs``)."""
        order = ["radosgw", *(f"ceph-osd.{n}" for n in range(self.osds)), "ceph-mon"]
        running = [self.processes[name] for name in order if name in self.processes]
        for process in running:  # all at once: each takes a moment to shut down
            if process.poll() is None:
                process.terminate()
        for process in running:
            stop_process(process)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    # -- faults ----------------------------------------------------------------------------------------------------

    def kill(self, process_name: str) -> None:
        """SIGKILL the daemon ``process_name`` (``ceph-osd.1``, ``radosgw``): a machine lost, not a shutdown."""
        process = self.processes.pop(process_name)
        process.kill()
        process.wait(timeout=10)

    def start_osd(self, osd_id: int) -> None:
        """Start OSD ``osd_id`` again on its folder (a memstore OSD comes back with the objects it held when last
        stopped cleanly; peering and recovery bring it up to date)."""
        command = ["ceph-osd", "-c", str(self.conf), "-i", str(osd_id), "-f"]
        self.processes[f"ceph-osd.{osd_id}"] = _daemon(self, command)

    def start_rgw(self) -> None:
        """Start RGW (again)."""
        self.processes["radosgw"] = _daemon(self, ["radosgw", "-c", str(self.conf), "-n", RGW_NAME, "-f"])

    def status(self) -> dict[str, Any]:
        """``ceph status`` as JSON."""
        return dict(json.loads(_run(self, ["ceph", "-c", str(self.conf), "status", "--format", "json"])))

    def osds_up(self) -> int:
        """OSDs the monitor counts as up."""
        return int(self.status()["osdmap"]["num_up_osds"])

    def pg_states(self) -> dict[str, int]:
        """How many placement groups are in each state (``{"active+clean": 48}``), from their primary OSDs."""
        script = str(Path(__file__).with_name("_ceph_pgs.py"))
        return dict(json.loads(_run(self, [SYSTEM_PYTHON, script, str(self.conf)])))

    def clean(self) -> bool:
        """Whether every placement group is ``active+clean`` (every object has all its copies)."""
        return set(self.pg_states()) == {"active+clean"}


def _daemon_name(process_name: str) -> str:
    if process_name.startswith("ceph-osd."):
        return f"osd.{process_name.rpartition('.')[2]}"
    return {"ceph-mon": f"mon.{MON_ID}", "radosgw": RGW_NAME}.get(process_name, process_name)


def start_ceph_server(*, timeout: float = START_TIMEOUT, osds: int = 1, host: CappedHost | None = None) -> CephServer:
    """Create and start a monitor, ``osds`` OSDs and RGW on 127.0.0.1 (inside ``host``'s namespace, RGW on its
    address, when given); return once a signed S3 round trip works.

    Raises
    ------
    ServerStartError
        A tool is missing or failed, a daemon exited, or RGW did not answer within ``timeout`` seconds; names the
        log folder, which is then kept.
    """
    deadline = time.monotonic() + timeout
    workdir = Path(tempfile.mkdtemp(prefix="datamount-ceph-"))
    log_dir = Path(tempfile.mkdtemp(prefix="datamount-ceph-logs-"))
    mon_port, rgw_port = free_port(), free_port()
    rgw_address = host.address if host is not None else "127.0.0.1"
    server = CephServer(
        endpoint_url=f"http://{rgw_address}:{rgw_port}",
        key=CEPH_TEST_KEY,
        secret=CEPH_TEST_SECRET,
        log_dir=log_dir,
        workdir=workdir,
        host=host,
        osds=osds,
    )
    try:
        fsid = _write_configuration(server, mon_port, rgw_address, rgw_port)
        _start_monitor(server, fsid, mon_port)
        for _ in range(osds):
            _start_osd(server)
        server.start_rgw()
        what = f"Ceph RGW at {server.endpoint_url} (logs: {log_dir})"
        wait_until(server.answers, timeout=_left(deadline), failed=server.exited, what=what)
        _create_user(server)
        _warm_up(server, deadline)
    except BaseException:
        server.stop(keep_logs=True)
        raise
    return server


def _create_user(server: CephServer) -> None:
    command = ["radosgw-admin", "-c", str(server.conf), "user", "create", f"--uid={TEST_USER}"]
    command += ["--display-name=datamount tests", f"--access-key={server.key}", f"--secret-key={server.secret}"]
    _run(server, command)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _write_configuration(server: CephServer, mon_port: int, rgw_address: str, rgw_port: int) -> str:
    """Write ``ceph.conf``; the new cluster's fsid."""
    workdir = server.workdir
    fsid = str(uuid.uuid4())
    for folder in ("run", "crash", "mon", "rgw", *(f"osd-{n}" for n in range(server.osds))):
        (workdir / folder).mkdir()
    text = CEPH_CONF.format(
        fsid=fsid,
        mon_port=mon_port,
        rgw_address=rgw_address,
        rgw_port=rgw_port,
        size=server.osds,
        min_size=max(server.osds - 1, 1),
        rgw_name=RGW_NAME,
        workdir=workdir,
        run=workdir / "run",
        logs=server.log_dir,
        memstore_bytes=MEMSTORE_BYTES,
    )
    server.conf.write_text(text, encoding="utf-8")
    return fsid


def _start_monitor(server: CephServer, fsid: str, mon_port: int) -> None:
    conf = str(server.conf)
    monmap = str(server.workdir / "monmap")
    address = f"[v2:127.0.0.1:{mon_port}]"
    _run(server, ["monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", MON_ID, address, monmap])
    _run(server, ["ceph-mon", "-c", conf, "-i", MON_ID, "--mkfs", "--monmap", monmap])
    server.processes["ceph-mon"] = _daemon(server, ["ceph-mon", "-c", conf, "-i", MON_ID, "-f"])


def _start_osd(server: CephServer) -> None:
    conf = str(server.conf)
    osd_uuid = str(uuid.uuid4())
    # `osd new` waits for the monitor to answer, so it doubles as the monitor's readiness check.
    osd_id = _run(server, ["ceph", "-c", conf, "--connect-timeout", f"{COMMAND_TIMEOUT:.0f}", "osd", "new", osd_uuid])
    osd_id = osd_id.strip()
    _run(server, ["ceph-osd", "-c", conf, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid])
    server.start_osd(int(osd_id))


def _daemon(server: CephServer, command: list[str]) -> subprocess.Popen[bytes]:
    name = command[0]
    full = [_tool(name) or name, *command[1:]]
    log = server.log_dir / f"{name}.out"
    if server.host is not None:
        return server.host.netns.start(full, log, cwd=server.workdir)
    return start_daemon(tied_to_parent(full), log, cwd=server.workdir)


def _run(server: CephServer, command: list[str]) -> str:
    """Run a Ceph tool to completion; its standard output. Raises :class:`ServerStartError` naming the logs."""
    full = [_tool(command[0]) or command[0], *command[1:]]
    if server.host is not None:
        full = server.host.netns.command(full)
    shown = " ".join(word for word in command if not word.startswith("--secret-key="))
    try:
        done = subprocess.run(full, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, cwd=server.workdir)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerStartError(f"`{shown}` failed: {exc} (logs: {server.log_dir})") from exc
    if done.returncode != 0:
        said = " | ".join(line for line in (done.stderr or done.stdout).splitlines()[-4:] if line.strip())
        raise ServerStartError(f"`{shown}` failed with status {done.returncode}: {said} (logs: {server.log_dir})")
    return done.stdout


def _warm_up(server: CephServer, deadline: float) -> None:
    """A signed bucket and object round trip: RGW creates its data pools on first use, which takes seconds."""
    from botocore.exceptions import BotoCoreError, ClientError

    while True:
        bucket = f"datamount-warm-up-{uuid.uuid4().hex[:8]}"
        try:
            server.create_bucket(bucket)
            server.s3.put_object(Bucket=bucket, Key="probe", Body=b"probe")
            if server.s3.get_object(Bucket=bucket, Key="probe")["Body"].read() != b"probe":
                raise ServerStartError(f"Ceph RGW at {server.endpoint_url} returned other bytes than it stored")
            server.delete_bucket(bucket)
            return
        except (BotoCoreError, ClientError) as exc:
            reason = server.exited()
            if reason is not None or _left(deadline) <= 0:
                raise ServerStartError(
                    f"Ceph RGW at {server.endpoint_url} did not complete an S3 round trip: {reason or exc} "
                    f"(logs: {server.log_dir})"
                ) from exc
            time.sleep(0.5)


# -- fixtures -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ceph_server() -> Iterator[CephServer]:
    """A one-node Ceph cluster with RGW on loopback for the whole session (skipped, with the reason, where the
    machine cannot run it)."""
    yield from session_server("Ceph RGW", why_ceph_cannot_run, start_ceph_server)


@pytest.fixture
def ceph_bucket(ceph_server: CephServer) -> Iterator[str]:
    """A fresh, empty bucket on RGW, deleted with its objects after the test."""
    name = f"datamount-{uuid.uuid4().hex[:16]}"
    ceph_server.create_bucket(name)
    yield name
    ceph_server.delete_bucket(name)


def ceph_test_store(server: CephServer, bucket: str) -> Store:
    """A store under a prefix of ``bucket`` on RGW, with the test user's keys (not the moto ones in the
    environment)."""
    url = f"s3://{bucket}/root"
    return open_store(url, endpoint_url=server.endpoint_url, key=server.key, secret=server.secret)


@pytest.fixture
def ceph_store(ceph_server: CephServer, ceph_bucket: str) -> Store:
    """A store under a prefix of a fresh bucket on RGW."""
    return ceph_test_store(ceph_server, ceph_bucket)


@pytest.fixture(scope="session")
def ceph_shared_store(ceph_server: CephServer) -> Store:
    """A store on a bucket of its own for the whole session, shared by the tests that only read it (it goes with
    the cluster)."""
    return ceph_test_store(ceph_server, shared_bucket(ceph_server))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.ceph", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    reason = why_ceph_cannot_run()
    if reason is not None:
        print(f"Ceph RGW cannot run here: {reason}", file=sys.stderr)
        return 1
    exit_on_sigterm()
    started = time.monotonic()
    server = start_ceph_server()
    print(
        f"{server.endpoint_url} with the keys CEPH_TEST_KEY/CEPH_TEST_SECRET of {__name__} "
        f"(up in {time.monotonic() - started:.1f} s, "
        f"conf {server.conf}, logs {server.log_dir}); Ctrl-C stops it",
        flush=True,
    )
    return serve_until_stopped(server)


if __name__ == "__main__":
    sys.exit(main())
