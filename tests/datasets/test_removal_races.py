"""Removals racing writers and readers: nothing a version committed (or being committed) uses is ever deleted, and a
reader of a removed version is told so.

Each backend runs 20 rounds of a removal, an upload and a pack started together in three processes (threads on
``memory://``, which lives in one process): the upload reuses most of the files of the version being removed, so a
removal that freed them as unused would break the new version. Then a stress run of uploaders, a packer, a remover
and readers on a local store and on S3.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from datamount.datasets import catalog, upload, verify
from datamount.readers import reader
from datamount.storage import Store
from tests.datasets import removal_roles
from tests.generated import image_rows, write_image_list
from tests.stores import STORE_BACKENDS

RACING_TRIPLES = 20
FILES_PER_LIST = 6
STRESS_SECONDS = 25


def overlapping_lists(folder: Path, count: int) -> list[Path]:
    """``count`` image lists of ``FILES_PER_LIST`` files, each sharing all but two of its files with the next."""
    every = write_image_list(folder, 2 * count + FILES_PER_LIST, size=400).read_text(encoding="utf-8").splitlines()
    lists = []
    for number in range(count):
        lists.append(folder / f"l{number:03d}.list")
        rows = every[2 * number : 2 * number + FILES_PER_LIST]
        lists[-1].write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
    return lists


def racers(store: Store, workers: int) -> Executor:
    """Processes (spawned: they share nothing with this one) or, for an in-process store, threads."""
    if store.shareable:
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    return ThreadPoolExecutor(workers)


def independent(store: Store) -> Store:
    """Another client of ``store``, as another process opens it."""
    return pickle.loads(pickle.dumps(store))


def broken_versions(store: Store, name: str, lists: dict[int, Path]) -> list[str]:
    """The versions of ``name`` that do not verify clean or do not read back their list's rows."""
    broken = []
    for version in catalog.versions(store, name):
        manifest = catalog.resolve(store, f"{name}@{version}")
        found = verify(store, manifest)
        if not found.ok:
            broken.append(f"{manifest.ref}: {found.problems[:2]}")
        elif version in lists and list(reader(manifest.ref, store)()) != image_rows(lists[version]):
            broken.append(f"{manifest.ref}: other rows")
    return broken


@pytest.mark.slow
@pytest.mark.timeout(900)  # HDFS closes each file in ~0.5 s
@pytest.mark.parametrize("store", STORE_BACKENDS, indirect=True)
def test_a_removal_racing_an_upload_and_a_pack_breaks_no_version(store: Store, tmp_path: Path) -> None:
    lists = overlapping_lists(tmp_path / "src", RACING_TRIPLES + 1)
    uploaded = {upload(lists[0], "r", store=store).manifest.version: lists[0]}
    with racers(store, 3) as pool:
        for round_ in range(RACING_TRIPLES):
            doomed = max(uploaded)
            removal = pool.submit(removal_roles.remove_version, independent(store), f"r@{doomed}")
            new = pool.submit(removal_roles.upload_list, independent(store), str(lists[round_ + 1]), "r")
            packing = pool.submit(removal_roles.pack_latest, independent(store), "r")
            assert removal.result(timeout=300) == "removed"
            del uploaded[doomed]
            # The number of the removed version again when the removal came first: it freed the name.
            uploaded[new.result(timeout=300)] = lists[round_ + 1]
            assert packing.result(timeout=300) in ("packed", "not found")
            assert catalog.versions(store, "r") == sorted(uploaded)
            assert broken_versions(store, "r", uploaded) == [], f"round {round_}"


@pytest.fixture(params=[pytest.param("local"), pytest.param("s3", id="s3-moto", marks=pytest.mark.s3)])
def stressed_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    yield request.getfixturevalue(f"{request.param}_store")


@pytest.mark.slow
@pytest.mark.timeout(STRESS_SECONDS + 300)
def test_uploads_packs_removals_and_reads_at_once_lose_nothing(stressed_store: Store, tmp_path: Path) -> None:
    """Two uploaders, a packer, a remover (of the oldest version, while there are two) and two readers of the latest
    version for 25 s: every version left verifies clean, and every read that fails was of a removed version and
    says so."""
    lists = overlapping_lists(tmp_path / "src", 12)
    upload(lists[0], "s", store=stressed_store)
    roles = ["upload", "upload", "pack", "remove", "read", "read"]
    halves = [[str(path) for path in lists[0::2]], [str(path) for path in lists[1::2]]]
    with racers(stressed_store, len(roles)) as pool:
        running = [
            pool.submit(
                removal_roles.keep_doing, role, independent(stressed_store), "s", STRESS_SECONDS, halves[number % 2]
            )
            for number, role in enumerate(roles)
        ]
        outcomes = [run.result(timeout=STRESS_SECONDS + 300) for run in running]
    by_role: dict[str, dict[str, int]] = {}
    for role, outcome in zip(roles, outcomes, strict=True):
        for what, count in outcome.items():
            by_role.setdefault(role, {})[what] = by_role.get(role, {}).get(what, 0) + count
    assert set(by_role["upload"]) == {"uploaded"}, by_role
    assert set(by_role["pack"]) <= {"packed", "not found"}, by_role
    assert set(by_role["remove"]) <= {"removed", "waited"} and by_role["remove"].get("removed"), by_role
    assert set(by_role["read"]) <= {"read", "removed"} and by_role["read"].get("read"), by_role
    by_name = {path.name: path for path in lists}
    left = {v: by_name[catalog.resolve(stressed_store, f"s@{v}").source] for v in catalog.versions(stressed_store, "s")}
    assert broken_versions(stressed_store, "s", left) == []
