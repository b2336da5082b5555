"""The stream format: round trips, grouping, errors, real pipes between processes, and Node.js interop."""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from datamount.readers import batch
from datamount.readers.errors import StreamFormatError
from datamount.readers.stream import read_from, stream_reader, write_to

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
DTYPES += ["float16", "float32", "float64"]


def stream_bytes(
    columns: tuple[str, ...], entries: list[tuple[Any, ...]], *, variable_shape: tuple[str, ...] = (), **options: Any
) -> bytes:
    buffer = io.BytesIO()
    with write_to(buffer, **options) as writer:
        writer.set_columns(*columns, variable_shape=variable_shape)
        writer.write_many(entries)
    return buffer.getvalue()


def read_back(data: bytes, **options: Any) -> list[dict[str, Any]]:
    return list(read_from(io.BytesIO(data), **options))


def batch_sizes(data: bytes) -> list[int]:
    """The record batches in a stream, as pyarrow alone sees them."""
    return [record_batch.num_rows for record_batch in pa.ipc.open_stream(data)]


def assert_same_array(got: Any, expected: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    assert got.tobytes() == expected.tobytes()


# ------------------------------------------------------------------------------------------------ round trips


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dtype=st.sampled_from(DTYPES),
    shapes=st.lists(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), min_size=1, max_size=5),
    same_shape=st.booleans(),
    data=st.data(),
)
def test_arrays_come_back_byte_exact(dtype: str, shapes: list[tuple[int, ...]], same_shape: bool, data: Any) -> None:
    # A column holds arrays of one number of dimensions, of one shape or of several.
    shapes = [shapes[0]] * len(shapes) if same_shape else [shape for shape in shapes if len(shape) == len(shapes[0])]
    arrays = [data.draw(hnp.arrays(np.dtype(dtype), shape)) for shape in shapes]
    variable_shape = () if same_shape else ("x",)
    data_bytes = stream_bytes(("x",), [(a,) for a in arrays], variable_shape=variable_shape, max_batch_entries=2)
    back = read_back(data_bytes)
    assert len(back) == len(arrays)
    for entry, array in zip(back, arrays, strict=True):
        assert_same_array(entry["x"], array)


scalar_columns: st.SearchStrategy[list[Any]] = st.one_of(
    *(
        st.lists(strategy, min_size=1, max_size=20)
        for strategy in (
            st.text(),
            st.binary(),
            st.integers(min_value=-(2**63), max_value=2**63 - 1),
            st.floats(allow_nan=False),
            st.booleans(),
        )
    )
)


@settings(max_examples=60, deadline=None)
@given(column=scalar_columns)
def test_scalars_keep_their_python_type(column: list[Any]) -> None:
    kind = type(column[0])
    back = read_back(stream_bytes(("v",), [(value,) for value in column], max_batch_entries=3))
    assert [entry["v"] for entry in back] == column
    assert all(type(entry["v"]) is kind for entry in back)


def test_mixed_columns_and_none_round_trip() -> None:
    tensor = np.arange(6, dtype=np.float32).reshape(2, 3)
    entries: list[tuple[Any, ...]] = [
        (tensor, "é", b"\x00\xff", 7, 0.5, True, [1, 2]),
        (None, None, None, None, None, None, None),
        (np.ones((2, 3), np.float32), "", b"", -1, float("inf"), False, []),
    ]
    columns = ("tensor", "text", "blob", "count", "score", "flag", "numbers")
    back = read_back(stream_bytes(columns, entries))
    assert list(back[0]) == list(columns)
    assert_same_array(back[0]["tensor"], tensor)
    assert back[1] == dict.fromkeys(columns)
    assert [back[2][column] for column in columns[1:]] == list(entries[2][1:])


