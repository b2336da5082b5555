"""Arrow columns and Python values, both ways: the one codec of tensor and scalar columns.

Encoding (the stream writer): a column's Arrow type is chosen from the first values written and then fixed. numpy
arrays become Arrow's canonical tensor extension types (``arrow.fixed_shape_tensor`` when every array has one shape,
else ``arrow.variable_shape_tensor``), Python scalars their plain Arrow types. Decoding (streams and Parquet shards):
tensor columns become numpy arrays, every other column plain Python values; any Arrow type is accepted.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from datamount.datasets.errors import StreamFormatError

EXTENSION_NAME = b"ARROW:extension:name"
EXTENSION_METADATA = b"ARROW:extension:metadata"
VARIABLE_SHAPE_TENSOR = "arrow.variable_shape_tensor"

Decoder = Callable[[pa.Array], Iterable[Any]]

#: Rows of a batch made into Python values at once. The values of one slice are alive together while it is handed
#: out; kept to a few thousand rows, they fit in the memory the allocators keep once they are freed, and slice after
#: slice reuses the same pages. A whole row group's values at once took fresh pages from the system every time:
#: 8,518 page faults in a pass over 200,000 text pairs, and a third of that pass's time.
ROWS_AT_ONCE = 4096
#: Binary values of this many bytes or more (on average in an array) become ``bytes`` one at a time, as each row is
#: handed out, rather than all of a slice's at once: a value its consumer has let go is then freed before the next
#: is made, which reuses its memory, still in the CPU's caches, where a slice's values made together take fresh pages
#: from the system (4,000 values of 110 KB: 0.13 s rather than 0.59 s of CPU). Smaller values are made faster all at
#: once by ``to_pylist`` (16 KB values: the same time either way).
LAZY_BYTES = 16 << 10

_BYTES_TYPES = (bytes, bytearray, memoryview)
_MAX_LIST_VALUES = 2**31 - 1
_SIZE_OF_OTHER = 8

#: What pyarrow may raise when a value does not convert to a column's type.
_CONVERSION_ERRORS = (TypeError, ValueError, OverflowError, pa.ArrowNotImplementedError)


# ------------------------------------------------------------------------------------------------ decoders


def column_decoder(field: pa.Field, *, writable: bool, views: bool = False) -> Decoder:
    """How the arrays of ``field`` become Python values: numpy arrays for tensors, ``to_pylist`` otherwise; with
    ``views``, binary values are read-only memoryviews into the array's buffer instead of new ``bytes``."""
    arrow_type = field.type
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return _binary_views if views else _binary_values
    if isinstance(arrow_type, pa.FixedShapeTensorType):
        return _FixedShapeDecoder(arrow_type, writable=writable)
    extension = getattr(arrow_type, "extension_name", None)
    if extension is None:
        extension = (field.metadata or {}).get(EXTENSION_NAME, b"").decode("utf-8", "replace")
    storage = getattr(arrow_type, "storage_type", arrow_type)
    if extension == VARIABLE_SHAPE_TENSOR and _is_variable_shape_storage(storage):
        return _VariableShapeDecoder(storage.field("shape").type.list_size, writable=writable)
    return _to_pylist


def batch_rows(batch: pa.RecordBatch, decoders: Sequence[Decoder]) -> Iterator[tuple[Any, ...]]:
    """The rows of ``batch`` as tuples of Python values (``decoders``: one per column), made :data:`ROWS_AT_ONCE`
    rows at a time, as they are handed out."""
    if not decoders:
        return itertools.repeat((), batch.num_rows)
    parts = (batch.slice(start, ROWS_AT_ONCE) for start in range(0, batch.num_rows, ROWS_AT_ONCE))
    # Chained C iterators rather than a generator: no Python frame to resume for every row.
    return itertools.chain.from_iterable(
        zip(*[decode(part.column(index)) for index, decode in enumerate(decoders)], strict=True) for part in parts
    )


