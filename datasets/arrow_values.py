"""How Arrow columns become Python values: numpy arrays for tensor columns, plain Python values for the others.

Tensor columns use Arrow's canonical extension types (``arrow.fixed_shape_tensor``, ``arrow.variable_shape_tensor``);
the stream format writes them, and Parquet shards keep them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

EXTENSION_NAME = b"ARROW:extension:name"
EXTENSION_METADATA = b"ARROW:extension:metadata"
VARIABLE_SHAPE_TENSOR = "arrow.variable_shape_tensor"

Decoder = Callable[[pa.Array], Sequence[Any]]


def column_decoder(field: pa.Field, *, writable: bool) -> Decoder:
    """How the arrays of ``field`` become Python values: numpy arrays for tensors, ``to_pylist`` otherwise."""
    arrow_type = field.type
    if isinstance(arrow_type, pa.FixedShapeTensorType):
        return _FixedShapeDecoder(arrow_type, writable=writable)
    extension = getattr(arrow_type, "extension_name", None)
    if extension is None:
        extension = (field.metadata or {}).get(EXTENSION_NAME, b"").decode("utf-8", "replace")
    storage = getattr(arrow_type, "storage_type", arrow_type)
    if extension == VARIABLE_SHAPE_TENSOR and _is_variable_shape_storage(storage):
        return _VariableShapeDecoder(storage.field("shape").type.list_size, writable=writable)
    return _to_pylist


def _to_pylist(array: pa.Array) -> list[Any]:
    return array.to_pylist()


def _is_variable_shape_storage(storage: pa.DataType) -> bool:
    return (
        pa.types.is_struct(storage)
        and storage.get_field_index("data") >= 0
        and storage.get_field_index("shape") >= 0
        and pa.types.is_list(storage.field("data").type)
        and pa.types.is_fixed_size_list(storage.field("shape").type)
    )


def _numpy_values(values: pa.Array, *, writable: bool) -> np.ndarray:
    """The elements as numpy, without a copy when Arrow's layout allows (numeric, no nulls)."""
    block = values.to_numpy(zero_copy_only=False)
    if writable and not block.flags.writeable:
        block = block.copy()
    return block


def _rows_of(block: np.ndarray) -> list[np.ndarray]:
    if block.ndim == 1:  # 0-d entries: index with ``...`` so each stays an array rather than a numpy scalar
        return [block[index, ...] for index in range(len(block))]
    return list(block)


def _with_nulls(rows: list[Any], array: pa.Array) -> list[Any]:
    if array.null_count:
        for index in np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False)):
            rows[index] = None
    return rows


class _FixedShapeDecoder:
    def __init__(self, arrow_type: pa.FixedShapeTensorType, *, writable: bool) -> None:
        self.shape = tuple(arrow_type.shape)
        self.size = math.prod(self.shape)
        permutation = arrow_type.permutation
        self.permuted = permutation is not None and list(permutation) != sorted(permutation)
        self.writable = writable

    def __call__(self, array: pa.Array) -> list[Any]:
        if self.permuted:  # written elsewhere with a permuted layout: pyarrow knows how to undo it
            return _rows_of(array.to_numpy_ndarray())
        storage = array.storage
        flat = storage.values.slice(storage.offset * self.size, len(storage) * self.size)
        block = _numpy_values(flat, writable=self.writable).reshape(len(storage), *self.shape)
        return _with_nulls(_rows_of(block), storage)


class _VariableShapeDecoder:
    def __init__(self, ndim: int, *, writable: bool) -> None:
        self.ndim = ndim
        self.writable = writable

    def __call__(self, array: pa.Array) -> list[Any]:
        storage = array.storage if isinstance(array, pa.ExtensionArray) else array
        lists = storage.field("data")  # children come sliced to the struct's offset and length
        shape_lists = storage.field("shape")
        offsets = lists.offsets.to_numpy()
        values = _numpy_values(lists.values, writable=self.writable)
        shape_values = shape_lists.values.slice(shape_lists.offset * self.ndim, len(shape_lists) * self.ndim)
        shapes = shape_values.to_numpy(zero_copy_only=False).reshape(len(storage), self.ndim)
        rows: list[Any] = [
            values[offsets[index] : offsets[index + 1]].reshape(tuple(shapes[index])) for index in range(len(storage))
        ]
        return _with_nulls(rows, storage)