def test_column_types_in_the_schema() -> None:
    entries = [(np.zeros((28, 28), np.float32), np.zeros(3, np.int16), np.float32(1.5), "a", b"b", 1, 2.0)]
    stream = read_from(io.BytesIO(stream_bytes(("image", "ragged", "f32", "s", "b", "i", "f"), entries)))
    types = [str(field.type) for field in stream.schema]
    assert types[0] == "extension<arrow.fixed_shape_tensor[value_type=float, shape=[28,28]]>"
    assert types[2:] == ["float", "large_string", "large_binary", "int64", "double"]
    assert stream.schema.metadata == {b"datamount.stream": b"1.0"}
    assert stream.version == "1.0"


def test_arrays_of_varying_shape_are_variable_shape_tensors() -> None:
    arrays = [np.arange(n * 2, dtype=np.int32).reshape(n, 2) for n in (3, 0, 1)]
    data = stream_bytes(("seq",), [(array,) for array in arrays])
    stream = read_from(io.BytesIO(data))
    assert stream.schema.field("seq").type.extension_name == "arrow.variable_shape_tensor"
    for entry, array in zip(stream, arrays, strict=True):
        assert_same_array(entry["seq"], array)


def test_variable_shape_can_be_asked_for_when_the_first_batch_agrees() -> None:
    buffer = io.BytesIO()
    with write_to(buffer, max_batch_entries=1) as writer:
        writer.set_columns("image", variable_shape=["image"])
        writer.write(np.zeros((4, 4), np.uint8))
        writer.write(np.ones((2, 8), np.uint8))
    assert [entry["image"].shape for entry in read_back(buffer.getvalue())] == [(4, 4), (2, 8)]


def test_zero_d_arrays_stay_arrays() -> None:
    back = read_back(stream_bytes(("x",), [(np.array(1.5),), (np.array(-2.0),)]))
    assert [entry["x"].shape for entry in back] == [(), ()]
    assert [float(entry["x"]) for entry in back] == [1.5, -2.0]


def test_arrays_are_read_without_a_copy_unless_asked() -> None:
    data = stream_bytes(("x",), [(np.arange(4.0),), (np.arange(4.0) + 1,)])
    shared = read_back(data)
    assert not shared[0]["x"].flags.writeable
    assert np.shares_memory(shared[0]["x"].base, shared[1]["x"].base)
    copied = read_back(data, writable=True)
    copied[0]["x"][0] = 99
    assert copied[0]["x"][0] == 99


def test_non_contiguous_arrays_are_written_by_value() -> None:
    source = np.arange(24, dtype=np.int64).reshape(4, 6)
    back = read_back(stream_bytes(("x",), [(source[:, ::2],), (source.T[:4, :3],)], max_batch_entries=1))
    assert_same_array(back[0]["x"], np.ascontiguousarray(source[:, ::2]))
    assert_same_array(back[1]["x"], np.ascontiguousarray(source.T[:4, :3]))


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (np.arange(3, dtype=">f4"), "non-native byte order"),
        (np.zeros(2, dtype=np.complex64), "dtype complex64 is not supported"),
        (np.array(["a"]), "is not supported"),
        (object(), "cannot store a object"),
    ],
    ids=["big-endian", "complex", "unicode-array", "object"],
)
def test_values_the_format_cannot_carry_are_refused(value: Any, fragment: str) -> None:
    with pytest.raises(StreamFormatError, match=fragment) as raised:
        stream_bytes(("x",), [(value,)])
    assert "column 'x'" in str(raised.value)


@pytest.mark.parametrize(
    ("first", "later", "fragments"),
    [
        (1, "two", ["holds int64", "entry 3 has a str"]),
        ("text", b"bytes", ["holds large_string", "entry 3 has a bytes"]),
        (b"bytes", "text", ["holds large_binary", "entry 3 has a str"]),
        (np.zeros((2, 2), np.float32), np.zeros((3, 3), np.float32), ["shape (2, 2)", "variable_shape=['x']"]),
        (np.zeros(2, np.float32), np.zeros(2, np.float64), ["float32 arrays", "astype(numpy.float32)"]),
        (np.zeros(2, np.float32), np.zeros((1, 2), np.float32), ["float32 arrays of shape (2,)"]),
        (None, 5, ["holds only None", "entry 3 has a int"]),
    ],
    ids=["int-then-str", "str-then-bytes", "bytes-then-str", "shape", "dtype", "ndim", "none-then-int"],
)
def test_a_later_value_that_does_not_fit_names_the_column(first: Any, later: Any, fragments: list[str]) -> None:
    writer = write_to(io.BytesIO(), max_batch_entries=3)
    writer.set_columns("id", "x")
    for index in range(3):
        writer.write(index, first)
    writer.write(3, later)
    with pytest.raises(StreamFormatError) as raised:
        writer.close()
    message = str(raised.value)
    assert "column 'x'" in message and "first batch" in message
    for fragment in fragments:
        assert fragment in message


