"""Dataset versions by URL: ``datamount://<store>/<name>@<version>/<path>`` for every tool that opens fsspec URLs
(pandas, pyarrow, DuckDB, polars, Hugging Face ``datasets``). Registered through the ``fsspec.specs`` entry point,
so that ``fsspec.filesystem("datamount")`` works once datamount is installed. See ``docs/urls.md``.

=====================  ===============================================================================
module                 job
=====================  ===============================================================================
:mod:`.urls`           the URL grammar
:mod:`.filesystem`     the read-only filesystem over a version's tree (:mod:`datamount.datasets.tree`)
:mod:`.pinned`         versions carried to other processes by their manifest's sha256
:mod:`.shard_copies`   shards' blocks read once per filesystem into checked private copies
:mod:`._quiet_exit`    an exit that waits for reads under way in other threads (pyarrow's)
=====================  ===============================================================================
"""

from datamount.urlfs.filesystem import DatamountFile, DatamountFileSystem
from datamount.urlfs.urls import VersionPath, parse

__all__ = ["DatamountFile", "DatamountFileSystem", "VersionPath", "parse"]
