"""Ray Data for datamount versions: :func:`read_version` reads a version as a ``ray.data.Dataset``, every byte checked
as ``reader()`` checks it; :func:`write_version` stores a ``Dataset`` as a new version, committed once, whole.

Reading (``_read.py``): :class:`VersionDatasource`'s read tasks are runs of the version's spans (a packed version's
row groups, an unpacked one's runs of list lines), read through the version's row source
(:func:`~datamount.datasets.rows.open_rows`) as Arrow tables (``RowSource.tables``): the checks are the source's own.
Writing (``_write.py``): each write task writes Parquet shards with the project's one shard writer into a pack folder
of the job's own; the driver commits the version once every task is done (``catalog.commit``, under the dataset's
shared lock), or removes the folder when the job fails. ``docs/ray.md`` has the rules and what is checked. Importing
this module imports Ray (``pip install 'datamount[ray]'``); nothing else in datamount does at import.
"""

from __future__ import annotations

try:
    import ray.data  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without Ray
    raise ImportError(
        f"datamount.ray needs Ray Data, which is not installed ({exc.name} is missing): pip install 'datamount[ray]'"
    ) from exc

from datamount.ray._read import VersionDatasource, read_version
from datamount.ray._write import write_version

__all__ = ["VersionDatasource", "read_version", "write_version"]