def test_variable_shape_columns_keep_their_number_of_dimensions() -> None:
    writer = write_to(io.BytesIO())
    writer.set_columns("x")
    writer.write_many([(np.zeros((2, 3)),), (np.zeros((1, 1)),), (np.zeros(3),)])
    expected = r"float64 arrays of 2 dimensions \(.*\); entry 2 has a float64 array of shape \(3,\)$"
    with pytest.raises(StreamFormatError, match=expected):
        writer.close()


@pytest.mark.parametrize(
    ("action", "error", "fragment"),
    [
        (lambda w: w.write(1), ValueError, "call set_columns"),
        (lambda w: (w.set_columns("a", "b"), w.write(1)), StreamFormatError, "entry 0 has 1 values for the 2"),
        (lambda w: w.set_columns("a", "a"), ValueError, "repeated: a"),
        (lambda w: w.set_columns(), ValueError, "one or more non-empty"),
        (lambda w: w.set_columns("a", variable_shape=["b"]), ValueError, "unknown columns: b"),
        (lambda w: (w.set_columns("a"), w.write(1), w.set_columns("b")), ValueError, "before the first write"),
    ],
    ids=["no-columns", "arity", "repeated", "none", "unknown-variable", "late-columns"],
)
def test_writer_misuse_is_refused_early(action: Callable[[Any], Any], error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        action(write_to(io.BytesIO()))


@pytest.mark.parametrize("option", ["max_batch_entries", "max_batch_bytes"])
def test_batch_limits_must_be_positive(option: str) -> None:
    with pytest.raises(ValueError, match=f"{option} must be at least 1, got 0"):
        write_to(io.BytesIO(), **{option: 0})
    with pytest.raises(TypeError, match=f"{option} must be a whole number, got 1.5"):
        write_to(io.BytesIO(), **{option: 1.5})


# ------------------------------------------------------------------------------------------------ grouping


def test_small_entries_are_grouped_into_few_record_batches() -> None:
    buffer = io.BytesIO()
    with write_to(buffer) as writer:
        writer.set_columns("i", "name")
        for index in range(10_000):
            writer.write(index, f"n{index}")
    sizes = batch_sizes(buffer.getvalue())
    assert sizes == [1024] * 9 + [784] and writer.batches == len(sizes)
    stream = read_from(io.BytesIO(buffer.getvalue()))
    assert [entry["i"] for entry in stream] == list(range(10_000))
    assert stream.batches == 10


def test_large_entries_are_grouped_by_bytes() -> None:
    entries = [(np.zeros(256 << 10, np.uint8),) for _ in range(10)]  # 256 KiB each: 4 per MiB
    assert batch_sizes(stream_bytes(("x",), entries)) == [4, 4, 2]
    assert batch_sizes(stream_bytes(("x",), entries, max_batch_bytes=1)) == [1] * 10


def test_flush_sends_a_batch_now() -> None:
    buffer = io.BytesIO()
    with write_to(buffer) as writer:
        writer.set_columns("i")
        writer.write(1)
        writer.flush()
        written = len(buffer.getvalue())
        writer.write(2)
    assert written > 0 and batch_sizes(buffer.getvalue()) == [1, 1]


def test_each_batch_reaches_the_reader_at_once() -> None:
    read_end, write_end = os.pipe()
    with open(write_end, "wb") as sink, open(read_end, "rb") as source:
        writer = write_to(sink, max_batch_entries=2)
        writer.set_columns("i")
        writer.write_many([(1,), (2,), (3,)])
        stream = read_from(source)  # blocks until the schema and the first batch are in the pipe
        assert [next(stream)["i"], next(stream)["i"]] == [1, 2]
        writer.close()
        assert [entry["i"] for entry in stream] == [3]


def test_a_stream_with_no_entries_still_has_its_columns() -> None:
    stream = read_from(io.BytesIO(stream_bytes(("a", "b"), [])))
    assert stream.columns == ("a", "b") and list(stream) == []


# ------------------------------------------------------------------------------------------------ broken input


@pytest.fixture
def good_stream() -> bytes:
    entries = [(np.full(100, index, np.float64), f"entry {index}") for index in range(100)]
    return stream_bytes(("x", "s"), entries, max_batch_entries=10)


def error_reading(data: bytes, source: Any = None) -> str:
    with pytest.raises(StreamFormatError) as raised:
        list(read_from(source if source is not None else io.BytesIO(data)))
    return str(raised.value)


def test_a_stream_cut_in_the_middle_is_an_error_naming_the_source(good_stream: bytes, tmp_path: Path) -> None:
    path = tmp_path / "cut.arrows"
    path.write_bytes(good_stream[: len(good_stream) // 2])
    message = error_reading(b"", str(path))
    assert message.startswith(f"{path}: the stream is cut short or corrupt after 40 entries (4 record batches")
    assert "Expected to be able to read" in message  # what pyarrow found, kept as the detail


def test_a_stream_cut_between_batches_is_an_error(good_stream: bytes) -> None:
    message = error_reading(good_stream[:-8])  # everything but the end-of-stream marker
    assert "stopped after 100 entries without its end-of-stream marker" in message


def test_a_schema_cut_short_is_an_error(good_stream: bytes) -> None:
    assert "schema is cut short or corrupt after 100 bytes" in error_reading(good_stream[:100])


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "no stream: the input is empty"),
        (b"path\tlabel\n" * 20, "not an Arrow IPC stream: it starts with b'path\\tlab'"),
        (b"\xff\xff\xff\xff\x10\x00\x00\x00" + b"\x07" * 40, "schema is cut short or corrupt"),
    ],
    ids=["empty", "text", "garbage-after-marker"],
)
def test_input_that_is_not_a_stream_is_an_error(data: bytes, fragment: str) -> None:
    assert fragment in error_reading(data)


