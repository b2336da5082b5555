"""Streams of entries between programs through Unix pipes, in the Arrow IPC stream format.

``write_to("-")`` writes entries to stdout and ``read_from("-")`` reads them from stdin, so programs chain with ``|``::

    datamount cat cats | python preprocess.py | python train.py

Any language with an Arrow library reads and writes the same bytes. The format, its type mapping and its versioning
are described in ``docs/stream.md``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import sys
from collections.abc import Generator, Iterable, Iterator, Sequence
from types import TracebackType
from typing import IO, Any, Union

import pyarrow as pa

from datamount.datasets.arrow_codec import ColumnEncoder, batch_rows, column_decoder, entry_size, infer_encoder
from datamount.datasets.errors import StreamFormatError
from datamount.datasets.importing import import_batches
from datamount.datasets.manifest import Manifest
from datamount.datasets.names import validate_name
from datamount.datasets.progress import Progress
from datamount.datasets.reader_creator import ReaderCreator
from datamount.datasets.shard_writer import DEFAULT_ROW_GROUP_BYTES, DEFAULT_SHARD_BYTES, INDEX_COLUMN
from datamount.storage import Store, arguments

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_BATCH_ENTRIES",
    "StreamFormatError",
    "StreamReader",
    "StreamReaderCreator",
    "StreamWriter",
    "import_stream",
    "read_from",
    "stream_reader",
    "write_to",
]

#: A stream's source or target: a path, ``"-"`` (stdin or stdout), ``"/dev/stdin"``, ``"/dev/stdout"``, or a binary
#: file object.
StreamTarget = Union[str, "os.PathLike[str]", IO[bytes]]

#: Schema metadata naming the stream format and its version; readers accept any minor version of their major one.
FORMAT_KEY = b"datamount.stream"
FORMAT_VERSION = "1.0"
FORMAT_MAJOR = 1

DEFAULT_MAX_BATCH_ENTRIES = 1024
DEFAULT_MAX_BATCH_BYTES = 1 << 20

_STDIN_NAMES = ("-", "/dev/stdin")
_STDOUT_NAMES = ("-", "/dev/stdout")
_CONTINUATION = b"\xff\xff\xff\xff"
_END_OF_STREAM = b"\x00\x00\x00\x00"
_SIGPIPE_EXIT_STATUS = 128 + 13


# ------------------------------------------------------------------------------------------------ writing


def write_to(
    target: StreamTarget,
    *,
    max_batch_entries: int = DEFAULT_MAX_BATCH_ENTRIES,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> StreamWriter:
    """A writer of entries to ``target`` as an Arrow IPC stream.

    Parameters
    ----------
    target
        A path (written to a temporary name, renamed on a successful ``close``; a FIFO or device is written in
        place), ``"-"`` or ``"/dev/stdout"`` for standard output, or a binary file object.
    max_batch_entries, max_batch_bytes
        Entries are grouped into one Arrow record batch until either limit is reached (or ``flush``/``close``).

    Returns
    -------
    StreamWriter
        Call ``set_columns(*names)`` first, then ``write(*values)`` once per entry; use it in a ``with`` block.
    """
    return StreamWriter(target, max_batch_entries=max_batch_entries, max_batch_bytes=max_batch_bytes)


class StreamWriter:
    """Writes entries (one value per column) as an Arrow IPC stream; see :func:`write_to`.

    The first record batch fixes each column's Arrow type; a later value that does not fit raises
    :class:`StreamFormatError` naming the column and the entry. If the ``with`` block fails, or the writer is never
    closed, the stream gets no end-of-stream marker, so datamount readers report it as cut short. When the target is
    standard output and the reading program has gone away, the writer ends the program quietly with exit status
    141, as ``cat`` does; for other targets it raises ``BrokenPipeError``.
    """

    def __init__(self, target: StreamTarget, *, max_batch_entries: int, max_batch_bytes: int) -> None:
        self.max_batch_entries = arguments.whole_number(max_batch_entries, "max_batch_entries", minimum=1)
        self.max_batch_bytes = arguments.whole_number(max_batch_bytes, "max_batch_bytes", minimum=1)
        self._sink = _Sink(target)
        self.target = self._sink.name
        self.columns: tuple[str, ...] = ()
        self.batches = 0
        self._columns_set = False
        self._variable_shape: frozenset[str] = frozenset()
        self._pending: list[tuple[Any, ...]] = []
        self._pending_bytes = 0
        self._flushed = 0
        self._encoders: list[ColumnEncoder] = []
        self._schema: pa.Schema | None = None
        self._ipc: pa.ipc.RecordBatchStreamWriter | None = None
        self._closed = False
        self._failed = False

    def __repr__(self) -> str:
        return f"StreamWriter({self.target!r}, columns={self.columns}, entries={self.entries})"

    @property
    def entries(self) -> int:
        """How many entries were written so far (including those not yet flushed)."""
        return self._flushed + len(self._pending)

    def set_columns(self, *names: str, variable_shape: Iterable[str] = ()) -> None:
        """Name the columns, in the order ``write`` takes their values; call it once, before the first write.

        Parameters
        ----------
        names
            Distinct, non-empty column names.
        variable_shape
            Columns of numpy arrays stored as variable-shape tensors even when the first batch's arrays all have
            the same shape (otherwise such a column is fixed to that shape).
        """
        if self._columns_set or self.entries:
            raise ValueError(f"{self.target}: set_columns must be called once, before the first write")
        if not names or not all(isinstance(name, str) and name for name in names):
            raise ValueError(f"{self.target}: set_columns needs one or more non-empty str names, got {names!r}")
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"{self.target}: column names must be distinct; repeated: {', '.join(repeated)}")
        variable = frozenset(variable_shape)
        unknown = sorted(variable - set(names))
        if unknown:
            raise ValueError(f"{self.target}: variable_shape names unknown columns: {', '.join(unknown)}")
        self.columns = tuple(names)
        self._variable_shape = variable
        self._columns_set = True

    def write(self, *values: Any) -> None:
        """Write one entry: one value per column, in ``set_columns`` order."""
        if self._closed or self._failed:
            state = "closed" if self._closed else "broken by an earlier error"
            raise ValueError(f"{self.target}: the stream writer is {state}")
        if not self._columns_set:
            raise ValueError(f"{self.target}: call set_columns('name', ...) before the first write")
        if len(values) != len(self.columns):
            raise StreamFormatError(
                f"{self.target}: entry {self.entries:,} has {len(values)} values for the "
                f"{len(self.columns)} columns {', '.join(self.columns)}"
            )
        self._pending.append(values)
        self._pending_bytes += entry_size(values)
        if len(self._pending) >= self.max_batch_entries or self._pending_bytes >= self.max_batch_bytes:
            self._write_pending()

    def write_many(self, entries: Iterable[Sequence[Any]]) -> None:
        """Write each of ``entries`` (sequences of one value per column)."""
        for entry in entries:
            self.write(*entry)

    def flush(self) -> None:
        """Send the entries written so far as a record batch now, rather than when the batch is full."""
        self._write_pending()
        with self._broken_pipe_guard():
            self._sink.file.flush()

    def close(self) -> None:
        """Write what is left and the end-of-stream marker, then commit the target (rename a file into place)."""
        if self._closed:
            return
        if self._failed:
            self._abort()
            return
        try:
            self._write_pending()
            ipc = self._ipc or self._start([() for _ in self.columns])
            with self._broken_pipe_guard():
                ipc.close()
                self._sink.file.flush()
        except BaseException:
            self._abort()
            raise
        self._closed = True
        self._sink.commit()

    def __enter__(self) -> StreamWriter:
        return self

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):  # never closed: no end marker, and no temporary file left behind
            self._abort()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()

    def _abort(self) -> None:
        """End without the end-of-stream marker (readers see a stream cut short); remove a temporary file."""
        self._closed = True
        self._failed = True
        self._pending = []
        self._sink.abort()

    def _start(self, columns: Sequence[Sequence[Any]]) -> pa.ipc.RecordBatchStreamWriter:
        """Fix the columns' types from the first batch's values and begin the stream with its schema."""
        self._encoders = [
            infer_encoder(self.target, name, values, variable_shape=name in self._variable_shape)
            for name, values in zip(self.columns, columns, strict=True)
        ]
        metadata = {FORMAT_KEY: FORMAT_VERSION.encode("ascii")}
        self._schema = pa.schema([encoder.field for encoder in self._encoders], metadata=metadata)
        with self._broken_pipe_guard():
            self._ipc = pa.ipc.new_stream(self._sink.file, self._schema)
        return self._ipc

    def _write_pending(self) -> None:
        if not self._pending:
            return
        entries, self._pending, self._pending_bytes = self._pending, [], 0
        try:
            columns = list(zip(*entries, strict=True))
            ipc = self._ipc or self._start(columns)
            arrays = [
                encoder.encode(values, self._flushed) for encoder, values in zip(self._encoders, columns, strict=True)
            ]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
            with self._broken_pipe_guard():
                ipc.write_batch(batch)
                self._sink.file.flush()  # the reader gets each batch whole now, not when the next one comes
        except BaseException:
            self._failed = True  # a lost batch: the stream must not end as if it were complete
            raise
        self._flushed += len(entries)
        self.batches += 1

    @contextlib.contextmanager
    def _broken_pipe_guard(self) -> Iterator[None]:
        try:
            yield
        except OSError as exc:  # pyarrow's own write errors (ArrowIOError) are OSErrors too
            if not _is_broken_pipe(exc):
                raise
            self._abort()
            if self._sink.is_stdout:
                _exit_quietly(self._sink.file)
            raise BrokenPipeError(errno.EPIPE, f"{self.target}: the program reading the stream went away") from None


def _is_broken_pipe(exc: OSError) -> bool:
    return isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE or "Broken pipe" in str(exc)


def _exit_quietly(stdout: IO[bytes]) -> None:
    """End the program as ``cat`` does when its reader goes away: no message, exit status 141 (128 + SIGPIPE)."""
    descriptor = _fileno(stdout)
    if descriptor is not None:  # point it at /dev/null, so that flushing stdout at exit fails no more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)
    raise SystemExit(_SIGPIPE_EXIT_STATUS)


class _Sink:
    """Where a writer's bytes go, and how the target is committed or abandoned."""

    def __init__(self, target: StreamTarget) -> None:
        self.path: str | None = None
        self.temporary: str | None = None
        self.owned = False
        if isinstance(target, str) and target in _STDOUT_NAMES:
            if getattr(sys.stdout, "buffer", None) is None:
                raise ValueError("standard output is closed or not binary (no sys.stdout.buffer); pass a file object")
            sys.stdout.flush()
            self.file: IO[bytes] = sys.stdout.buffer
            self.name = "stdout"
            self.is_stdout = True
        elif isinstance(target, (str, os.PathLike)):
            self.name = self.path = os.fspath(target)
            self.file = self._open_path(self.path)
            self.owned = True
            self.is_stdout = False
        elif callable(getattr(target, "write", None)):
            self.file = target
            self.name = str(getattr(target, "name", None) or f"<{type(target).__name__}>")
            self.is_stdout = _fileno(target) == 1
        else:
            raise TypeError(f"a stream target is a path, '-' or a binary file object, not {type(target).__name__}")
        widen_pipe(self.file)

    def _open_path(self, path: str) -> IO[bytes]:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):  # a FIFO, a device: written in place
            return open(path, "wb")
        folder, base = os.path.split(os.path.abspath(path))
        self.temporary = os.path.join(folder, f".{base}.{secrets.token_hex(4)}.partial")
        try:
            descriptor = os.open(self.temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileNotFoundError:
            self.temporary = None
            raise FileNotFoundError(errno.ENOENT, "no such folder for the stream", path) from None
        return os.fdopen(descriptor, "wb")

    def commit(self) -> None:
        if self.owned:
            self.file.close()
        if self.temporary is not None and self.path is not None:
            os.replace(self.temporary, self.path)
            self.temporary = None

    def abort(self) -> None:
        if self.owned:
            with contextlib.suppress(OSError):
                self.file.close()
        if self.temporary is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temporary)
            self.temporary = None


