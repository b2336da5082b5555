"""Committing versions: writers that race never lose a version, and a committed version never changes."""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout, pack, upload, verify
from datamount.datasets.errors import DatasetNotFoundError, StreamFormatError
from datamount.datasets.upload import UploadResult
from datamount.readers import reader
from datamount.readers.stream import import_stream, write_to
from datamount.storage import Store
from datamount.storage.store import TEMP_PREFIX
from tests.generated import image_rows, write_image_list

RACING_PAIRS = 20


def text_list(folder: Path, name: str, rows: int, tag: str) -> Path:
    path = folder / f"{name}.list"
    path.write_text("".join(f"{tag} {index}\t{index}\n" for index in range(rows)), encoding="utf-8")
    return path


def independent(store: Store) -> Store:
    """Another client of ``store``, as another process would open it (pickling makes a new filesystem)."""
    return pickle.loads(pickle.dumps(store))


def race(store: Store, lists: list[Path], name: str) -> list[UploadResult | BaseException]:
    """Upload ``lists`` to ``name`` at once, one thread and one store client each; what each returned or raised."""
    start = threading.Barrier(len(lists))
    results: list[UploadResult | BaseException] = [RuntimeError("did not run")] * len(lists)

    def run(index: int) -> None:
        client = independent(store)
        start.wait()
        try:
            results[index] = upload(lists[index], name, store=client)
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(lists))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.slow
def test_racing_writers_lose_no_version(store: Store, tmp_path: Path) -> None:
    lost = []
    for pair in range(RACING_PAIRS):
        lists = [text_list(tmp_path, f"p{pair}w{writer}", 5, f"pair {pair} writer {writer}") for writer in (0, 1)]
        results = race(store, lists, f"race{pair}")
        for result, list_file in zip(results, lists, strict=True):
            assert isinstance(result, UploadResult), result
            committed = catalog.read_manifest(store, f"race{pair}", result.manifest.version)
            if committed.list_sha256 != hashlib.sha256(list_file.read_bytes()).hexdigest():
                lost.append(f"race{pair}@{result.manifest.version}")
        assert sorted(r.manifest.version for r in results if isinstance(r, UploadResult)) == [1, 2]
    assert lost == []


def test_racing_writers_lose_no_version_between_processes(local_store: Store, tmp_path: Path) -> None:
    lists = [text_list(tmp_path, f"w{writer}", 50, f"writer {writer}") for writer in range(4)]
    command = [sys.executable, "-m", "datamount.cli.main", "upload", "--store", local_store.url, "-q"]
    writers = [subprocess.Popen([*command, str(path), "race"], stdout=subprocess.PIPE, text=True) for path in lists]
    outputs = [writer.communicate(timeout=120)[0] for writer in writers]
    assert [writer.returncode for writer in writers] == [0] * len(lists)
    named = sorted(output.split()[1].rstrip(":") for output in outputs)
    assert named == [f"race@{number}" for number in range(1, len(lists) + 1)]
    for path, output in zip(lists, outputs, strict=True):
        version = int(output.split()[1].rstrip(":").split("@")[1])
        assert [row[0] for row in reader(f"race@{version}", local_store)()] == [
            line.split("\t")[0] for line in path.read_text().splitlines()
        ]


def test_racing_image_uploads_sharing_files_each_commit_a_whole_version(local_store: Store, tmp_path: Path) -> None:
    """Processes storing the same files at once (each names an object by its content and links it into place): every
    version holds its own rows, every object is whole, and no temporary file is left."""
    every = write_image_list(tmp_path / "src", 120, size=20_000).read_text(encoding="utf-8").splitlines()
    lists = []
    for writer in range(3):  # overlapping lists: most files in two or three of them
        lists.append(tmp_path / "src" / f"w{writer}.list")
        lists[-1].write_text("".join(f"{line}\n" for line in every[writer * 20 : writer * 20 + 80]), encoding="utf-8")
    command = [sys.executable, "-m", "datamount.cli.main", "upload", "--store", local_store.url, "-q"]
    writers = [subprocess.Popen([*command, str(path), "shared"], stdout=subprocess.PIPE, text=True) for path in lists]
    outputs = [writer.communicate(timeout=120)[0] for writer in writers]
    assert [writer.returncode for writer in writers] == [0] * len(lists)
    for path, output in zip(lists, outputs, strict=True):
        ref = output.split()[1].rstrip(":")
        manifest = catalog.resolve(local_store, ref)
        assert verify(local_store, manifest).ok
        assert list(reader(ref, local_store)()) == image_rows(path)
    objects = Path(local_store.local_path(f"{layout.dataset_folder('shared')}/{layout.OBJECTS}"))
    assert len(local_store.list(f"{layout.dataset_folder('shared')}/{layout.OBJECTS}")) == 120
    assert not [found for found in objects.rglob("*") if found.name.startswith(TEMP_PREFIX)]