def test_a_failed_writer_leaves_a_stream_readers_reject() -> None:
    buffer = io.BytesIO()
    with pytest.raises(RuntimeError), write_to(buffer, max_batch_entries=2) as writer:
        writer.set_columns("i")
        writer.write_many([(1,), (2,), (3,)])
        raise RuntimeError("preprocessing failed")
    assert batch_sizes(buffer.getvalue()) == [2]  # the complete batch went out, the pending entry did not
    assert "stopped after 2 entries without its end-of-stream marker" in error_reading(buffer.getvalue())


def plain_arrow_stream(metadata: dict[bytes, bytes] | None, *, end_marker: bool = True) -> bytes:
    schema = pa.schema([("a", pa.int64())], metadata=metadata)
    buffer = io.BytesIO()
    writer = pa.ipc.new_stream(buffer, schema)
    writer.write_batch(pa.record_batch([pa.array([1, 2])], schema=schema))
    writer.close()
    return buffer.getvalue() if end_marker else buffer.getvalue()[:-8]


@pytest.mark.parametrize(
    ("version", "fragment"),
    [(b"2.0", "datamount stream format 2.0, newer than this datamount reads (1.x)"), (b"one", "unreadable")],
    ids=["newer-major", "garbled"],
)
def test_a_newer_or_unreadable_format_version_is_refused(version: bytes, fragment: str) -> None:
    assert fragment in error_reading(plain_arrow_stream({b"datamount.stream": version}))


def test_other_arrow_streams_are_read_and_a_newer_minor_version_too() -> None:
    assert [e["a"] for e in read_back(plain_arrow_stream({b"datamount.stream": b"1.9"}))] == [1, 2]
    assert [e["a"] for e in read_back(plain_arrow_stream(None, end_marker=False))] == [1, 2]


