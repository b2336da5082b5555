"""``import_stream``: a sample stream (Arrow IPC, e.g. from a pipe) stored as a new, packed dataset version."""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.metadata import version as package_version

import pyarrow as pa

from datamount.datasets import catalog
from datamount.datasets.manifest import Manifest, now_utc
from datamount.datasets.names import validate_name
from datamount.datasets.pack import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, FORMAT_KEY, FORMAT_VALUE, write_shards
from datamount.datasets.progress import Progress, Silent
from datamount.readers.errors import StreamFormatError
from datamount.readers.stream import StreamTarget, read_from
from datamount.storage import Store, open_store

#: The kind of a dataset made from a stream: rows of any Arrow types, kept only as Parquet shards.
TABLE_KIND = "table"


def import_stream(
    source: StreamTarget,
    name: str,
    *,
    store: Store | str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    progress: Progress | None = None,
) -> Manifest:
    """Store the stream read from ``source`` as a new version of dataset ``name``; return its manifest.

    The rows are written straight into Parquet shards with the stream's columns and types (numpy arrays stay tensors)
    plus ``index``. The version exists only once the whole stream has been read and ended properly: a stream that is
    cut short, corrupt or not finished by its writer raises :class:`StreamFormatError` and commits nothing.
    """
    validate_name(name)
    target = open_store(store)
    report = progress or Silent()
    with read_from(source) as stream:
        if "index" in stream.columns:
            raise StreamFormatError(f"{stream.source}: a column named 'index' is reserved for the row number")
        existing = catalog.versions(target, name)
        version = existing[-1] + 1 if existing else 1
        schema = stream.schema.append(pa.field("index", pa.int64()))
        schema = schema.with_metadata({**(schema.metadata or {}), FORMAT_KEY: FORMAT_VALUE})
        report.start("import", items=0, size=0)
        try:
            groups = _indexed(stream.record_batches(), schema, row_group_bytes)
            folder = catalog.dataset_folder(name)
            shards = list(write_shards(target, folder, version, groups, schema, shard_bytes, report))
        except BaseException:
            # Nothing was committed; the shards written so far would only take space.
            target.remove(f"{catalog.dataset_folder(name)}/packs/{version}", recursive=True, missing_ok=True)
            raise
        report.finish()
        manifest = Manifest(
            name=name,
            version=version,
            kind=TABLE_KIND,
            columns=list(stream.columns),
            rows=sum(shard.rows for shard in shards),
            files=[],
            list_sha256="",
            list_size=0,
            source=stream.source if stream.source in ("<stdin>", "-") else os.path.basename(stream.source),
            created=now_utc(),
            datamount_version=package_version("datamount"),
            shards=shards,
        )
    target.write(catalog.manifest_path(name, version), manifest.to_json())
    return manifest


def _indexed(batches: Iterator[pa.RecordBatch], schema: pa.Schema, row_group_bytes: int) -> Iterator[pa.RecordBatch]:
    """The stream's batches regrouped into row groups, each with its rows' ``index``."""
    rows = 0
    for group in _row_groups(batches, row_group_bytes):
        index = pa.array(range(rows, rows + group.num_rows), pa.int64())
        yield pa.RecordBatch.from_arrays([*group.columns, index], schema=schema)
        rows += group.num_rows


def _row_groups(batches: Iterator[pa.RecordBatch], row_group_bytes: int) -> Iterator[pa.RecordBatch]:
    """The stream's batches regrouped into row groups of about ``row_group_bytes``."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        pending.append(batch)
        size += batch.nbytes
        if size >= row_group_bytes:
            yield from pa.Table.from_batches(pending).combine_chunks().to_batches()
            pending, size = [], 0
    if pending:
        yield from pa.Table.from_batches(pending).combine_chunks().to_batches()
