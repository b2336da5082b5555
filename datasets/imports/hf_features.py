"""Hugging Face ``datasets`` features, as an import keeps them: the one rule :mod:`.hf` (its Arrow files) and
:mod:`.parquet` (Parquet files ``datasets`` wrote) both follow.

``datasets`` records a dataset's features as JSON in its Arrow schema's metadata (``huggingface``: ``{"info":
{"features": {...}}}``). Of the top-level features:

- ``Image`` (stored as ``struct<bytes: binary, path: string>``) becomes a ``binary`` column of the image files'
  bytes. An image held only as a path (no bytes: ``load_dataset("imagefolder")``'s cache points at the files it was
  built from) is refused, naming it: that file is outside the source.
- ``ClassLabel`` stays the ``int64`` stored, with its class names in the field's metadata (:data:`CLASS_NAMES`, a
  JSON list), so that a mapping can name the labels.
- Every other feature (``Value``, ``List``, ``Audio``, nested dicts...) stays as stored.

A schema without ``huggingface`` metadata (a Parquet file another tool wrote) is kept as stored; the source's
metadata is not carried over (features no longer true once an ``Image`` column is plain bytes).

NOTE [ Images of a Hugging Face column ]: an ``Image`` column's field carries no :data:`~.source.IMAGE_EXTENSION`.
``datasets`` records no file type for the column: each image has its own (a dataset built from a folder of images
holds PNG and JPEG files side by side, each with its own path), so one extension for the field would be a guess from
its first image, wrong for the others; and finding out whether they agree would take a pass over the source before
its schema is known. :mod:`.mapping` tells such a field's images by their first bytes, as it does any field without
the mark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datamount.datasets.imports.source import SourceError

#: Field metadata: a ``ClassLabel`` column's class names, as a JSON list (label ``i`` is the ``i``-th name).
CLASS_NAMES = b"datamount.import.classes"
#: The schema metadata key ``datasets`` records its features under.
FEATURES_KEY = b"huggingface"
#: How ``datasets`` stores an ``Image`` feature.
IMAGE_STORAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])

#: A problem with sample ``row`` of the batch being converted, as the caller's :class:`~.source.SourceError`.
Refuse = Callable[[int, str], Exception]


def stored_features(schema: pa.Schema) -> dict[str, Any] | None:
    """The features ``datasets`` recorded in ``schema``'s metadata, or ``None`` where it recorded none; a
    :class:`ValueError` where the record is not what ``datasets`` writes."""
    recorded = (schema.metadata or {}).get(FEATURES_KEY)
    if recorded is None:
        return None
    try:
        features = json.loads(recorded)["info"]["features"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"its schema's {FEATURES_KEY.decode()} metadata holds no features: {exc}") from exc
    if not isinstance(features, dict):
        raise ValueError(f"its schema's {FEATURES_KEY.decode()} metadata holds no features")
    return features


@dataclass(frozen=True)
class FeatureColumns:
    """A stored schema as an import gives it (:attr:`schema`), and the columns whose values change on the way
    (:attr:`images`: the indices of ``Image`` columns)."""

    schema: pa.Schema
    images: tuple[int, ...] = ()

    @classmethod
    def of_source(cls, where: str, shard: str, stored: pa.Schema, features: Mapping[str, Any] | None) -> FeatureColumns:
        """:meth:`of`, for a source at ``where`` whose first shard is ``shard``: a column whose storage is not its
        feature's is a :class:`~.source.SourceError` naming them."""
        try:
            return cls.of(stored, features)
        except ValueError as exc:
            raise SourceError(where, shard, str(exc)) from exc

    @classmethod
    def of(cls, stored: pa.Schema, features: Mapping[str, Any] | None) -> FeatureColumns:
        """The columns of ``stored`` under ``features`` (``None``: as stored); a :class:`ValueError` naming a
        column whose storage is not its feature's."""
        fields, images = [], []
        for index, field in enumerate(stored):
            feature = (features or {}).get(field.name)
            feature = feature if isinstance(feature, dict) else {}
            kind = feature.get("_type")
            if kind == "Image":
                if not field.type.equals(IMAGE_STORAGE):
                    raise ValueError(f"column {field.name!r} is an Image feature stored as {field.type}")
                fields.append(pa.field(field.name, pa.binary(), field.nullable))
                images.append(index)
            elif kind == "ClassLabel" and isinstance(names := feature.get("names"), list):
                classes = {CLASS_NAMES: json.dumps(names).encode()}
                fields.append(pa.field(field.name, field.type, field.nullable, metadata=classes))
            else:
                fields.append(pa.field(field.name, field.type, field.nullable))
        return cls(pa.schema(fields), tuple(images))

    def batch(self, stored: pa.RecordBatch, refuse: Refuse) -> pa.RecordBatch:
        """``stored`` (a batch of the stored schema) in :attr:`schema`: each image's bytes; ``refuse(row, reason)``
        raised for an image held only as a path."""
        columns = stored.columns
        for index in self.images:
            columns[index] = _image_bytes(stored.schema.field(index).name, columns[index], refuse)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def schema_difference(schema: pa.Schema, first: pa.Schema) -> str | None:
    """How a file's ``schema`` differs from the first file's (``first``): its columns, or the features ``datasets``
    recorded (other metadata aside); ``None`` where it does not. A :class:`ValueError` where either records features
    that are not ``datasets``'."""
    if schema.names != first.names:
        return f"columns {schema.names}, not {first.names}"
    for field, expected in zip(schema, first, strict=True):
        if not field.type.equals(expected.type):
            return f"column {field.name!r} is {field.type}, not {expected.type}"
        if field.nullable != expected.nullable:
            return f"column {field.name!r} {'may' if field.nullable else 'may not'} hold nulls, unlike the first's"
    if stored_features(schema) != stored_features(first):
        return "the features datasets recorded in it differ"
    return None


def _image_bytes(name: str, images: pa.Array, refuse: Refuse) -> pa.Array:
    """The bytes of an ``Image`` column's images (null where the image is); a path without bytes refused."""
    data = pc.struct_field(images, "bytes")
    paths = pc.struct_field(images, "path")
    only_path = pc.and_(data.is_null(), paths.is_valid())
    if pc.any(only_path).as_py():
        row = pc.index(only_path, True).as_py()
        raise refuse(
            row,
            f"its {name!r} image is only a path ({paths[row].as_py()}), not the image's bytes: the file is outside "
            "the source (save the dataset with Dataset.save_to_disk, which stores each image's bytes, and import "
            "that folder)",
        )
    return data