# ------------------------------------------------------------------------------------------------ files


def test_a_file_target_appears_only_when_closed(tmp_path: Path) -> None:
    path = tmp_path / "out.arrows"
    with write_to(path) as writer:
        writer.set_columns("i")
        writer.write_many((i,) for i in range(3000))
        assert not path.exists()
    assert [entry["i"] for entry in read_from(path)] == list(range(3000))
    assert sorted(os.listdir(tmp_path)) == ["out.arrows"]


def test_a_failed_file_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), write_to(tmp_path / "out.arrows") as writer:
        writer.set_columns("i")
        writer.write_many((i,) for i in range(3000))
        raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []


def test_missing_files_and_folders_are_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such folder for the stream"):
        write_to(tmp_path / "missing" / "out.arrows")
    with pytest.raises(FileNotFoundError):
        read_from(tmp_path / "missing.arrows")


def test_a_file_writer_never_closed_leaves_nothing(tmp_path: Path) -> None:
    writer = write_to(tmp_path / "out.arrows")
    writer.set_columns("i")
    writer.write(1)
    assert len(os.listdir(tmp_path)) == 1  # the temporary file
    del writer
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_a_fifo_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[int] = []
    consumer = threading.Thread(target=lambda: received.extend(e["i"] for e in read_from(fifo)))
    consumer.start()
    with write_to(fifo) as writer:
        writer.set_columns("i")
        writer.write_many((i,) for i in range(5000))
    consumer.join(timeout=30)
    assert received == list(range(5000))


def test_a_broken_pipe_to_another_target_is_a_broken_pipe_error() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "wb", buffering=0) as sink, pytest.raises(BrokenPipeError, match="went away"):
        writer = write_to(sink)
        writer.set_columns("x")
        writer.write(b"x" * (2 << 20))


# ------------------------------------------------------------------------------------------------ reader creator


def test_stream_reader_plugs_into_the_decorators(tmp_path: Path) -> None:
    path = tmp_path / "s.arrows"
    path.write_bytes(stream_bytes(("i", "s"), [(i, str(i)) for i in range(70)]))
    batched = batch(stream_reader(path), 32)
    first = list(batched())
    assert [len(b) for b in first] == [32, 32, 6] and first[0][:2] == [(0, "0"), (1, "1")]
    assert list(batched()) == first  # a path is opened again for each pass
    assert list(pickle.loads(pickle.dumps(batched))()) == first


def test_a_file_object_can_be_read_once() -> None:
    samples = stream_reader(io.BytesIO(stream_bytes(("i",), [(1,), (2,)])))
    assert list(samples()) == [(1,), (2,)]
    with pytest.raises(ValueError, match=r"read already .* datamount.readers.cache"):
        list(samples())


# ------------------------------------------------------------------------------------------------ real pipes

