"""How an imported sample becomes a row: the image/label form (an ``image`` version, read as ``(image bytes, label)``
like an uploaded ``.list``), or the table form (a ``table`` version with the sample's fields as columns).

The rule (``docs/importing.md`` has it with examples):

- ``--columns`` asks for the table form with those fields, in that order.
- ``--image-field`` (and ``--label-field``) ask for the image form with those fields.
- Otherwise a source whose samples have exactly two fields beside their key, one an image file and the other a
  class, takes the image form; any other takes the table form with every field (the key included).

A field is an image file when the format says so (:data:`~.source.IMAGE_EXTENSION`) or when it is ``binary`` and
its first sample's bytes start as an image file's do (JPEG, PNG, GIF, BMP, WebP, TIFF). A field is a class when it
is an integer or a string, or ``binary`` named as WebDataset names a class or a caption (``cls``, ``txt``...).

In the image form a row's label is its class as text: an integer in decimal, bytes as UTF-8, without the spaces and
line ends around it (WebDataset's ``.cls`` files end with one); a label that is empty, null, not UTF-8 or holds a TAB
or a line end is refused (a ``.list`` could not hold it). A row's path is its key with the image's extension
(``n01440764/000017.jpg``), or, where the format has no keys, the row's number (nine digits at least); the extension
is the format's, else the one the bytes say, else ``bin``. A path that is absolute, climbs out (``..``) or is not
plain is refused.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datamount.datasets.imports.source import IMAGE_EXTENSION, KEY_FIELD
from datamount.datasets.shard_writer import INDEX_COLUMN
from datamount.storage.errors import DatamountError

#: An image file's first bytes, and the extension a file with them gets.
MAGIC = (
    (b"\xff\xd8\xff", "jpg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tif"),
    (b"MM\x00*", "tif"),
)
#: Binary fields that hold a class or a caption as text, by WebDataset's names.
LABEL_NAMES = frozenset({"cls", "cls2", "class", "label", "labels", "index", "target", "txt", "text"})


class MappingError(DatamountError, ValueError):
    """A source's fields do not fit the form asked for (a field missing, of the wrong type, or no image)."""


@dataclass(frozen=True)
class ImageForm:
    """Rows as ``(image bytes, label)`` with a path each: the fields that give them."""

    image: str
    label: str
    key: str | None
    extension: str | None

    @property
    def columns(self) -> list[str]:
        return ["file", "label"]


@dataclass(frozen=True)
class TableForm:
    """Rows with the source's ``fields`` as columns, in that order."""

    fields: list[str]

    def schema(self, source: pa.Schema) -> pa.Schema:
        return pa.schema([source.field(name) for name in self.fields], metadata=source.metadata)

    @property
    def columns(self) -> list[str]:
        return list(self.fields)


Form = ImageForm | TableForm


def choose_form(
    schema: pa.Schema,
    first: pa.RecordBatch | None,
    *,
    image_field: str | None = None,
    label_field: str | None = None,
    columns: Sequence[str] | None = None,
) -> Form:
    """The form of a source with ``schema`` whose first rows are ``first`` (see the module's rule)."""
    if columns is not None:
        if image_field or label_field:
            raise MappingError("--columns asks for the table form; --image-field and --label-field for the image form")
        return TableForm(_table_fields(schema, list(columns)))
    key = KEY_FIELD if KEY_FIELD in schema.names else None
    if image_field or label_field:
        image = image_field or _only(schema, first, _is_image, "an image file", exclude={label_field, key})
        label = label_field or _only(schema, first, _is_class, "a class", exclude={image, key})
        _require(schema, image, "--image-field")
        _require(schema, label, "--label-field")
        if not _is_image(schema.field(image), first):
            raise MappingError(f"the field {image!r} holds no image file (its first sample's bytes are not one)")
        if not _is_class(schema.field(label), first):
            raise MappingError(f"the field {label!r} is not a class: an integer, a string, or a binary {LABEL_NAMES}")
        return ImageForm(image, label, key, _extension(schema.field(image)))
    fields = [name for name in schema.names if name != key]
    if len(fields) == 2:
        for image, label in (fields, fields[::-1]):
            if _is_image(schema.field(image), first) and _is_class(schema.field(label), first):
                return ImageForm(image, label, key, _extension(schema.field(image)))
    return TableForm(_table_fields(schema, list(schema.names)))


def needs_first_rows(schema: pa.Schema) -> bool:
    """Whether the form of a source with ``schema`` depends on its first rows: whether it has a binary field that
    could be an image file but that its format did not mark as one."""
    return any(_is_binary(field) and not _extension(field) and not _is_class(field, None) for field in schema)


