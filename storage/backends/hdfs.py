"""HDFS through the ``hdfs-native`` client (no JVM), or pyarrow's libhdfs binding where that is all there is.

``hdfs-native`` registers ``hdfs://`` and ``viewfs://`` with fsspec when installed (``datamount[hdfs]``);
otherwise fsspec falls back to pyarrow's ``HadoopFileSystem``, which needs ``libhdfs.so`` and a JVM.
"""

from __future__ import annotations

import errno
import re
from typing import IO, Any

from datamount.storage.errors import BackendNotInstalledError, ObjectNotFoundError, StoreUnreachableError
from datamount.storage.redact import redact_url
from datamount.storage.store import Failure, Store, short_reason

INSTALL_HINT = "install the HDFS client: pip install 'datamount[hdfs]'"

#: Hadoop client settings that bound how long a dead namenode is retried (Hadoop's defaults add up to minutes).
FAILOVER_DEFAULTS = {
    "dfs.client.failover.max.attempts": "4",
    "dfs.client.failover.sleep.base.millis": "200",
    "dfs.client.failover.sleep.max.millis": "2000",
}
_OS_ERROR = re.compile(r"os error (\d+)")
_UNREACHABLE = {errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT}


class HDFSStore(Store):
    """A folder on HDFS (``hdfs://namenode:port/path``); writes go to a temporary name and are renamed.

    Kerberos and the namenode address come from the Hadoop configuration the client reads (``HADOOP_CONF_DIR``),
    as for any HDFS client.
    """

    protocol = "hdfs"
    atomic_put = False
    needs_dirs = True
    default_max_requests = 8

    @classmethod
    def from_url(cls, url: str, *, name: str | None = None, **options: Any) -> Store:
        options = {**FAILOVER_DEFAULTS, **options}
        try:
            return super().from_url(url, name=name, **options)
        except (BackendNotInstalledError, OSError) as exc:
            # Without hdfs-native, fsspec tries pyarrow's libhdfs binding, which fails with an OSError here.
            raise BackendNotInstalledError(f"cannot open {redact_url(url)}: {exc}; {INSTALL_HINT}") from exc

    def _classify(self, exc: BaseException) -> Failure | None:
        # hdfs-native raises OSError with the errno only in its message ("Connection refused (os error 111)").
        found = _OS_ERROR.search(str(exc))
        code = int(found.group(1)) if found else getattr(exc, "errno", None)
        if code in _UNREACHABLE:
            return Failure(StoreUnreachableError, f"the namenode did not answer ({short_reason(exc)})")
        if code == errno.ENOENT:
            return Failure(ObjectNotFoundError, "not found")
        return None

    def _open_for_hashing(self, full: str) -> IO[bytes]:
        # hdfs-native 0.14 raises NotImplementedError on reads from files opened with a block size.
        return self.fs.open(full, "rb")
