"""What walks every file of a version holds no more than one pass over its entries does (a part of them at a time),
whatever its rows: ``catalog.named_files``, ``catalog.missing`` (the commit's check), ``verify`` and
``catalog.remove_unused`` (``rm``'s cleanup). Each held a dict or set of every object and a listing of the whole
objects area before: at 70,000 objects, 18.8, 28.7, 23.5 and 28.9 MB where a pass held 11.6 (now 11.6, 12.9,
12.6 and 12.9)."""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, locks
from datamount.datasets.copying import CopyResult, copy_version
from datamount.datasets.manifest import FileEntry, Kind, Manifest
from datamount.datasets.verify import verify
from datamount.storage import Store, open_store

#: Above one part of entries (32,768), so that a pass holds a part and not every entry.
OBJECTS = 70_000
#: What a walker may hold beyond a pass over the entries: its objects' records before they go to disk (2.6 MB at
#: most), one folder's bucket and listing, a few parts' paths.
MARGIN_MB = 6
#: What a copy may hold beyond two passes: the commit's conversion of 65,536 entries to Arrow columns and its sort's
#: run beside them. The copy holds 25.3 MB here, before and after format 8's change to the entries' parts made a pass
#: 2 MB lighter (11.6 -> 9.6 MB); the copy that held every object's record took 64.2.
COPY_MARGIN_MB = 10


def one_pass_mb(store: Store) -> float:
    """The peak held by one pass over the entries of a version read afresh (none of its parts decoded before: a
    manifest of this module's fixture keeps the last parts another test decoded)."""
    return held_peak_mb(lambda: sum(1 for _ in catalog.resolve(store, "d").files))


def held_peak_mb(walk: Callable[[], object]) -> float:
    """The peak of memory allocated while ``walk`` runs, in MB."""
    gc.collect()
    tracemalloc.start()
    try:
        walk()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


#: The version is made once (20 s: 70,000 files), for the walks of this module on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("walks-memory")]


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Manifest]:
    """A version of :data:`OBJECTS` distinct tiny files, each stored as an object of a local store (written as
    files: the store's own writes would take longer, and the walks only read them)."""
    store = open_store(tmp_path_factory.mktemp("walks") / "store")
    root = Path(store.full_path("", allow_root=True))
    entries = []
    for i in range(OBJECTS):
        data = b"%08d" % i
        entry = FileEntry(f"images/{i % 100:02d}/{i:08d}.jpg", len(data), hashlib.sha256(data).hexdigest(), "")
        path = root / layout.object_path("d", entry.sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        entries.append(entry)
    draft = Manifest(name="d", kind=Kind.IMAGE, columns=["image", "label"], rows=OBJECTS, files=entries)
    with locks.writing(store, "d"):
        catalog.commit(store, draft)
    return store, catalog.resolve(store, "d")


def remove_unused(store: Store, manifest: Manifest) -> None:
    with locks.removing(store, manifest.name):
        catalog.remove_unused(store, manifest.name, [manifest])
    if catalog.missing(store, manifest):
        raise AssertionError("the cleanup removed objects the version uses")


WALKS: dict[str, Callable[[Store, Manifest], object]] = {
    "named_files": lambda store, manifest: sum(1 for _ in catalog.named_files(manifest)),
    "missing": catalog.missing,
    "verify": verify,
    "remove_unused": remove_unused,
}


@pytest.mark.parametrize("walk", list(WALKS), ids=list(WALKS))
def test_a_walk_over_every_object_holds_what_one_pass_over_the_entries_does(
    version: tuple[Store, Manifest], walk: str
) -> None:
    store, _ = version
    one_pass = one_pass_mb(store)
    fresh = catalog.resolve(store, "d")
    held = held_peak_mb(lambda: WALKS[walk](store, fresh))
    assert held < one_pass + MARGIN_MB, f"{walk} held {held:.1f} MB, a pass over the entries {one_pass:.1f} MB"


def test_a_copy_holds_what_one_pass_over_the_entries_does(version: tuple[Store, Manifest], tmp_path: Path) -> None:
    """``cp`` to a store that holds the objects already (hard links): every object compared, the version committed
    there, whose entries' parts the commit sorts again, 65,536 entries made Arrow columns at a time (two parts' worth
    of entries). It held every object's part, the dataset folder's listing and a dict of every entry: 64.2 MB, now
    25.3."""
    store, _ = version
    objects = f"{layout.dataset_folder('d')}/{layout.OBJECTS}"
    target = open_store(tmp_path / "target")
    shutil.copytree(store.full_path(objects), tmp_path / "target" / objects, copy_function=os.link)
    one_pass = one_pass_mb(store)
    copied: list[CopyResult] = []
    held = held_peak_mb(lambda: copied.append(copy_version("d", source=store, target=target)))
    assert (copied[0].sent, copied[0].present) == (0, OBJECTS)
    said = f"the copy held {held:.1f} MB, a pass over the entries {one_pass:.1f} MB"
    assert held < 2 * one_pass + COPY_MARGIN_MB, said