def image_rows(
    form: ImageForm, batch: pa.RecordBatch, first_row: int
) -> tuple[pa.Array, list[str], list[str]] | tuple[str, int]:
    """A batch of ``form``'s rows (``first_row``: the first one's number in the version): its images, labels and
    paths; or, where a row is refused, ``(why, its number in the batch)``."""
    images = batch.column(form.image)
    if images.null_count:
        return "it has no image", _first_null(images)
    labels, bad = _labels(batch.column(form.label))
    if bad is not None:
        return bad
    keys = batch.column(form.key).to_pylist() if form.key else [f"{first_row + n:09d}" for n in range(len(batch))]
    heads = [bytes(view[:12]) for view in value_views(images)] if form.extension is None else [None] * len(images)
    paths = []
    for number, (key, head) in enumerate(zip(keys, heads, strict=True)):
        extension = form.extension or _magic(head) or "bin"
        path = f"{key}.{extension}"
        if not _plain_path(path):
            return f"its key {key!r} does not make a plain relative path", number
        paths.append(path)
    return images.cast(pa.binary()), labels, paths


def _labels(column: pa.Array) -> tuple[list[str], tuple[str, int] | None]:
    if column.null_count:
        return [], ("it has no label", _first_null(column))
    if pa.types.is_integer(column.type):
        return [str(value) for value in column.to_pylist()], None
    values = column.to_pylist()
    labels = []
    for number, value in enumerate(values):
        try:
            text = (value.decode() if isinstance(value, bytes) else value).strip()
        except UnicodeDecodeError:
            return [], ("its label is not UTF-8 text", number)
        if not text or any(c in text for c in "\t\n\r"):
            return [], (f"its label {text!r} is empty or holds a TAB or a line end", number)
        labels.append(text)
    return labels, None


def value_views(values: pa.Array) -> list[memoryview]:
    """Each value of a ``binary`` (or ``large_binary``) array with no nulls, as a view of the array's data buffer:
    no value is copied."""
    offsets = np.frombuffer(values.buffers()[1], np.int32 if values.type == pa.binary() else np.int64)
    ends = offsets[values.offset : values.offset + len(values) + 1].tolist()
    data = memoryview(values.buffers()[2]) if values.buffers()[2] is not None else memoryview(b"")
    return [data[start:stop] for start, stop in itertools.pairwise(ends)]


def _first_null(column: pa.Array) -> int:
    return int(pc.index(pc.is_null(column), True).as_py())


def _plain_path(path: str) -> bool:
    if not path or path.startswith("/") or any(c in path for c in "\t\n\r\x00\\"):
        return False
    return posixpath.normpath(path) == path and not path.startswith("../") and path != ".."


def _magic(data: bytes | None) -> str | None:
    if data is None:
        return None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return next((extension for start, extension in MAGIC if data.startswith(start)), None)


def _extension(field: pa.Field) -> str | None:
    stated = (field.metadata or {}).get(IMAGE_EXTENSION)
    return stated.decode() if stated else None


def _is_binary(field: pa.Field) -> bool:
    return pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)


def _is_image(field: pa.Field, first: pa.RecordBatch | None) -> bool:
    if not _is_binary(field):
        return False
    if _extension(field):
        return True
    if first is None or first.num_rows == 0:
        return False
    return _magic(first.column(field.name)[0].as_py()) is not None


def _is_class(field: pa.Field, first: pa.RecordBatch | None) -> bool:
    kind = field.type
    if pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return True
    return pa.types.is_binary(kind) and field.name.rsplit(".", 1)[-1] in LABEL_NAMES


def _only(schema: pa.Schema, first: pa.RecordBatch | None, test: object, what: str, *, exclude: set[str | None]) -> str:
    matching = [f.name for f in schema if f.name not in exclude and test(f, first)]  # type: ignore[operator]
    if len(matching) != 1:
        found = ", ".join(matching) or "none"
        raise MappingError(f"name the field that holds {what}: the source has {found} (fields: {schema.names})")
    return matching[0]


def _require(schema: pa.Schema, name: str, option: str) -> None:
    if name not in schema.names:
        raise MappingError(f"{option} {name!r}: the source has no such field (fields: {', '.join(schema.names)})")


def _table_fields(schema: pa.Schema, fields: list[str]) -> list[str]:
    for name in fields:
        _require(schema, name, "--columns")
    if len(set(fields)) != len(fields):
        raise MappingError(f"--columns names a field twice: {fields}")
    if INDEX_COLUMN in fields:
        raise MappingError(
            f"the field {INDEX_COLUMN!r} would take the name of the row number's column; leave it out with --columns"
        )
    return fields