def _to_pylist(array: pa.Array) -> list[Any]:
    return array.to_pylist()


def _binary_values(array: pa.Array) -> Iterable[Any]:
    """The values of a binary array as ``bytes``: made as they are handed out when they are large
    (:data:`LAZY_BYTES`) and none is null, else all at once."""
    if array.null_count or not len(array) or array.nbytes < LAZY_BYTES * len(array):
        return array.to_pylist()
    return map(bytes, _binary_views(array))


def _binary_views(array: pa.Array) -> list[Any]:
    """Each value of a binary array as a read-only memoryview into the array's data buffer (``None`` for a null):
    no value is copied, and the views keep the buffer alive."""
    offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buffer, data = array.buffers()
    if offsets_buffer is None or data is None:  # an array of no values, or of empty values only
        return _with_nulls([memoryview(b"")] * len(array), array)
    ends = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset : array.offset + len(array) + 1].tolist()
    whole = memoryview(data).toreadonly()
    return _with_nulls([whole[start:end] for start, end in itertools.pairwise(ends)], array)


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


# ------------------------------------------------------------------------------------------------ encoders


class ColumnEncoder(Protocol):
    """Turns one column's values of a batch into an Arrow array of the column's fixed type."""

    field: pa.Field

    def encode(self, values: Sequence[Any], first: int) -> pa.Array:
        """The Arrow array for ``values``; ``first`` is the stream index of ``values[0]``, for messages."""
        ...


def entry_size(values: Sequence[Any]) -> int:
    """Roughly how many bytes an entry adds to a record batch (for grouping entries into batches)."""
    size = 0
    for value in values:
        if isinstance(value, (bytes, bytearray, str)):
            size += len(value)
        elif isinstance(value, (np.ndarray, memoryview)):
            size += value.nbytes
        else:
            size += _SIZE_OF_OTHER
    return size


def describe_value(value: Any) -> str:
    """A value as error messages name it: its type, and its dtype and shape for arrays."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype.str if not value.dtype.isnative else value.dtype} array of shape {value.shape}"
    text = repr(value)
    return f"a {type(value).__name__} ({text if len(text) <= 40 else text[:37] + '...'})"


def misfit(target: str, name: str, holds: str, index: int, value: Any, hint: str = "") -> StreamFormatError:
    """The error for an entry whose value does not fit its column's type."""
    return StreamFormatError(
        f"{target}: column {name!r} holds {holds} (fixed by the stream's first batch); "
        f"entry {index:,} has {describe_value(value)}{hint}"
    )


def infer_encoder(target: str, name: str, values: Sequence[Any], *, variable_shape: bool) -> ColumnEncoder:
    """The encoder for a column, its type chosen from the values of the stream's first batch."""
    index, sample = next(((i, value) for i, value in enumerate(values) if value is not None), (0, None))
    if isinstance(sample, np.ndarray):
        value_type = array_value_type(target, name, sample, index)
        shapes = {value.shape for value in values if isinstance(value, np.ndarray)}
        # Arrow's fixed-size lists cannot be empty: arrays with a 0 in their shape go as variable-shape tensors.
        if sample.ndim == 0 or (not variable_shape and len(shapes) == 1 and sample.size > 0):
            return FixedShapeTensorEncoder(target, name, sample.dtype, sample.shape, value_type)
        return VariableShapeTensorEncoder(target, name, sample.dtype, sample.ndim, value_type)
    return ScalarEncoder(target, name, _scalar_type(target, name, sample, values))