PRODUCER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from datamount.readers.stream import write_to
    count = int(sys.argv[1])
    with write_to(sys.argv[2] if len(sys.argv) > 2 else "-") as stream:
        stream.set_columns("image", "label", "blob")
        for index in range(count):
            stream.write(np.full((64, 64), index, np.float32), f"label {index}", bytes([index % 256]) * index)
    """
)

CONSUMER = textwrap.dedent(
    """
    import json
    import sys
    from datamount.readers.stream import read_from
    stream = read_from(sys.argv[1] if len(sys.argv) > 1 else "-")
    total = 0
    for index, entry in enumerate(stream):
        if entry["image"].shape != (64, 64) or entry["label"] != f"label {index}":
            raise SystemExit(f"entry {index} is wrong: {entry}")
        total += int(entry["image"][0, 0]) + len(entry["blob"])
    print(json.dumps({"columns": stream.columns, "entries": stream.entries, "total": total}))
    """
)


def run_pipeline(producer: list[str], consumer: list[str], timeout: float = 60) -> tuple[int, str, int, str, str]:
    """Run ``producer | consumer`` as real processes; their exit statuses, the consumer's output, both stderrs."""
    with subprocess.Popen(producer, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as first:
        assert first.stdout is not None
        second = subprocess.run(consumer, stdin=first.stdout, capture_output=True, timeout=timeout, check=False)
        first.stdout.close()
        first_err = first.stderr.read().decode() if first.stderr else ""
        first.wait(timeout=timeout)
    return first.returncode, first_err, second.returncode, second.stdout.decode(), second.stderr.decode()


@pytest.mark.parametrize(("target", "source"), [("-", "-"), ("/dev/stdout", "/dev/stdin")], ids=["dash", "dev"])
def test_a_stream_crosses_an_os_pipe_between_processes(target: str, source: str) -> None:
    count = 300
    status, err, consumer_status, out, consumer_err = run_pipeline(
        [sys.executable, "-c", PRODUCER, str(count), target], [sys.executable, "-c", CONSUMER, source]
    )
    assert (status, err, consumer_status, consumer_err) == (0, "", 0, "")
    expected = sum(index + index for index in range(count))
    assert json.loads(out) == {"columns": ["image", "label", "blob"], "entries": count, "total": expected}


def test_a_consumer_leaving_early_ends_the_producer_quietly() -> None:
    stop_early = "import sys; sys.stdin.buffer.read(100)"
    status, err, consumer_status, _, _ = run_pipeline(
        [sys.executable, "-c", PRODUCER, "5000"], [sys.executable, "-c", stop_early]
    )
    assert (status, err, consumer_status) == (141, "", 0)


def test_a_producer_dying_midway_is_an_error_for_the_consumer() -> None:
    dies = PRODUCER + "\n        if index == 2000: import os; os._exit(3)"
    status, _, consumer_status, _, consumer_err = run_pipeline(
        [sys.executable, "-c", dies, "5000"], [sys.executable, "-c", CONSUMER]
    )
    assert (status, consumer_status) == (3, 1)
    assert "datamount.datasets.errors.StreamFormatError: stdin: the stream" in consumer_err


# ------------------------------------------------------------------------------------------------ Node.js

APACHE_ARROW_NPM = "21.1.0"

NODE_READER = """
import { readFileSync } from 'node:fs';
import { tableFromIPC } from 'apache-arrow';

function plain(value) {
  if (value === null || value === undefined) return null;
  if (typeof value === 'bigint') return { int: value.toString() };
  if (value instanceof Uint8Array) return { hex: Buffer.from(value).toString('hex') };
  if (typeof value === 'object' && typeof value.toArray === 'function') return Array.from(value.toArray(), plain);
  return value;
}

const table = tableFromIPC(readFileSync(0));
const result = { metadata: Object.fromEntries(table.schema.metadata), fields: {} };
for (const field of table.schema.fields) {
  result.fields[field.name] = {
    type: String(field.type),
    metadata: Object.fromEntries(field.metadata),
    values: Array.from(table.getChild(field.name), plain),
  };
}
process.stdout.write(JSON.stringify(result));
"""

NODE_WRITER = """
import {
  Binary, Field, FixedSizeList, Float32, Float64, Int64, RecordBatch, Schema, Struct, Table, Utf8,
  makeData, tableToIPC, vectorFromArray,
} from 'apache-arrow';

const tensorType = new FixedSizeList(6, new Field('item', new Float32(), false));
const tensorMetadata = new Map([
  ['ARROW:extension:name', 'arrow.fixed_shape_tensor'],
  ['ARROW:extension:metadata', JSON.stringify({ shape: [2, 3] })],
]);
const schema = new Schema([
  new Field('text', new Utf8(), true),
  new Field('blob', new Binary(), true),
  new Field('count', new Int64(), true),
  new Field('score', new Float64(), true),
  new Field('tensor', tensorType, false, tensorMetadata),
]);
const columns = [
  vectorFromArray(['plain', 'ünïcode ✓', null], new Utf8()).data[0],
  vectorFromArray([Uint8Array.of(0, 1, 255), Uint8Array.of(), Uint8Array.of(42)], new Binary()).data[0],
  vectorFromArray([1n, -(2n ** 63n), 2n ** 63n - 1n], new Int64()).data[0],
  vectorFromArray([0.5, -1e300, 3.25], new Float64()).data[0],
  makeData({
    type: tensorType, length: 3, nullCount: 0,
    child: makeData({ type: new Float32(), length: 18, data: Float32Array.from({ length: 18 }, (_, i) => i / 2) }),
  }),
];
const data = makeData({ type: new Struct(schema.fields), length: 3, nullCount: 0, children: columns });
process.stdout.write(tableToIPC(new Table([new RecordBatch(schema, data)]), 'stream'));
"""


@pytest.fixture(scope="session")
def node_arrow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the npm package apache-arrow installed and the two scripts, or a skip saying why not."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the Node.js interop tests need node and npm on PATH")
    folder = tmp_path_factory.mktemp("node-arrow")
    command = [npm, "install", "--no-audit", "--no-fund", "--prefer-offline", f"apache-arrow@{APACHE_ARROW_NPM}"]
    try:
        installed = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=100, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install apache-arrow@{APACHE_ARROW_NPM} took more than 100 s")
    if installed.returncode != 0:
        pytest.skip(f"npm install apache-arrow@{APACHE_ARROW_NPM} failed: {installed.stderr.strip()[-400:]}")
    (folder / "read.mjs").write_text(NODE_READER, encoding="utf-8")
    (folder / "write.mjs").write_text(NODE_WRITER, encoding="utf-8")
    return folder


