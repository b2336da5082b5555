"""HDFS through the ``hdfs-native`` client (no JVM), or pyarrow's libhdfs binding where that is all there is.

``hdfs-native`` registers ``hdfs://`` and ``viewfs://`` with fsspec when installed (``datamount[hdfs]``);
otherwise fsspec falls back to pyarrow's ``HadoopFileSystem``, which needs ``libhdfs.so`` and a JVM.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable
from typing import IO, Any

from datamount.storage.errors import (
    BackendNotInstalledError,
    ObjectNotFoundError,
    StoreConfigError,
    StoreIOError,
    StoreUnreachableError,
)
from datamount.storage.redact import redact_url
from datamount.storage.store import UNREACHABLE_ERRNOS, Failure, Store, short_reason

INSTALL_HINT = "install the HDFS client: pip install 'datamount[hdfs]'"

#: Hadoop client settings that bound how long a dead namenode is retried (Hadoop's defaults add up to minutes).
FAILOVER_DEFAULTS = {
    "dfs.client.failover.max.attempts": "4",
    "dfs.client.failover.sleep.base.millis": "200",
    "dfs.client.failover.sleep.max.millis": "2000",
}
_OS_ERROR = re.compile(r"os error (\d+)")


def _hadoop_settings(options: dict[str, Any]) -> dict[str, str]:
    """A store's options as the Hadoop client settings they are (``dfs.replication=2``: dotted names, text values;
    ``-o dfs.replication=2`` arrives as an int), anything else refused before the client sees it."""
    unknown = sorted(key for key in options if "." not in key)
    if unknown:
        raise StoreConfigError(
            f"unknown HDFS store option {', '.join(unknown)}: an HDFS store's options are Hadoop client settings, "
            f"e.g. dfs.client.failover.max.attempts=4 or dfs.replication=2"
        )
    return {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in options.items()}


class HDFSStore(Store):
    """A folder on HDFS (``hdfs://namenode:port/path``); writes go to a temporary name and are renamed.

    Kerberos and the namenode address come from the Hadoop configuration the client reads (``HADOOP_CONF_DIR``),
    as for any HDFS client.
    """

    protocol = "hdfs"
    atomic_put = False
    exclusive_create = True
    needs_dirs = True
    default_max_requests = 8

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> Store:
        # fsspec's instance cache is emptied in forked children, which would drop an inherited client (see above).
        options = {**FAILOVER_DEFAULTS, "skip_instance_cache": True, **_hadoop_settings(options)}
        try:
            return super().from_url(url, name=name, **options)
        except (BackendNotInstalledError, OSError) as exc:
            # A missing hdfs-native is found before (``registry.py``); should fsspec still fall back to pyarrow's
            # libhdfs binding, its OSError is a hundred dlopen lines: one line says what to do.
            reason = short_reason(exc)
            raise BackendNotInstalledError(f"cannot open {redact_url(url)}: {reason}; {INSTALL_HINT}") from exc

    def _filesystem_after_fork(self, inherited: Any) -> Any:
        """hdfs-native's runtime does not survive fork(): no client works in a forked child, and dropping the
        inherited one hangs it. The child keeps it (as every store does) and is told to use spawn."""
        raise StoreIOError(
            f"cannot use {self.url} in a process forked from the one that opened it: the hdfs-native client "
            "does not survive fork(); start worker processes with the 'spawn' method (e.g. "
            "DataLoader(..., mp_context='spawn'), multiprocess_reader(..., start_method='spawn'))"
        )

    def _classify(self, exc: BaseException) -> Failure | None:
        # hdfs-native raises OSError with the errno only in its message ("Connection refused (os error 111)").
        found = _OS_ERROR.search(str(exc))
        code = int(found.group(1)) if found else getattr(exc, "errno", None)
        if code in UNREACHABLE_ERRNOS:
            return Failure(StoreUnreachableError, f"the namenode did not answer ({short_reason(exc)})")
        if code == errno.ENOENT:
            return Failure(ObjectNotFoundError, "not found")
        return None

    def remove_many(self, paths: Iterable[str]) -> None:
        # HDFS has no bulk delete, and hdfs-native's rm takes one path; deleting a missing file is not an error.
        full = [self.full_path(path) for path in paths]
        with self._errors(f"remove {len(full)} objects from", ""):
            for path in full:
                self.fs.rm(path)

    def _replace(self, tmp: str, full: str) -> None:
        # HDFS refuses to rename onto an existing file unless asked to; with overwrite it is one atomic rename.
        self.fs.mv(tmp, full, overwrite=True)

    def _create(self, full: str, data: bytes) -> None:
        # A rename onto an existing file fails on HDFS unless asked to overwrite: the namenode makes it exclusive.
        with self._temporary(full) as tmp:
            self.fs.pipe_file(tmp, data)
            try:
                self.fs.mv(tmp, full, overwrite=False)
            except BaseException:
                self.fs.rm(tmp)
                raise

    def _open_for_hashing(self, full: str) -> IO[bytes]:
        # hdfs-native 0.14 raises NotImplementedError on reads from files opened with a block size.
        return self.fs.open(full, "rb")