def array_value_type(target: str, name: str, array: np.ndarray, index: int) -> pa.DataType:
    """The Arrow type of an array's elements; non-native byte order and non-numeric dtypes are refused."""
    if not array.dtype.isnative:
        raise StreamFormatError(
            f"{target}: column {name!r}, entry {index:,}: a {array.dtype.str} array is in non-native byte order; "
            "convert it first with array.astype(array.dtype.newbyteorder('='))"
        )
    if array.dtype.kind in "biuf":  # bool, int, uint, float; float128 is the one of these Arrow has not
        with contextlib.suppress(TypeError, pa.ArrowNotImplementedError):
            return pa.from_numpy_dtype(array.dtype)
    raise StreamFormatError(
        f"{target}: column {name!r}, entry {index:,}: numpy dtype {array.dtype} is not supported "
        "(bool, int8-int64, uint8-uint64, float16-float64 are)"
    )


def _scalar_type(target: str, name: str, sample: Any, values: Sequence[Any]) -> pa.DataType:
    if sample is None:
        return pa.null()
    if isinstance(sample, (bool, np.bool_)):
        return pa.bool_()
    if isinstance(sample, (np.integer, np.floating)):
        return pa.from_numpy_dtype(sample.dtype)
    simple = {int: pa.int64(), float: pa.float64(), str: pa.large_string()}
    for kind, arrow_type in simple.items():
        if isinstance(sample, kind):
            return arrow_type
    if isinstance(sample, _BYTES_TYPES):
        return pa.large_binary()
    try:
        return pa.array([value for value in values if value is not None]).type
    except _CONVERSION_ERRORS as exc:
        raise StreamFormatError(
            f"{target}: column {name!r}: cannot store {describe_value(sample)} in a stream "
            f"(numpy arrays, bytes, str, int, float, bool, None, and lists or dicts of those can be): {exc}"
        ) from None


class ScalarEncoder:
    """A column of Python (or numpy) scalars, bytes, text, or anything else pyarrow converts."""

    def __init__(self, target: str, name: str, arrow_type: pa.DataType) -> None:
        self.target = target
        self.field = pa.field(name, arrow_type)
        # pyarrow turns str into binary and bytes into UTF-8 text without a word: these two are checked here.
        self._accepts: tuple[type, ...] | None = None
        if pa.types.is_large_string(arrow_type):
            self._accepts = (str,)
        elif pa.types.is_large_binary(arrow_type):
            self._accepts = _BYTES_TYPES

    def encode(self, values: Sequence[Any], first: int) -> pa.Array:
        accepts = self._accepts
        if accepts is not None:
            for offset, value in enumerate(values):
                if value is not None and not isinstance(value, accepts):
                    raise self._misfit(first + offset, value)
        try:
            return pa.array(values, type=self.field.type)
        except _CONVERSION_ERRORS:
            offset = next(i for i, value in enumerate(values) if not _converts(value, self.field.type))
            raise self._misfit(first + offset, values[offset]) from None

    def _misfit(self, index: int, value: Any) -> StreamFormatError:
        arrow_type = self.field.type
        holds = "only None (every value of the first batch was None)" if arrow_type == pa.null() else str(arrow_type)
        return misfit(self.target, self.field.name, holds, index, value)


def _converts(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value], type=arrow_type)
    except _CONVERSION_ERRORS:
        return False
    return True


class _ArrayEncoder:
    """What both tensor encoders share: checking each value and stacking them into one contiguous block."""

    target: str
    field: pa.Field
    dtype: np.dtype

    def _holds(self) -> str:
        raise NotImplementedError

    def _fits(self, value: np.ndarray) -> bool:
        raise NotImplementedError

    def _shape_hint(self) -> str:
        return ""

    def _check(self, values: Sequence[Any], first: int) -> None:
        for offset, value in enumerate(values):
            if value is None:
                continue
            if not isinstance(value, np.ndarray) or value.dtype != self.dtype or not self._fits(value):
                hint = ""
                if isinstance(value, np.ndarray) and value.dtype == self.dtype:
                    hint = self._shape_hint()
                elif isinstance(value, np.ndarray) and value.dtype.isnative:
                    hint = f"; convert it with .astype(numpy.{self.dtype})"
                raise misfit(self.target, self.field.name, self._holds(), first + offset, value, hint)

    def _mask(self, values: Sequence[Any]) -> pa.Array | None:
        if all(value is not None for value in values):
            return None
        return pa.array([value is None for value in values], type=pa.bool_())