#: A pipe buffer this large lets one 1 MiB batch cross in one go: ~3x the throughput of the 64 KiB default here.
PIPE_BUFFER_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031  # Linux's fcntl command; Python's fcntl module names it only from 3.10 on some builds


def widen_pipe(file: Any) -> None:
    """Grow the kernel buffer of ``file`` if it is a pipe (Linux; capped by /proc/sys/fs/pipe-max-size)."""
    descriptor = _fileno(file)
    if descriptor is None or sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            fcntl.fcntl(descriptor, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), PIPE_BUFFER_BYTES)


def _fileno(file: Any) -> int | None:
    try:
        return int(file.fileno())
    except (AttributeError, OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------------ reading


def read_from(source: StreamTarget, *, writable: bool = False) -> StreamReader:
    """The entries of the stream in ``source``, as dicts ``{column: value}`` in order.

    Parameters
    ----------
    source
        A path, ``"-"`` or ``"/dev/stdin"`` for standard input, or a binary file object. Any Arrow IPC stream is
        read, whichever program or language wrote it.
    writable
        Numpy arrays come back as read-only views of the received bytes (no copy); ``True`` copies them instead.

    Returns
    -------
    StreamReader
        An iterator of dicts (``.rows()`` gives tuples in column order); its ``columns`` and ``schema`` are known
        once it is made, since the stream's schema is read then.

    Raises
    ------
    StreamFormatError
        The input is empty, not an Arrow stream, cut short, or in a newer datamount stream format.
    """
    return StreamReader(source, writable=writable)


class StreamReader(Iterator[dict[str, Any]]):
    """The entries of one stream, read once; see :func:`read_from`.

    A stream that says it was written by datamount must end with its end-of-stream marker: one that stops without
    it (the writing program failed or was killed) raises :class:`StreamFormatError` after its last entry.
    """

    def __init__(self, source: StreamTarget, *, writable: bool = False) -> None:
        self._input = _Input(source)
        self.source = self._input.name
        try:
            self._ipc = pa.ipc.open_stream(pa.PythonFile(self._input, mode="r"))
            self.schema: pa.Schema = self._ipc.schema
            self.version = _format_version(self.source, self.schema)
        except (pa.ArrowException, OSError) as exc:  # pyarrow reports a short read as a plain OSError
            self._input.release()
            if self._input.failed:
                raise
            raise self._open_error(exc) from None
        except BaseException:
            self._input.release()
            raise
        self.columns: tuple[str, ...] = tuple(self.schema.names)
        self._decoders = [column_decoder(field, writable=writable) for field in self.schema]
        self.entries = 0
        self.batches = 0
        self._rows = self._generate_rows()

    def __repr__(self) -> str:
        return f"StreamReader({self.source!r}, columns={self.columns}, entries={self.entries})"

    def __iter__(self) -> StreamReader:
        return self

    def __next__(self) -> dict[str, Any]:
        return dict(zip(self.columns, next(self._rows), strict=True))

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """The remaining entries as tuples in column order (the same pass as iterating over the reader)."""
        return self._rows

    def close(self) -> None:
        """Stop reading; a source opened from a path is closed (standard input is left open)."""
        self._rows.close()
        self._input.release()

    def __enter__(self) -> StreamReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def record_batches(self) -> Iterator[pa.RecordBatch]:
        """The remaining entries as the stream's own Arrow record batches, undecoded (instead of iterating)."""
        return self._generate_batches()

    def _generate_rows(self) -> Generator[tuple[Any, ...], None, None]:
        for batch in self._generate_batches():
            yield from batch_rows(batch, self._decoders)

    def _generate_batches(self) -> Generator[pa.RecordBatch, None, None]:
        try:
            while True:
                try:
                    batch = self._ipc.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowException, OSError) as exc:
                    if self._input.failed:  # the source's own error (a disk error, a closed file), not the stream's
                        raise
                    raise self._truncated_error(exc) from None
                self.entries += batch.num_rows
                self.batches += 1
                yield batch
            if self.version is not None and not self._input.ended_with_marker:
                raise StreamFormatError(
                    f"{self.source}: the stream stopped after {self.entries:,} entries without its end-of-stream "
                    "marker: the program writing it did not finish (see its error output)"
                )
        finally:
            self._input.release()

    def _open_error(self, exc: Exception) -> StreamFormatError:
        head = self._input.head
        if self._input.position == 0:
            return StreamFormatError(f"{self.source}: no stream: the input is empty (did the program writing it fail?)")
        if not head.startswith(_CONTINUATION):
            return StreamFormatError(
                f"{self.source}: not an Arrow IPC stream: it starts with {head!r} "
                "(a stream written by datamount or any Arrow library starts with b'\\xff\\xff\\xff\\xff')"
            )
        return StreamFormatError(
            f"{self.source}: the stream's schema is cut short or corrupt after {self._input.position:,} bytes: {exc}"
        )

    def _truncated_error(self, exc: Exception) -> StreamFormatError:
        return StreamFormatError(
            f"{self.source}: the stream is cut short or corrupt after {self.entries:,} entries "
            f"({self.batches:,} record batches, {self._input.position:,} bytes read): {exc}"
        )


