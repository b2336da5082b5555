"""A part of a version not found while its rows are read: one error that names the version, the rows that need the
part, the part's URL and what puts it back (as a damaged part's :class:`~datamount.storage.IntegrityError` does).

The row sources raise these; a front end that opened the version earlier (a reader, a mount) passes each through
:func:`removed_or_missing`, which tells a version removed since then (``catalog.removed_while_read``) from a part
lost by the store.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from datamount.datasets import catalog, layout
from datamount.datasets.errors import MissingPartError
from datamount.datasets.manifest import Manifest, ShardEntry
from datamount.datasets.repairs import object_repair, shard_repair
from datamount.storage import ObjectNotFoundError, Store

if TYPE_CHECKING:
    from datamount.datasets.rows.listed import ObjectLocation

T = TypeVar("T")


def missing_object(
    store: Store, manifest: Manifest, row: int, path: str, missing: ObjectNotFoundError
) -> MissingPartError:
    """Row ``row``'s object, at ``path``, is not in the store."""
    return MissingPartError(
        f"{manifest.ref}, row {row}: the object {store.url_for(path)} is missing from the store "
        f"({object_repair(manifest)})",
        missing,
    )


def objects_read(
    store: Store, manifest: Manifest, located: Iterable[tuple[int, ObjectLocation]], reads: Iterator[T]
) -> Iterator[tuple[int, ObjectLocation, T]]:
    """Each row and its object's location with what was read of it (``reads``: one per object, in order, as
    ``Store.read_many`` gives them). Reads fail in order, so an object not found is the one of the row waiting for
    it, and is named with that row."""
    for row, location in located:
        try:
            read = next(reads)
        except MissingPartError:
            raise
        except ObjectNotFoundError as missing:
            raise missing_object(store, manifest, row, location.path, missing) from missing
        yield row, location, read


def missing_list(store: Store, manifest: Manifest, missing: ObjectNotFoundError) -> MissingPartError:
    """The version's list, which every row needs, is not in the store."""
    return MissingPartError(
        f"{manifest.ref}: its list {store.url_for(layout.list_path(manifest))}, which every row needs, is missing "
        f"from the store ({object_repair(manifest)})",
        missing,
    )


def missing_shard(
    store: Store, manifest: Manifest, shard: ShardEntry, missing: ObjectNotFoundError
) -> MissingPartError:
    """Shard ``shard`` of ``manifest`` is not in the store. ``pack`` made it from the version's objects
    when the version has them, and ``repair`` makes it again; otherwise its rows are stored nowhere else."""
    url = store.url_for(layout.shard_path(manifest.name, shard))
    first = sum(before.rows for before in itertools.takewhile(lambda entry: entry != shard, manifest.shards))
    return MissingPartError(
        f"{manifest.ref}, rows {first} to {first + shard.rows - 1}: the shard {url} is missing from the store "
        f"({shard_repair(manifest)})",
        missing,
    )


def removed_or_missing(store: Store, manifest: Manifest, missing: ObjectNotFoundError) -> Exception:
    """What to raise for ``missing``, a part of ``manifest``'s version not found while it was read: the
    :class:`~datamount.datasets.DatasetNotFoundError` of ``catalog.removed_while_read`` when the version was removed
    since it was opened (naming the store's own error, not a repair), else ``missing`` itself."""
    plain = missing.missing if isinstance(missing, MissingPartError) and missing.missing is not None else missing
    explanation = catalog.removed_while_read(store, manifest, plain)
    return missing if explanation is plain else explanation
