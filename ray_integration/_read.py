"""``read_version``: a version as a ``ray.data.Dataset``, read through its row source.

A read task is a run of consecutive spans of the version (of its split): a packed version's row groups, an unpacked
one's runs of list lines (objects read with many requests in flight, as a pass reads them). Each span becomes one
Arrow block, read and checked by ``RowSource.tables`` exactly as ``reader()`` reads and checks it; a task yields its
spans' blocks in order, so with Ray Data's ``preserve_order`` the dataset's rows are the version's, in list order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import ray
from ray.data import Dataset, read_datasource
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from datamount.datasets import catalog
from datamount.datasets.manifest import Kind
from datamount.datasets.rows import Piece, RowSource, open_rows, removed_or_missing, selected_columns
from datamount.datasets.rows.chain import close_iterator
from datamount.datasets.shard_writer import list_fields
from datamount.readers.stats import stored_bytes_per_row
from datamount.storage import ObjectNotFoundError, Store, arguments, open_store

#: The stored bytes a read task reads at least, where the cluster's CPUs are busy all the same and its number is not
#: asked for (``override_num_blocks``): Ray asks for 200 tasks or more, and each costs its processes CPU to schedule,
#: ship and start (``benchmarks/bench_ray.py``, 4,000 x 110 KB in 55 row groups on 2 CPUs, a second pass: a task
#: per row group took 0.72 CPU-s per 1,000 rows, 6 tasks 0.52, ``read_parquet`` 0.31).
MIN_TASK_BYTES = 64 << 20


class VersionDatasource(Datasource):
    """The rows of dataset version ``ref`` (``name`` or ``name@N``, resolved when this is made: the version read is
    fixed, whatever is committed later) for ``ray.data.read_datasource``; see :func:`read_version`. A read task
    reads at least ``min_task_bytes`` of stored bytes, unless the cluster has more CPUs than such tasks."""

    def __init__(
        self,
        ref: str,
        *,
        store: Store | str | None = None,
        columns: Sequence[str] | None = None,
        split: str | None = None,
        min_task_bytes: int = MIN_TASK_BYTES,
    ) -> None:
        super().__init__()
        self.min_task_bytes = arguments.whole_number(min_task_bytes, "min_task_bytes", minimum=0)
        target = store if isinstance(store, Store) else open_store(store)
        if not target.shareable:
            raise ValueError(f"Ray Data reads from its workers: {target.url} lives in this process only")
        manifest = catalog.resolve(target, ref)
        chosen = selected_columns(manifest, columns)
        packed = bool(manifest.shards)
        #: The version's row source: only the columns asked for are read from a packed version's shards.
        self.source: RowSource = open_rows(target, manifest, split=split, columns=columns if packed else None)
        self.columns = chosen
        # An unpacked version's rows are read whole: the columns not asked for are left out of each block.
        self._project = None if packed or chosen == manifest.columns else chosen
        self._bytes_per_row = stored_bytes_per_row(manifest, packed=packed)
        self._schema = None
        if manifest.kind is not Kind.TABLE:  # a table's types are in its shards' footers
            fields = {field.name: field for field in list_fields(manifest.kind, manifest.columns)}
            self._schema = pa.schema([fields[name] for name in chosen])

    def get_name(self) -> str:
        return f"Datamount({self.source.manifest.ref})"

    def estimate_inmemory_data_size(self) -> int | None:
        return int(len(self.source) * self._bytes_per_row)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """At most ``parallelism`` tasks (fewer where each would read less than ``min_task_bytes``, but no fewer than
        the cluster's CPUs), each a run of consecutive spans holding about as many rows as the others."""
        count = parallelism
        if self.min_task_bytes:
            large = int(len(self.source) * self._bytes_per_row // self.min_task_bytes)
            count = min(parallelism, max(large, int(ray.cluster_resources().get("CPU", 1)), 1))
        tasks = []
        for spans in _runs(self.source.spans(), count):
            rows = sum(len(span) for span in spans)
            metadata = BlockMetadata(
                num_rows=rows, size_bytes=int(rows * self._bytes_per_row), exec_stats=None, input_files=None
            )
            read = functools.partial(_read_spans, self.source, spans, self._project)
            tasks.append(ReadTask(read, metadata, schema=self._schema, per_task_row_limit=per_task_row_limit))
        return tasks


def _runs(spans: list[range], count: int) -> list[list[range]]:
    """``spans`` cut into at most ``count`` runs of consecutive spans, each ending where its share of the rows does
    (a run holds at least one span)."""
    rows = sum(len(span) for span in spans)
    count = max(1, min(count, len(spans)))
    runs: list[list[range]] = []
    taken = 0
    for span in spans:
        if not runs or (taken >= rows * len(runs) / count and len(runs) < count):
            runs.append([])
        runs[-1].append(span)
        taken += len(span)
    return runs


def _read_spans(source: RowSource, spans: list[range], project: list[str] | None) -> Iterator[pa.Table]:
    """One Arrow block per span, checked as a pass checks it; a part of the version not found is explained as
    ``reader()`` explains it (the version removed since it was opened, or what puts the part back)."""
    tables = source.tables(Piece(span, span) for span in spans)
    try:
        for table in tables:
            yield table if project is None else table.select(project)
    except ObjectNotFoundError as missing:
        explanation = removed_or_missing(source.store, source.manifest, missing)
        if explanation is missing:
            raise
        raise explanation from missing
    finally:
        close_iterator(tables)


def read_version(
    ref: str,
    *,
    store: Store | str | None = None,
    columns: list[str] | None = None,
    split: str | None = None,
    override_num_blocks: int | None = None,
) -> Dataset:
    """Dataset version ``ref`` (``name`` or ``name@N``) as a ``ray.data.Dataset``.

    Its rows hold the version's columns, named and ordered as ``reader()`` yields them (an image's bytes as
    ``bytes``, text as ``str``, a table's Arrow values, tensors as numpy arrays), every byte checked as ``reader()``
    checks it; a damaged one fails the job with :class:`~datamount.storage.IntegrityError`. Read tasks are runs of
    row groups (a packed version) or of list lines with their objects (an unpacked one); set
    ``ray.data.DataContext.get_current().execution_options.preserve_order`` for the rows in list order.

    Parameters
    ----------
    ref
        ``name`` (the latest version now) or ``name@N``.
    store
        A :class:`~datamount.storage.Store`, a URL, a path or a profile name every Ray worker reaches; the default
        store if None.
    columns
        Only these columns, in this order. From a packed version only their column chunks are read, checked by
        their pages' CRC-32 (a row group's xxh3-64 covers all its columns); an unpacked version's rows are read
        whole.
    split
        Only this split's rows (``upload --split``, the public datasets' splits).
    override_num_blocks
        How many read tasks to cut the version into (at most one per span); if None, Ray Data's choice, but no more
        than the cluster's CPUs where a task would then read less than :data:`MIN_TASK_BYTES` of stored bytes.
    """
    if override_num_blocks is not None:
        override_num_blocks = arguments.whole_number(override_num_blocks, "override_num_blocks", minimum=1)
    smallest = MIN_TASK_BYTES if override_num_blocks is None else 0
    datasource = VersionDatasource(ref, store=store, columns=columns, split=split, min_task_bytes=smallest)
    return read_datasource(datasource, override_num_blocks=override_num_blocks)