def _format_version(source: str, schema: pa.Schema) -> str | None:
    """The datamount stream format version in the schema's metadata (None for other Arrow streams)."""
    raw = (schema.metadata or {}).get(FORMAT_KEY)
    if raw is None:
        return None
    text = raw.decode("ascii", "replace")
    major = text.partition(".")[0]
    if not major.isdigit():
        raise StreamFormatError(f"{source}: unreadable datamount stream format version {text!r}")
    if int(major) > FORMAT_MAJOR:
        raise StreamFormatError(
            f"{source}: the stream is in datamount stream format {text}, newer than this datamount reads "
            f"({FORMAT_MAJOR}.x); upgrade datamount to read it"
        )
    return text


class _Input:
    """The source as pyarrow reads it, remembering what the error messages and the end-of-stream check need."""

    def __init__(self, source: StreamTarget) -> None:
        self.owned = False
        if isinstance(source, str) and source in _STDIN_NAMES:
            if getattr(sys.stdin, "buffer", None) is None:
                raise ValueError("standard input is closed or not binary (no sys.stdin.buffer); pass a file object")
            self.file: IO[bytes] = sys.stdin.buffer
            self.name = "stdin"
        elif isinstance(source, (str, os.PathLike)):
            self.name = os.fspath(source)
            self.file = open(self.name, "rb")  # noqa: SIM115 -- closed by release()
            self.owned = True
        elif callable(getattr(source, "read", None)):
            self.file = source
            self.name = str(getattr(source, "name", None) or f"<{type(source).__name__}>")
        else:
            raise TypeError(f"a stream source is a path, '-' or a binary file object, not {type(source).__name__}")
        widen_pipe(self.file)
        self.position = 0
        self.head = b""
        self.closed = False
        self.failed = False
        self._last_prefix = b""

    @property
    def ended_with_marker(self) -> bool:
        """Whether the last thing read was the end-of-stream marker (a zero message length)."""
        return self._last_prefix == _END_OF_STREAM

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._read_fully(size)
        except BaseException:
            self.failed = True
            raise
        if data:
            if self.position < len(_CONTINUATION) * 2:
                self.head = (self.head + bytes(data[:8]))[:8]
            self.position += len(data)
            # Message lengths and markers are read 4 bytes at a time; bodies and metadata in multiples of 8.
            self._last_prefix = bytes(data) if len(data) == 4 else b""
        return data

    def _read_fully(self, size: int) -> bytes:
        data = self.file.read(size)
        if data and size > 0 and len(data) < size:  # a raw pipe or socket returns what it has: read the rest
            parts, missing = [data], size - len(data)
            while missing and (more := self.file.read(missing)):
                parts.append(more)
                missing -= len(more)
            data = b"".join(parts)
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.closed = True
        if self.owned and not self.file.closed:
            self.file.close()