def test_a_failing_import_removes_only_what_it_wrote(local_store: Store, tmp_path: Path) -> None:
    stream = tmp_path / "cut.arrow"
    with write_to(stream) as out:
        out.set_columns("text")
        for index in range(2000):
            out.write(f"row {index} " + "x" * 200)
    data = stream.read_bytes()
    stream.write_bytes(data[: len(data) // 2])  # cut short: the import fails after writing some shards

    other = tmp_path / "other.arrow"
    with write_to(other) as out:
        out.set_columns("text")
        out.write("kept")
    with pytest.raises(StreamFormatError):
        import_stream(stream, "shared", store=local_store, shard_bytes=20_000, row_group_bytes=5_000)
    manifest = import_stream(other, "shared", store=local_store)
    assert manifest.version == 1
    with pytest.raises(StreamFormatError):
        import_stream(stream, "shared", store=local_store, shard_bytes=20_000, row_group_bytes=5_000)
    assert list(reader("shared", local_store)()) == [("kept",)]
    assert verify(local_store, catalog.resolve(local_store, "shared")).ok


def test_racing_packs_of_one_version_leave_it_readable(local_store: Store, tmp_path: Path) -> None:
    source = text_list(tmp_path, "rows", 3000, "row")
    upload(source, "d", store=local_store)
    expected = list(reader("d", local_store)())
    sizes = [(20_000, 4_000), (50_000, 9_000), (20_000, 4_000)]
    results: list[object] = [None] * len(sizes)
    start = threading.Barrier(len(sizes))

    def run(index: int) -> None:
        start.wait()
        shard_bytes, row_group_bytes = sizes[index]
        try:
            client = independent(local_store)
            results[index] = pack("d", store=client, shard_bytes=shard_bytes, row_group_bytes=row_group_bytes)
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(sizes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    committed = catalog.resolve(local_store, "d")
    assert committed.shards and all(result == committed for result in results), results
    assert list(reader("d", local_store)()) == expected
    assert verify(local_store, committed).ok
    # the losers' shards are gone: only the recorded pack folder is left
    assert local_store.list_folders("datasets/d/packs") == [f"datasets/d/{committed.shards[0].path.rsplit('/', 1)[0]}"]


def test_a_removed_version_number_is_never_given_again(local_store: Store, tmp_path: Path) -> None:
    for tag in ("a", "b"):
        upload(text_list(tmp_path, tag, 3, tag), "d", store=local_store)
    assert catalog.remove(local_store, "d@2") == [2]
    with pytest.raises(DatasetNotFoundError):
        catalog.resolve(local_store, "d@2")
    assert upload(text_list(tmp_path, "c", 3, "c"), "d", store=local_store).manifest.version == 3
    assert catalog.versions(local_store, "d") == [1, 3]
    assert [row[0] for row in reader("d@3", local_store)()] == ["c 0", "c 1", "c 2"]


def test_a_committed_manifest_is_never_written_over(local_store: Store, tmp_path: Path) -> None:
    manifest = upload(text_list(tmp_path, "a", 3, "a"), "d", store=local_store).manifest
    before = local_store.read(layout.manifest_path("d", 1))
    pack("d", store=local_store)
    assert local_store.read(layout.manifest_path("d", 1)) == before
    assert catalog.resolve(local_store, "d").shards and manifest.shards == []
