"""A one-monitor, one-OSD Ceph cluster with the RADOS Gateway (S3) on loopback, and the ``ceph_server`` /
``ceph_store`` fixtures.

Built by hand as Ceph's own ``vstart.sh`` does: ``monmaptool`` and ``ceph-mon --mkfs`` for the monitor, ``ceph osd
new`` and ``ceph-osd --mkfs`` for an OSD on ``memstore`` (objects live in the OSD's memory), then ``radosgw`` with
the beast frontend on 127.0.0.1 and a user from ``radosgw-admin user create`` with known test keys. Authentication
between the daemons is off, pools have one replica, and every file — configuration, monitor store, logs, sockets —
is in temporary folders, so the machine's own Ceph state is never read or changed. Needs the Debian packages
``ceph-mon``, ``ceph-osd`` and ``radosgw`` (Ceph Pacific, 16.2).

``python -m tests.servers.ceph`` runs a cluster until interrupted and prints its endpoint and keys.
"""

from __future__ import annotations

import argparse
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
# One OSD: one replica, few placement groups, no warnings about either.
osd pool default size = 1
osd pool default min size = 1
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

[mon]
mon data = {workdir}/mon
# Proposals (every pool RGW creates) are batched for a second by default: RGW's start-up waited on a dozen of them.
paxos propose interval = 0.05
paxos min wait = 0.01

[osd]
osd data = {workdir}/osd
osd objectstore = memstore
memstore device bytes = {memstore_bytes}

[{rgw_name}]
# Without TCP_NODELAY a small GET waits for the client's delayed ACK: ~45 ms per object instead of ~4.
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw data = {workdir}/rgw
"""
MEMSTORE_BYTES = 4 << 30


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
        running = [self.processes[name] for name in ("radosgw", "ceph-osd", "ceph-mon") if name in self.processes]
        for process in running:  # all at once: each takes a moment to shut down
            if process.poll() is None:
                process.terminate()
        for process in running:
            stop_process(process)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def _daemon_name(process_name: str) -> str:
    return {"ceph-mon": f"mon.{MON_ID}", "ceph-osd": "osd.0", "radosgw": RGW_NAME}.get(process_name, process_name)


def start_ceph_server(*, timeout: float = START_TIMEOUT) -> CephServer:
    """Create and start a monitor, an OSD and RGW on 127.0.0.1; return once a signed S3 round trip works.

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
    server = CephServer(
        endpoint_url=f"http://127.0.0.1:{rgw_port}",
        key=CEPH_TEST_KEY,
        secret=CEPH_TEST_SECRET,
        log_dir=log_dir,
        workdir=workdir,
    )
    try:
        fsid = _write_configuration(server, mon_port, rgw_port)
        _start_monitor(server, fsid, mon_port)
        _start_osd(server)
        server.processes["radosgw"] = _daemon(server, ["radosgw", "-c", str(server.conf), "-n", RGW_NAME, "-f"])
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


def _write_configuration(server: CephServer, mon_port: int, rgw_port: int) -> str:
    """Write ``ceph.conf``; the new cluster's fsid."""
    workdir = server.workdir
    fsid = str(uuid.uuid4())
    for folder in ("run", "crash", "mon", "osd", "rgw"):
        (workdir / folder).mkdir()
    text = CEPH_CONF.format(
        fsid=fsid,
        mon_port=mon_port,
        rgw_port=rgw_port,
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
    server.processes["ceph-osd"] = _daemon(server, ["ceph-osd", "-c", conf, "-i", osd_id, "-f"])


def _daemon(server: CephServer, command: list[str]) -> subprocess.Popen[bytes]:
    name = command[0]
    full = [_tool(name) or name, *command[1:]]
    return start_daemon(tied_to_parent(full), server.log_dir / f"{name}.out", cwd=server.workdir)


def _run(server: CephServer, command: list[str]) -> str:
    """Run a Ceph tool to completion; its standard output. Raises :class:`ServerStartError` naming the logs."""
    full = [_tool(command[0]) or command[0], *command[1:]]
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