# ------------------------------------------------------------------------------------------------ readers


def stream_reader(source: StreamTarget, *, writable: bool = False) -> StreamReaderCreator:
    """A reader creator over a stream, for the reader decorators: each call yields tuples in column order.

    ``batch(stream_reader("-"), 32)`` batches the entries arriving on stdin. A path is opened again for each pass;
    standard input and file objects can be read once, so a second pass over them raises ``ValueError`` (wrap the
    reader in ``datamount.readers.cache`` to read it again).
    """
    return StreamReaderCreator(source, writable=writable)


class StreamReaderCreator(ReaderCreator):
    """A picklable zero-argument reader creator over a stream; see :func:`stream_reader`."""

    def __init__(self, source: StreamTarget, *, writable: bool = False) -> None:
        self.source = source
        self.writable = writable
        self.passes = 0

    def __repr__(self) -> str:
        return f"stream_reader({self.source!r})"

    def made_by(self) -> str:
        return repr(self)

    def __call__(self) -> Iterator[tuple[Any, ...]]:
        return self._rows()

    def _rows(self) -> Iterator[tuple[Any, ...]]:
        reopens = isinstance(self.source, (str, os.PathLike)) and self.source not in _STDIN_NAMES
        if self.passes and not reopens:
            raise ValueError(
                f"{self!r} was read already and standard input or a file object can be read once; "
                "wrap it in datamount.readers.cache(...) to read it more than once"
            )
        self.passes += 1
        with read_from(self.source, writable=self.writable) as stream:
            yield from stream.rows()


# ------------------------------------------------------------------------------------------------ importing


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
    plus ``index`` (:func:`datamount.datasets.importing.import_batches`). The version exists only once the whole
    stream has been read and ended properly: a stream that is cut short, corrupt or not finished by its writer raises
    :class:`StreamFormatError` and commits nothing.
    """
    validate_name(name)
    with read_from(source) as stream:
        if INDEX_COLUMN in stream.columns:
            raise StreamFormatError(f"{stream.source}: a column named 'index' is reserved for the row number")
        named = stream.source if stream.source in ("<stdin>", "-") else os.path.basename(stream.source)
        return import_batches(
            stream.record_batches(),
            stream.schema,
            name,
            store=store,
            source=named,
            shard_bytes=shard_bytes,
            row_group_bytes=row_group_bytes,
            progress=progress,
        )
