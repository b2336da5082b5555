"""``write_version``: a ``ray.data.Dataset`` stored as a new ``table`` version of a dataset, committed once.

NOTE [ Ray write tasks and the one commit ]
A write job must leave either one whole version or nothing, whatever Ray retries:

- Every shard goes into a pack folder of the job's own (``layout.new_pack_folder``); nothing there is read before a
  manifest names it. The driver holds the dataset's shared lock (``locks.writing``) from before the first task until
  the commit, so no removal deletes the folder meanwhile.
- Each write task numbers its rows (the shards' ``index`` column) from the numbers it claims by its task index from
  the job's numbering actor (``numbering.py``) on the driver's node; a task Ray runs again after its worker or node
  was lost claims the same numbers, and writes its shards under names of that attempt's own (``shard_key``'s run):
  no attempt ever writes over another's file.
- The driver commits the shards each task returned, one result per task index, ordered by their rows' numbers,
  after checking that those numbers run from 0 without a gap and removing every other file of the folder (what lost
  attempts wrote). The commit is ``catalog.commit``: the one exclusive manifest write.
- A job that fails commits nothing: the numbering actor stops taking claims, the driver waits (at most
  ``TASKS_WAIT_SECONDS``) for the tasks still writing, then removes the folder.

The version's rows are in the order the tasks claimed their numbers: a dataset of one block keeps its order, and
``ds.repartition(1)`` or a column to sort on gives one where order matters.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import ray
from ray.data import Dataset
from ray.data.block import Block, BlockAccessor
from ray.data.datasource import Datasink, WriteResult
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from datamount.datasets import catalog, layout, locks
from datamount.datasets.arrow_codec import ColumnEncoder, FixedShapeTensorEncoder, VariableShapeTensorEncoder
from datamount.datasets.manifest import Kind, Manifest, ShardEntry
from datamount.datasets.names import validate_name
from datamount.datasets.shard_writer import (
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_SHARD_BYTES,
    INDEX_COLUMN,
    ShardWriter,
    check_sizes,
    table_schema,
)
from datamount.ray.numbering import Claim, WriteTasks
from datamount.storage import Store, open_store

log = logging.getLogger(__name__)

#: How long a failed job waits for its tasks still writing before it removes their folder (a task lost with its
#: node never says it ended: what it wrote after the removal is left for the dataset's next removal to tidy).
TASKS_WAIT_SECONDS = 60.0
#: What messages about a column's values name as their source.
_SOURCE = "Ray Data"


@dataclass(frozen=True)
class TaskShards:
    """What one write task wrote: its task index, the numbers of its rows, their schema and its shards."""

    task: int
    claim: Claim
    schema: pa.Schema | None
    shards: list[ShardEntry]


def _tensor_encoder(field: pa.Field) -> ColumnEncoder | None:
    """The encoder that stores a column of Ray's tensor types as the Arrow tensor type ``reader()`` decodes into numpy
    arrays (``datasets/arrow_codec.py``); ``None`` for any other column."""
    from ray.data.extensions import ArrowTensorType, ArrowTensorTypeV2, ArrowVariableShapedTensorType

    arrow_type = field.type
    if isinstance(arrow_type, (ArrowTensorType, ArrowTensorTypeV2, ArrowVariableShapedTensorType)):
        value = arrow_type.value_type
        dtype = np.dtype(value.to_pandas_dtype())
        if isinstance(arrow_type, ArrowVariableShapedTensorType):
            return VariableShapeTensorEncoder(_SOURCE, field.name, dtype, arrow_type.ndim, value)
        return FixedShapeTensorEncoder(_SOURCE, field.name, dtype, tuple(arrow_type.shape), value)
    return None


def version_table(block: Block) -> pa.Table:
    """A block's rows as the version stores them: its columns, Ray's tensor types as Arrow's, without the schema's
    metadata (pandas'); refused where a column is named ``index`` or holds pickled Python objects."""
    table = BlockAccessor.for_block(block).to_arrow()
    if INDEX_COLUMN in table.column_names:
        raise ValueError(f"a column named {INDEX_COLUMN!r} is kept for the row number: rename it (ds.rename_columns)")
    fields, columns = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        if getattr(field.type, "extension_name", "") == "ray.data.arrow_pickled_object":
            raise ValueError(
                f"column {field.name!r} holds Python objects Ray pickled: store bytes, str, numbers, numpy arrays, or "
                "lists and dicts of those"
            )
        encoder = _tensor_encoder(field)
        if encoder is not None:
            field, column = encoder.field, encoder.encode(list(column.combine_chunks().to_numpy()), 0)
        fields.append(field)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def cast_to(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the job's columns (``schema``: the first task's), each cast to its type where it differs."""
    if table.column_names != schema.names:
        raise ValueError(f"a block has the columns {table.column_names}, another {schema.names}: give them all one")
    if table.schema == schema:
        return table
    columns = []
    for field, column in zip(schema, table.columns, strict=True):
        try:
            columns.append(column if column.type == field.type else column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(
                f"column {field.name!r} holds {column.type} in one block and {field.type} in another: cast it to one "
                f"type first ({exc})"
            ) from None
    return pa.Table.from_arrays(columns, schema=schema)


class VersionDatasink(Datasink[TaskShards]):
    """Writes a dataset's rows as a new ``table`` version of dataset ``name``; see :func:`write_version`, which holds
    the lock this needs, and NOTE [ Ray write tasks and the one commit ]."""

    def __init__(
        self,
        store: Store,
        name: str,
        *,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        source: str = _SOURCE,
    ) -> None:
        validate_name(name)
        check_sizes(shard_bytes, row_group_bytes)
        self.store = store
        self.name = name
        self.pack_folder = layout.new_pack_folder()
        self.shard_bytes = shard_bytes
        self.row_group_bytes = row_group_bytes
        self.source = source
        #: The committed version, once it is.
        self.manifest: Manifest | None = None
        self._tasks: Any = None  # the numbering actor (``WriteTasks``) on the driver's node

    def get_name(self) -> str:
        return f"Datamount({self.name})"

    @property
    def folder(self) -> str:
        """The store path of the job's pack folder."""
        return f"{layout.dataset_folder(self.name)}/{self.pack_folder}"

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        """On the driver, before the first task: the numbering actor, on this node. (``schema`` is not the rows':
        it is the write operator's input's, before the steps Ray fuses into the write tasks.)"""
        node = ray.get_runtime_context().get_node_id()
        numbering = ray.remote(num_cpus=0, max_restarts=0)(WriteTasks)
        self._tasks = numbering.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()

    def write(self, blocks: Iterable[Block], ctx: Any) -> TaskShards:
        """One task: its blocks' rows into shards of the job's folder, numbered from its claim."""
        tables = [version_table(block) for block in blocks]
        rows = sum(table.num_rows for table in tables)
        claimed = ray.get(self._tasks.claim.remote(ctx.task_idx, rows, tables[0].schema if tables else None))
        if claimed is None:  # the job failed meanwhile: nothing is written
            return TaskShards(ctx.task_idx, Claim(0, 0), None, [])
        claim, schema = claimed
        try:
            tables = [cast_to(table, schema) for table in tables]
            writer = ShardWriter(
                self.store,
                self.name,
                table_schema(schema),
                shard_bytes=self.shard_bytes,
                row_group_bytes=self.row_group_bytes,
                pack_folder=self.pack_folder,
                first_index=claim.first,
                run=f"{ctx.task_idx:05d}-{uuid.uuid4().hex[:8]}",
            )
            for table in tables:
                for batch in table.to_batches():
                    writer.add_batch(batch.columns)
            return TaskShards(ctx.task_idx, claim, schema, writer.close())
        finally:
            ray.get(self._tasks.ended.remote(ctx.task_idx))

    def on_write_complete(self, write_result: WriteResult[TaskShards]) -> None:
        """On the driver: the one commit (see the NOTE)."""
        results: dict[int, TaskShards] = {}
        for result in write_result.write_returns:
            results.setdefault(result.task, result)
        claims = ray.get(self._tasks.all_claims.remote()) if self._tasks is not None else {}
        done = sorted((result for result in results.values() if result.claim.rows), key=lambda r: r.claim.first)
        if {r.task: r.claim for r in done} != {task: claim for task, claim in claims.items() if claim.rows}:
            raise RuntimeError(f"the write tasks' results do not match the rows they claimed: {claims}")
        if not done:
            raise ValueError(f"the dataset has no rows: no version of {self.name} was made")
        expected = 0
        for result in done:
            if result.claim.first != expected:
                raise RuntimeError(f"rows {expected:,} to {result.claim.first - 1:,} of {self.name} were not written")
            if result.schema != done[0].schema:
                raise RuntimeError(f"write tasks wrote different columns: {done[0].schema} and {result.schema}")
            expected += result.claim.rows
        shards = [shard for result in done for shard in result.shards]
        named = {layout.shard_path(self.name, shard) for shard in shards}
        self.store.remove_many(sorted(path for path in self.store.list(self.folder) if path not in named))
        draft = Manifest(
            name=self.name,
            kind=Kind.TABLE,
            columns=list(done[0].schema.names),  # type: ignore[union-attr]  # a task with rows has columns
            rows=expected,
            shards=shards,
            source=self.source,
        )
        self.manifest = catalog.commit(self.store, draft)
        self._stop()

    def on_write_failed(self, error: Exception) -> None:
        self.discard()

    def discard(self) -> None:
        """Remove what the job wrote, unless it was committed (after the tasks still writing have ended, or
        :data:`TASKS_WAIT_SECONDS`); nothing is committed from now on. Done again, it does nothing."""
        if self.manifest is not None:
            return
        if self._tasks is not None:
            ray.get(self._tasks.close.remote())
            deadline = time.monotonic() + TASKS_WAIT_SECONDS
            pause = 0.01
            while (running := ray.get(self._tasks.still_running.remote())) and time.monotonic() < deadline:
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
            if running:
                log.warning("write tasks %s of %s did not end: what they write later is left in %s", running,
                            self.name, self.store.url_for(self.folder))  # fmt: skip
        self.store.remove(self.folder, recursive=True, missing_ok=True)
        self._stop()

    def _stop(self) -> None:
        if self._tasks is not None:
            ray.kill(self._tasks)
            self._tasks = None


def write_version(
    ds: Dataset,
    name: str,
    *,
    store: Store | str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    source: str = _SOURCE,
) -> Manifest:
    """Store the rows of ``ds`` as a new ``table`` version of dataset ``name``; return its manifest.

    Each write task writes its rows as Parquet shards (of about ``shard_bytes``, in row groups of about
    ``row_group_bytes``; columns with their Arrow types, Ray's tensors as Arrow tensors, plus ``index``) into a
    folder of the job's own; the version is committed once, when every task is done, and a job that fails commits
    nothing and leaves no shard. Ray's retries never duplicate rows (NOTE [ Ray write tasks and the one commit ]).
    ``reader(name)`` then yields each row's values in the dataset's column order. ``source`` names where the rows
    came from, for the manifest.

    A ``table`` version, whatever its columns: one of an image's bytes and its label reads back as the same tuples an
    image version would, but has no list (``datamount upload`` makes image versions from files).
    """
    target = store if isinstance(store, Store) else open_store(store)
    if not target.shareable:
        raise ValueError(f"Ray Data writes from its workers: {target.url} lives in this process only")
    sink = VersionDatasink(target, name, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes, source=source)
    with locks.writing(target, name, purpose="write from Ray Data"):
        try:
            ds.write_datasink(sink)
        except BaseException:
            sink.discard()  # what Ray does for an Exception (on_write_failed), and for an interrupt too
            raise
    if sink.manifest is None:
        raise RuntimeError(f"Ray Data ended the write of {name} without committing it")
    return sink.manifest
