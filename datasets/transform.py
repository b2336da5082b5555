"""``map_version``: a version's rows through a function, written as a new packed dataset (``datamount pack NAME
--map module:fn --to NEW``), locally or as Ray tasks, resumable after a kill.

The source rows are cut into *units* (about a shard of input each); a unit's rows go through the function one by
one and become one Parquet shard of the new dataset, in a pack folder named after the source version, the function
and the sizes. A unit that is done leaves a marker beside its shard (its entry and schema), so a run that is killed
and started again writes only the units left. The function returns one row for each row it gets (a dict of column
values: str, bytes, numbers, numpy arrays), so the new version's row ``i`` comes from the source's row ``i``. Every
unit must give the same columns and types; the version is committed once every unit is written.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from datamount.datasets import catalog, layout, locks
from datamount.datasets.arrow_codec import ColumnEncoder, infer_encoder
from datamount.datasets.errors import MapFunctionError, StreamFormatError
from datamount.datasets.manifest import Kind, Manifest, ShardEntry
from datamount.datasets.names import validate_name
from datamount.datasets.progress import Progress, Silent
from datamount.datasets.rows import open_rows
from datamount.datasets.shard_writer import (
    DEFAULT_ROW_GROUP_BYTES,
    DEFAULT_SHARD_BYTES,
    INDEX_COLUMN,
    ShardWriter,
    check_sizes,
    table_schema,
)
from datamount.storage import Store, open_store

#: Rows encoded and written at a time within a unit (memory holds about this many outputs).
ROWS_AT_ONCE = 1024
#: A unit's shard is never cut: it is one shard however large.
_ONE_SHARD = 1 << 62

RowFunction = Callable[[tuple[Any, ...]], Mapping[str, Any]]


def load_function(reference: str) -> RowFunction:
    """The function ``module:name`` names (the current folder is searched first, as ``python -m`` does)."""
    module_name, colon, attribute = reference.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"--map {reference!r}: name a function as module:function (e.g. transforms:to_rgb)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--map {reference!r}: cannot import {module_name!r}: {exc}") from None
    function = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise ValueError(f"--map {reference!r}: {module_name} has no {attribute!r}")
    if not callable(function):
        raise ValueError(f"--map {reference!r}: {attribute} is not a function")
    return function  # type: ignore[return-value]


@dataclass(frozen=True)
class MapUnit:
    """Source rows ``[start, stop)``, written as shard ``number`` of pack folder ``folder`` of the new dataset."""

    number: int
    start: int
    stop: int
    folder: str


def plan_map(source: Manifest, function_name: str, shard_bytes: int, row_group_bytes: int) -> list[MapUnit]:
    """The units of a map: about ``shard_bytes`` of source data each, in a folder named after what decides them."""
    stored = source.total_bytes or 1
    per_unit = max(1, math.ceil(source.rows * shard_bytes / stored)) if source.rows else 1
    digest = hashlib.sha256(
        json.dumps(
            [
                source.ref,
                source.list_sha256,
                [s.sha256 for s in source.shards],
                function_name,
                shard_bytes,
                row_group_bytes,
            ]
        ).encode()
    ).hexdigest()[:16]
    folder = f"{layout.PACKS}/map-{digest}"
    return [
        MapUnit(number, start, min(start + per_unit, source.rows), folder)
        for number, start in enumerate(range(0, source.rows, per_unit))
    ]


def map_version(
    ref: str,
    function: RowFunction | str,
    name: str,
    *,
    store: Store | str | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    ray_address: str | None = None,
    use_ray: bool = False,
    progress: Progress | None = None,
) -> Manifest:
    """Store ``function(row)`` for every row of version ``ref`` as a new version of dataset ``name``.

    ``function`` is a callable or a ``"module:function"`` reference (what Ray workers import). It gets each row as
    the reader yields it and returns a dict ``{column: value}``, the same columns for every row. With ``use_ray``,
    units are Ray tasks (``ray_address`` or ``$RAY_ADDRESS``; a local Ray instance otherwise). Started again after a
    kill, only the units not yet written are; the version is committed once all are.

    Raises
    ------
    MapFunctionError
        The function raised on a row (named with its number), or returned something else than a dict of columns,
        or units gave different columns or types. Nothing is committed; the units written stay for the next run.
    """
    validate_name(name)
    check_sizes(shard_bytes, row_group_bytes)
    target = open_store(store)
    source = catalog.resolve(target, ref)
    label = function if isinstance(function, str) else f"{function.__module__}:{function.__qualname__}"
    with locks.writing(target, name, purpose="write"):
        units = plan_map(source, label, shard_bytes, row_group_bytes)
        report = progress or Silent()
        report.start("map", items=source.rows, size=0)
        if use_ray:
            results = _run_ray(target, source.ref, function, name, units, row_group_bytes, ray_address, report)
        else:
            call = load_function(function) if isinstance(function, str) else function
            results = []
            for unit in units:
                results.append(write_map_unit(target, source.ref, call, name, unit, row_group_bytes))
                report.advance(items=unit.stop - unit.start)
        report.finish()
        schemas = [result["schema"] for result in results]
        for unit, schema in zip(units, schemas, strict=True):
            if schema != schemas[0]:
                raise MapFunctionError(
                    f"unit {unit.number} (rows {unit.start}-{unit.stop - 1}) gave the columns {_describe(schema)} but "
                    f"unit 0 gave {_describe(schemas[0])}: return the same columns and types for every row"
                )
        shards = [ShardEntry(**result["entry"]) for result in results]
        columns = [field.name for field in _schema(schemas[0]) if field.name != INDEX_COLUMN] if schemas else []
        draft = Manifest(
            name=name,
            kind=Kind.TABLE,
            columns=columns,
            rows=source.rows,
            shards=shards,
            source=f"{source.ref} | {label}",
        )
        manifest = catalog.commit(target, draft)
        for unit in units:
            target.remove(_marker(name, unit), missing_ok=True)
        return manifest


def write_map_unit(
    store: Store, source_ref: str, function: RowFunction | str, name: str, unit: MapUnit, row_group_bytes: int
) -> dict[str, Any]:
    """Write one unit's shard (unless its marker says it is written already); its entry and schema."""
    marker = _marker(name, unit)
    if store.exists(marker):
        return dict(json.loads(store.read(marker)))
    call = load_function(function) if isinstance(function, str) else function
    rows = open_rows(store, catalog.resolve(store, source_ref)).rows(unit.start, unit.stop)
    outputs = (_output(call, row, number, source_ref) for number, row in enumerate(rows, start=unit.start))
    writer: ShardWriter | None = None
    encoders: list[ColumnEncoder] = []
    columns: list[str] = []
    try:
        for first, chunk in _chunks(outputs, unit.start):
            if writer is None:
                columns = list(chunk[0])
                encoders = [
                    infer_encoder(source_ref, column, [row.get(column) for row in chunk], variable_shape=False)
                    for column in columns
                ]
                schema = table_schema(pa.schema([encoder.field for encoder in encoders]))
                writer = ShardWriter(
                    store,
                    name,
                    schema,
                    shard_bytes=_ONE_SHARD,
                    row_group_bytes=row_group_bytes,
                    pack_folder=unit.folder,
                    first_shard=unit.number,
                    first_index=unit.start,
                )
            _check_columns(chunk, columns, first)
            writer.add_batch(
                [enc.encode([row[c] for row in chunk], first) for enc, c in zip(encoders, columns, strict=True)]
            )
        assert writer is not None, "a unit holds at least one row"
        (entry,) = writer.close()
    except StreamFormatError as exc:
        if writer is not None:
            writer.abort()
        raise MapFunctionError(f"the map function's output does not fit its column: {exc}") from None
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    result = {"entry": asdict(entry), "schema": base64.b64encode(writer.schema.serialize().to_pybytes()).decode()}
    store.write(marker, json.dumps(result).encode())
    return result


