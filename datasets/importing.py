"""``import_batches``: rows of any Arrow columns (a stream, say) stored as a new ``table`` version, in shards only."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from datamount.datasets import catalog, locks
from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.names import validate_name
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.shard_writer import (
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_SHARD_BYTES,
    INDEX_COLUMN,
    ShardWriter,
    table_schema,
)
from datamount.storage import Store, open_store


def import_batches(
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
    name: str,
    *,
    store: Store | str | None = None,
    source: str = "",
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    progress: Progress | None = None,
) -> Manifest:
    """Store ``batches`` (of ``schema``) as a new version of dataset ``name``; return its manifest.

    The rows are written straight into Parquet shards with their columns and Arrow types (tensor extension types
    included) plus ``index``, in row groups of about ``row_group_bytes``. The version is committed once
    ``batches`` is exhausted; if it raises, the shards written so far are removed and nothing is committed.
    ``source`` names where the rows came from, for the manifest (never a full local path).
    """
    validate_name(name)
    if INDEX_COLUMN in schema.names:
        raise ValueError(f"a column named {INDEX_COLUMN!r} is reserved for the row number")
    target = open_store(store)
    report = progress or Silent()
    with locks.writing(target, name, purpose="import"):
        writer = ShardWriter(
            target,
            name,
            table_schema(schema),
            shard_bytes=shard_bytes,
            row_group_bytes=row_group_bytes,
            progress=report,
        )
        report.start("import", items=0, size=0)
        try:
            for batch in batches:
                writer.add_batch(batch.columns)
            shards = writer.close()
        except BaseException:
            writer.abort()  # nothing was committed; the shards written so far would only take space
            raise
        report.finish()
        draft = Manifest(
            name=name, kind=Kind.TABLE, columns=list(schema.names), rows=writer.rows, shards=shards, source=source
        )
        return catalog.commit(target, draft)