def run_node(folder: Path, script: str, data: bytes = b"") -> bytes:
    result = subprocess.run(["node", script], cwd=folder, input=data, capture_output=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout


@pytest.mark.network
@pytest.mark.slow
def test_node_reads_a_stream_written_by_datamount(node_arrow: Path) -> None:
    tensors = [np.arange(6, dtype=np.float32).reshape(2, 3) + i / 4 for i in range(3)]
    entries = [(f"é{i}", bytes([0, 255, i]), -(2**62) + i, i / 3, tensors[i]) for i in range(3)]
    data = stream_bytes(("text", "blob", "count", "score", "tensor"), entries)
    seen = json.loads(run_node(node_arrow, "read.mjs", data))
    fields = seen["fields"]
    assert seen["metadata"] == {"datamount.stream": "1.0"}
    assert fields["text"]["values"] == ["é0", "é1", "é2"]
    assert fields["blob"]["values"] == [{"hex": bytes([0, 255, i]).hex()} for i in range(3)]
    assert fields["count"]["values"] == [{"int": str(-(2**62) + i)} for i in range(3)]
    assert fields["score"]["values"] == [i / 3 for i in range(3)]
    assert fields["tensor"]["type"] == "FixedSizeList[6]<Float32>"
    assert fields["tensor"]["metadata"]["ARROW:extension:name"] == "arrow.fixed_shape_tensor"
    assert json.loads(fields["tensor"]["metadata"]["ARROW:extension:metadata"])["shape"] == [2, 3]
    assert fields["tensor"]["values"] == [tensor.reshape(-1).tolist() for tensor in tensors]


@pytest.mark.network
@pytest.mark.slow
def test_datamount_reads_a_stream_written_by_node(node_arrow: Path) -> None:
    stream = read_from(io.BytesIO(run_node(node_arrow, "write.mjs")))
    entries = list(stream)
    assert stream.version is None  # not a datamount stream: read as any Arrow stream
    assert [e["text"] for e in entries] == ["plain", "ünïcode ✓", None]
    assert [e["blob"] for e in entries] == [b"\x00\x01\xff", b"", b"*"]
    assert [e["count"] for e in entries] == [1, -(2**63), 2**63 - 1]
    assert [e["score"] for e in entries] == [0.5, -1e300, 3.25]
    for index, entry in enumerate(entries):
        assert_same_array(entry["tensor"], (np.arange(6, dtype=np.float32) / 2 + 3 * index).reshape(2, 3))
