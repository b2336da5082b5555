"""``import_dataset``: a dataset in another tool's format, read once from any store, stored as a new version."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from datamount.datasets.imports.location import locate
from datamount.datasets.imports.mapping import Form, choose_form, needs_first_rows
from datamount.datasets.imports.source import Source
from datamount.datasets.imports.writer import Imported, write_source
from datamount.datasets.names import validate_name
from datamount.datasets.progress import Progress
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES
from datamount.storage import Store, open_store

#: Each format ``--from-format`` takes, and the function that opens a source of it (module, name).
FORMATS: dict[str, tuple[str, str]] = {
    "webdataset": ("datamount.datasets.imports.webdataset", "open_webdataset"),
    "mds": ("datamount.datasets.imports.mds", "open_mds"),
    "litdata": ("datamount.datasets.imports.litdata", "open_litdata"),
    "hf": ("datamount.datasets.imports.hf", "open_hf"),
    "parquet": ("datamount.datasets.imports.parquet", "open_parquet"),
}


def import_dataset(
    source: str | os.PathLike[str],
    name: str,
    *,
    format: str,
    store: Store | str | None = None,
    options: Mapping[str, Any] | None = None,
    split: str | None = None,
    image_field: str | None = None,
    label_field: str | None = None,
    columns: Sequence[str] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    progress: Progress | None = None,
) -> Imported:
    """Store the dataset at ``source`` (a local path or a store URL: a folder, a file, or files by a brace
    pattern), written by another tool in ``format`` (see :data:`FORMATS`), as a new version of ``name``.

    Each sample becomes a row: an image version where a sample is one image and one class, else a table version
    with the sample's fields as columns (:mod:`.mapping`; ``image_field``/``label_field`` or ``columns`` choose).
    The source is read once, every byte its format can check checked, straight into packed shards; the version is
    committed once the whole source was read. Run again after a kill, it goes on from the last shard written.
    ``options`` are the source store's (``endpoint_url``...); ``split`` takes one split of a source that has them.

    Raises
    ------
    SourceError
        The source is damaged or truncated (names its shard and sample); nothing is committed.
    MappingError
        The fields asked for are not there, or do not fit the form.
    """
    validate_name(name)
    opened = open_source(source, format, options=options, split=split)
    form = _form(opened, image_field=image_field, label_field=label_field, columns=columns)
    return write_source(
        opened,
        form,
        name,
        open_store(store),
        shard_bytes=shard_bytes,
        row_group_bytes=row_group_bytes,
        progress=progress,
    )


def open_source(
    source: str | os.PathLike[str], format: str, *, options: Mapping[str, Any] | None = None, split: str | None = None
) -> Source:
    """``source`` opened as a :class:`~.source.Source` of ``format``."""
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: one of {', '.join(FORMATS)}")
    module, function = FORMATS[format]
    opener = getattr(importlib.import_module(module), function)
    location = locate(source, options)
    if format == "hf":
        return opener(location, split=split)
    if split is not None:
        raise ValueError(f"--split is for sources that hold splits (hf); a {format} source is one set of rows")
    return opener(location)


def _form(source: Source, *, image_field: str | None, label_field: str | None, columns: Sequence[str] | None) -> Form:
    """The form of ``source``'s rows; its first rows are read for it only where its schema cannot tell (a binary
    field the format did not mark as an image or not)."""
    first = None
    if columns is None and needs_first_rows(source.schema) and source.shards:
        batches = source.batches(0)
        first = next(iter(batches), None)
        getattr(batches, "close", lambda: None)()
    return choose_form(source.schema, first, image_field=image_field, label_field=label_field, columns=columns)
