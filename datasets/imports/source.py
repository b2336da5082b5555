"""What an importer reads: a dataset in another tool's format, as checked Arrow record batches, shard by shard.

Every format (:mod:`.webdataset`, :mod:`.mds`, :mod:`.litdata`, :mod:`.hf`, :mod:`.parquet`) opens its SOURCE as a
:class:`Source`: its shards in order (each a file of the source, with the split it belongs to), one Arrow schema
that every batch of every shard has, and the rows of a shard from a given row on. The format checks what it can:
sizes and checksums its own index records, a shard that ends before its index says, a member that cannot be
decoded. Anything wrong is a :class:`SourceError` naming the shard and the sample; :mod:`.writer` then commits
nothing.

A field that holds an image file's bytes (``binary``) may say so in its metadata (:data:`IMAGE_EXTENSION`: the
extension the format gave it, ``jpg``); :mod:`.mapping` otherwise tells an image by its first bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from datamount.storage.errors import DatamountError

#: Field metadata: the file extension of an image field, as the source named it (``jpg``, ``png``).
IMAGE_EXTENSION = b"datamount.import.extension"
#: Field metadata: the encoding the source recorded for a field whose bytes are kept as they were (MDS's ``pil``,
#: litdata's ``numpy``...), so that a reader can decode them as the source tool would.
SOURCE_ENCODING = b"datamount.import.encoding"
#: The column of a sample's key, where the format has keys (WebDataset's ``__key__``).
KEY_FIELD = "__key__"
#: Rows in a batch a format yields, at most (the writer cuts row groups by bytes, not by batches).
BATCH_ROWS = 1024


class SourceError(DatamountError, ValueError):
    """A source is damaged, truncated or not what its format says: names the source, the shard and, when known,
    the sample (its number in the shard, from 0)."""

    def __init__(self, where: str, shard: str, reason: str, *, sample: int | None = None) -> None:
        self.where, self.shard, self.sample, self.reason = where, shard, sample, reason
        at = f"{shard}, sample {sample}" if sample is not None else shard
        super().__init__(f"{where}: {at}: {reason}")


@dataclass(frozen=True)
class SourceShard:
    """One file of a source, in the order its rows come: its name (relative to the source, as messages print it),
    its size in bytes, its rows where the format's index records them, and its split (``""``: none)."""

    name: str
    size: int
    rows: int | None = None
    split: str = ""


class Source(Protocol):
    """A dataset in another tool's format, opened for import (see the module's rule)."""

    #: The format's name, as ``--from-format`` spells it.
    format: str
    #: The source as messages and the manifest print it (a URL without credentials, or a local path).
    where: str
    #: The columns of every batch, with their Arrow types (and :data:`IMAGE_EXTENSION` / :data:`SOURCE_ENCODING`).
    schema: pa.Schema
    #: The shards, in row order (a split's shards together, splits in order).
    shards: Sequence[SourceShard]

    def batches(self, shard: int, skip: int = 0) -> Iterator[pa.RecordBatch]:
        """The rows of shard number ``shard`` after its first ``skip``, checked, in batches of at most
        :data:`BATCH_ROWS` rows of :attr:`schema`; a :class:`SourceError` where the shard is wrong."""
        ...


def identity(source: Source) -> str:
    """A digest of what decides a source's rows: its format, its schema and its shards' names, sizes and splits
    (an import resumed after a kill goes on only over the same source)."""
    digest = hashlib.sha256(f"{source.format}\n{source.schema}\n".encode())
    for shard in source.shards:
        digest.update(f"{shard.name}\t{shard.size}\t{shard.rows}\t{shard.split}\n".encode())
    return digest.hexdigest()