def _output(call: RowFunction, row: tuple[Any, ...], number: int, source_ref: str) -> Mapping[str, Any]:
    try:
        output = call(row)
    except Exception as exc:
        raise MapFunctionError(f"the map function failed on row {number} of {source_ref}: {exc!r}") from exc
    if not isinstance(output, Mapping) or not output or not all(isinstance(key, str) for key in output):
        raise MapFunctionError(
            f"the map function returned {type(output).__name__} for row {number} of {source_ref}: return a dict "
            "{column: value} (one row for each row)"
        )
    if INDEX_COLUMN in output:
        raise MapFunctionError(f"row {number}: the column name {INDEX_COLUMN!r} is kept for the row number")
    return output


def _chunks(outputs: Iterator[Mapping[str, Any]], start: int) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    chunk: list[Mapping[str, Any]] = []
    for output in outputs:
        chunk.append(output)
        if len(chunk) == ROWS_AT_ONCE:
            yield start, chunk
            start, chunk = start + len(chunk), []
    if chunk:
        yield start, chunk


def _check_columns(chunk: list[Mapping[str, Any]], columns: list[str], first: int) -> None:
    for offset, row in enumerate(chunk):
        if list(row) != columns:
            raise MapFunctionError(
                f"the map function returned the columns {list(row)} for row {first + offset} and {columns} before: "
                "return the same columns, in the same order, for every row"
            )


def _marker(name: str, unit: MapUnit) -> str:
    return f"{layout.dataset_folder(name)}/{layout.shard_marker(unit.folder, unit.number)}"


def _schema(encoded: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))


def _describe(encoded: str) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in _schema(encoded) if f.name != INDEX_COLUMN)


def _run_ray(
    store: Store,
    source_ref: str,
    function: RowFunction | str,
    name: str,
    units: list[MapUnit],
    row_group_bytes: int,
    address: str | None,
    report: Progress,
) -> list[dict[str, Any]]:
    """Each unit as a Ray task; their results in the units' order. The first failure cancels the rest."""
    from datamount.datasets.pack_ray import TASK_RETRIES
    from datamount.datasets.ray_cluster import connect_ray, gather

    if not store.shareable:
        raise ValueError(f"a Ray map needs a store every Ray worker can reach; {store.url} lives in this process only")
    ray, connected_here = connect_ray(address, start_local=True)
    try:
        task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES)(write_map_unit)
        shared = ray.put(store)
        calls = [task.remote(shared, source_ref, function, name, unit, row_group_bytes) for unit in units]
        return gather(ray, calls, lambda number: report.advance(items=units[number].stop - units[number].start))
    finally:
        if connected_here:
            ray.shutdown()
