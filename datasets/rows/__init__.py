"""Reading a version's rows whatever its layout: the :class:`RowSource` protocol and one implementation per layout.

=================  ==========================================================================
layout             row source
=================  ==========================================================================
packed             :class:`ShardRows` (Parquet shards)
unpacked image     :class:`ObjectRows` (the list, and one object per file)
unpacked text      :class:`ListRows` (the list alone)
a split of any     :class:`SplitRows` (a range of rows), :class:`RowSplitRows` (rows by hash)
=================  ==========================================================================

:func:`open_rows` picks the one a version needs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from datamount.datasets.manifest import Kind, Manifest
from datamount.datasets.rows.listed import (
    ListRows,
    ObjectLocation,
    ObjectRows,
    check_object,
    damaged_object,
    object_location,
    object_locations,
    parse_lines,
    read_lines,
)
from datamount.datasets.rows.missing import (
    missing_list,
    missing_object,
    missing_shard,
    objects_read,
    removed_or_missing,
)
from datamount.datasets.rows.shards import ShardRows, decoded_rows
from datamount.datasets.rows.source import DEFAULT_ROWS_PER_SPAN, Piece, Row, RowSource, closing, selected_columns
from datamount.datasets.rows.split import RowSplitRows, SplitRows, open_split, split_bounds
from datamount.storage import Store
from datamount.storage.cache import CACHE_DIR_ENV, ContentCache
from datamount.storage.store import DEFAULT_MAX_BYTES_IN_FLIGHT

__all__ = [
    "DEFAULT_ROWS_PER_SPAN",
    "ListRows",
    "ObjectLocation",
    "ObjectRows",
    "Piece",
    "Row",
    "RowSource",
    "RowSplitRows",
    "ShardRows",
    "SplitRows",
    "check_object",
    "closing",
    "damaged_object",
    "decoded_rows",
    "missing_list",
    "missing_object",
    "missing_shard",
    "object_location",
    "object_locations",
    "objects_read",
    "open_rows",
    "parse_lines",
    "read_lines",
    "removed_or_missing",
    "selected_columns",
    "shard_cache",
    "split_bounds",
]


def open_rows(
    store: Store,
    manifest: Manifest,
    *,
    split: str | None = None,
    use_shards: bool = True,
    cache: ContentCache | str | bool | None = None,
    max_requests: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
    rows_per_span: int = DEFAULT_ROWS_PER_SPAN,
    verify: bool = True,
    zero_copy: bool = False,
    columns: Sequence[str] | None = None,
) -> RowSource:
    """The row source of ``manifest``'s version (of one of its splits, with ``split``).

    A packed version is read from its shards unless ``use_shards`` is False; ``cache`` keeps remote shards in a local
    cache (:func:`shard_cache`). An unpacked version is read from its list (``rows_per_span`` lines per span) and,
    for images, its objects (``max_requests`` reads and ``max_bytes`` bytes in flight at most), each checked against
    its size and, with ``verify`` (the default), its xxh3-64 (or sha256). Packed rows are checked, with ``verify``,
    by the xxh3-64 of each row group (or, in shards packed before format 5, the Parquet pages' checksums) and, when a
    shard is fetched whole, by its sha256. With ``zero_copy``, a packed version's binary values are read-only
    memoryviews into the decoded row group (:class:`ShardRows`). With ``columns``, a packed version's rows hold only
    those of its columns, in that order, and only their column chunks are read (checked by their pages' CRC-32); an
    unpacked version's rows are read whole, so it takes none (``ValueError``).
    """
    source: RowSource
    if use_shards and manifest.shards:
        cached = shard_cache(cache)
        source = ShardRows(store, manifest, cache=cached, zero_copy=zero_copy, select=columns, verify=verify)
    elif columns is not None:
        raise ValueError(f"{manifest.ref} is not packed: its rows are read whole (columns= selects a packed one's)")
    elif not manifest.has_list or not manifest.objects:
        raise ValueError(f"{manifest.ref} is stored only as Parquet shards; read it with use_shards=True")
    elif manifest.kind is Kind.IMAGE:
        source = ObjectRows(
            store,
            manifest,
            rows_per_span=rows_per_span,
            max_requests=max_requests,
            max_bytes=max_bytes,
            verify=verify,
        )
    else:
        source = ListRows(store, manifest, rows_per_span=rows_per_span)
    return source if split is None else open_split(source, split)


def shard_cache(option: ContentCache | str | os.PathLike[str] | bool | None) -> ContentCache | None:
    """The shard cache a reader uses: given, at a path, the default one (``True``), or from ``$DATAMOUNT_CACHE_DIR``
    when not given (``None``)."""
    if isinstance(option, ContentCache):
        return option
    if option is True:
        return ContentCache()
    if isinstance(option, (str, os.PathLike)):
        return ContentCache(option)
    if option is None and os.environ.get(CACHE_DIR_ENV):
        return ContentCache()
    return None
