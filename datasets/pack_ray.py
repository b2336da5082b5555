"""``pack_ray``: :func:`~datamount.datasets.pack.pack` with its shards written in parallel as Ray tasks.

The shards are planned here, exactly as a local pack plans them; each Ray task writes one shard straight to the
store, and the manifest is committed here once all are written. The result is the local pack's, byte for byte.
Needs Ray (``pip install 'datamount[ray]'``) and a store every Ray node reaches (not ``memory://``).
"""

from __future__ import annotations

from typing import Any

from datamount.datasets import catalog, locks
from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.names import parse_ref
from datamount.datasets.pack import PackUnit, plan_pack, write_unit, written_and_recorded
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.ray_cluster import connect_ray, gather
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, check_sizes
from datamount.storage import Store, open_store

#: Times Ray runs a shard's task again after its worker died (the write is atomic, so a retry is safe).
TASK_RETRIES = 3


def pack_ray(
    ref: str,
    *,
    store: Store | str | None = None,
    address: str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    progress: Progress | None = None,
) -> Manifest:
    """Pack dataset version ``ref`` (``name`` or ``name@N``) with one Ray task per shard; return the new manifest.

    ``address`` (else ``$RAY_ADDRESS``) names the Ray cluster; with neither, the process joins a cluster ``ray start``
    runs on this machine or starts a Ray instance of its own for the pack. A process already connected to Ray uses
    that connection. Packing a packed version again is a no-op.
    """
    check_sizes(shard_bytes, row_group_bytes)
    target = open_store(store)
    if not target.shareable:
        raise ValueError(
            f"a Ray pack needs a store every Ray worker can reach; {target.url} lives in this process only"
        )
    with locks.writing(target, parse_ref(ref).name, purpose="pack"):
        manifest = catalog.resolve(target, ref, public_fallback=False)
        if manifest.shards:
            return manifest
        units = plan_pack(target, manifest, shard_bytes, row_group_bytes)
        report = progress or Silent()

        def write() -> list[ShardEntry]:
            ray, connected_here = connect_ray(address, start_local=True)
            try:
                report.start("pack", items=manifest.rows, size=manifest.files_size)
                shards = _run(ray, target, manifest, units, report)
                report.finish()
                return shards
            finally:
                if connected_here:
                    ray.shutdown()

        return written_and_recorded(target, manifest, units, write)


def _run(ray: Any, store: Store, manifest: Manifest, units: list[PackUnit], report: Progress) -> list[ShardEntry]:
    """Write every unit as a Ray task; the shards' entries in the units' order. The first failure cancels the rest
    and is raised as the task raised it."""
    task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(write_unit)
    shared_store, shared_manifest = ray.put(store), ray.put(manifest)

    def done(number: int) -> None:
        unit = units[number]
        report.advance(items=unit.stop - unit.start, size=unit.files_size)

    return gather(ray, [task.remote(shared_store, shared_manifest, unit) for unit in units], done)