class FixedShapeTensorEncoder(_ArrayEncoder):
    """Arrays of one dtype and one shape: ``arrow.fixed_shape_tensor``, a fixed-size list of the elements."""

    def __init__(
        self, target: str, name: str, dtype: np.dtype, shape: tuple[int, ...], value_type: pa.DataType
    ) -> None:
        self.target = target
        self.dtype = dtype
        self.shape = shape
        self.size = math.prod(shape)
        self.field = pa.field(name, pa.fixed_shape_tensor(value_type, list(shape)))

    def _holds(self) -> str:
        return f"{self.dtype} arrays of shape {self.shape}"

    def _fits(self, value: np.ndarray) -> bool:
        return value.shape == self.shape

    def _shape_hint(self) -> str:
        return f"; call set_columns(..., variable_shape=[{self.field.name!r}]) when its shapes vary"

    def encode(self, values: Sequence[Any], first: int) -> pa.Array:
        self._check(values, first)
        mask = self._mask(values)
        if len(values) == 1 and mask is None:
            block = np.ascontiguousarray(values[0]).reshape(-1)  # one entry: no copy
        else:
            stacked = np.zeros((len(values), *self.shape), dtype=self.dtype)
            for offset, value in enumerate(values):
                if value is not None:
                    stacked[offset] = value
            block = stacked.reshape(-1)
        storage = pa.FixedSizeListArray.from_arrays(pa.array(block), self.size, mask=mask)
        return pa.ExtensionArray.from_storage(self.field.type, storage)


class VariableShapeTensorEncoder(_ArrayEncoder):
    """Arrays of one dtype and number of dimensions: ``arrow.variable_shape_tensor``, each with its shape."""

    def __init__(self, target: str, name: str, dtype: np.dtype, ndim: int, value_type: pa.DataType) -> None:
        self.target = target
        self.dtype = dtype
        self.ndim = ndim
        self.storage_type = pa.struct([("data", pa.list_(value_type)), ("shape", pa.list_(pa.int32(), ndim))])
        metadata = {EXTENSION_NAME: VARIABLE_SHAPE_TENSOR.encode(), EXTENSION_METADATA: b"{}"}
        self.field = pa.field(name, self.storage_type, metadata=metadata)

    def _holds(self) -> str:
        return f"{self.dtype} arrays of {self.ndim} dimension{'s' if self.ndim != 1 else ''}"

    def _fits(self, value: np.ndarray) -> bool:
        return value.ndim == self.ndim

    def encode(self, values: Sequence[Any], first: int) -> pa.Array:
        self._check(values, first)
        present = [np.ascontiguousarray(value).reshape(-1) if value is not None else None for value in values]
        sizes = np.array([0 if flat is None else flat.size for flat in present], dtype=np.int64)
        offsets = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if offsets[-1] > _MAX_LIST_VALUES:
            raise StreamFormatError(
                f"{self.target}: column {self.field.name!r}: entries {first:,}-{first + len(values) - 1:,} hold "
                f"{offsets[-1]:,} values, more than one record batch of variable-shape arrays can (2**31 - 1)"
            )
        flats = [flat for flat in present if flat is not None]
        data = np.concatenate(flats) if flats else np.zeros(0, dtype=self.dtype)
        shapes = np.array([value.shape if value is not None else (0,) * self.ndim for value in values], np.int32)
        lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(data))
        shape_lists = pa.FixedSizeListArray.from_arrays(pa.array(shapes.reshape(-1)), self.ndim)
        return pa.StructArray.from_arrays([lists, shape_lists], fields=list(self.storage_type), mask=self._mask(values))
