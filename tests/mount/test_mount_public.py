"""Public datasets (versions without a list) through real FUSE: each mounts in its dataset's form, every byte what
was generated; the mount, ``export``, ``cp`` and ``reader`` agree; a shard damaged after the mount is an I/O error
for the files it holds; files and folders carry the version's creation time, so that ``rsync -a`` from a second
mount copies nothing."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from datamount.datasets import catalog, copy_version, export, layout, upload
from datamount.mount import mount, mounting, unmount
from datamount.storage import Store, open_store
from tests.datasets.public_files import install_generated, shown
from tests.datasets.test_row_folders import PUBLIC, files_by_folder, rows_as_files, tree_of
from tests.generated import write_image_list

pytestmark = pytest.mark.timeout(300)


def _needs(name: str) -> None:
    if name == "imagenet":
        pytest.importorskip("scipy", reason="scipy (the imagenet extra) writes and reads the devkit's meta.mat")


@pytest.mark.parametrize("store", ["local", pytest.param("s3", marks=pytest.mark.s3)], indirect=True)
@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_dataset_mounts_in_its_form(name: str, store: Store, tmp_path: Path, mountpoint: Path) -> None:
    _needs(name)
    expected = install_generated(name, tmp_path / "source", store)
    mounted = mount(f"public/{name}", mountpoint, store=store, cache=tmp_path / "cache")
    assert mounted.ref == f"public/{name}@1"
    assert tree_of(mountpoint) == expected
    for path in expected:
        assert (mountpoint / path).stat().st_size == len((mountpoint / path).read_bytes())


def test_the_command_line_mounts_a_public_dataset(local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    expected = install_generated("mnist", tmp_path / "source", local_store)
    done = subprocess.run(
        [sys.executable, "-m", "datamount.cli.main", "mount", "public/mnist", str(mountpoint)],
        env={**os.environ, "DATAMOUNT_STORE": local_store.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "mounted public/mnist@1" in done.stdout
    assert sorted(os.listdir(mountpoint)) == ["test", "train"]
    assert sorted(os.listdir(mountpoint / "train")) == sorted({path.split("/")[1] for path in expected})
    assert tree_of(mountpoint) == expected


@pytest.mark.parametrize("name", PUBLIC)
def test_the_mount_export_cp_and_reader_agree(name: str, local_store: Store, tmp_path: Path, mountpoint: Path) -> None:
    _needs(name)
    install_generated(name, tmp_path / "source", local_store)
    mount(name, mountpoint, store=local_store)
    mounted = tree_of(mountpoint)
    unmount(mountpoint)
    export(name, tmp_path / "out", store=local_store)
    assert tree_of(tmp_path / "out") == mounted
    assert files_by_folder(mounted) == rows_as_files(name, local_store)
    copied = open_store(tmp_path / "other")
    copy_version(f"public/{name}", source=local_store, target=copied)
    mount(name, mountpoint, store=copied)
    assert tree_of(mountpoint) == mounted


def test_a_shard_damaged_after_the_mount_is_an_io_error_for_its_files(
    local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """The rows were read to make the tree; a shard damaged since then is caught when its row group is read (its
    pages' CRCs), and only the files of that row group fail."""
    expected = install_generated("mnist", tmp_path / "source", local_store)
    manifest = catalog.resolve(local_store, "mnist")
    log_file = tmp_path / "mount.log"
    mount("mnist", mountpoint, store=local_store, cache=False, log_file=log_file)
    victim = sorted(path for path in expected if path.startswith("test/"))[-1]
    shard = layout.shard_path(manifest.name, manifest.shards[-1])  # the test split's last rows are in its last shard
    data = bytearray(local_store.read(shard))
    at = bytes(data).index(expected[victim][300:340]) + 10
    data[at] ^= 0xFF
    local_store.write(shard, bytes(data))

    with pytest.raises(OSError) as caught:
        (mountpoint / victim).read_bytes()
    assert caught.value.errno == errno.EIO
    assert victim in log_file.read_text() and "damaged" in log_file.read_text()
    other = sorted(path for path in expected if path.startswith("train/"))[0]  # another shard's file reads on
    assert shown(other, (mountpoint / other).read_bytes()) == expected[other]


def _created_ns(store: Store, ref: str) -> int:
    return int(datetime.fromisoformat(catalog.resolve(store, ref).created).timestamp()) * 10**9


def _mtimes(folder: Path) -> dict[str, int]:
    """The mtime of every file and folder under ``folder`` (itself included), by relative path."""
    found = {".": folder.stat().st_mtime_ns}
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent, name)
            found[path.relative_to(folder).as_posix()] = path.stat().st_mtime_ns
    return found


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync (apt-get install rsync)")
@pytest.mark.parametrize("kind", ["listed", "public"])
def test_a_second_rsync_from_a_remount_copies_nothing(
    kind: str, local_store: Store, tmp_path: Path, mountpoint: Path
) -> None:
    """Every file and folder carries the version's creation time (its manifest's ``created``), not the mount's: the
    same on every mount, so that ``rsync -a`` (and ``make``) find nothing changed."""
    if kind == "listed":
        upload(write_image_list(tmp_path / "src", 6), "pets", store=local_store)
        ref = "pets"
    else:
        install_generated("mnist", tmp_path / "source", local_store)
        ref = "public/mnist"
    created = _created_ns(local_store, ref)
    copy = tmp_path / "copy"
    mount(ref, mountpoint, store=local_store)
    first = _mtimes(mountpoint)
    assert set(first.values()) == {created}, first
    done = subprocess.run(["rsync", "-a", f"{mountpoint}/", f"{copy}/"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    unmount(mountpoint)

    mount(ref, mountpoint, store=local_store)
    assert _mtimes(mountpoint) == first
    again = subprocess.run(
        ["rsync", "-a", "--itemize-changes", f"{mountpoint}/", f"{copy}/"], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and again.stdout == "", again.stdout  # nothing sent, no attribute changed


def test_the_wait_for_a_serving_process_restarts_with_each_report_of_its_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A version without a list is mounted after a pass over its rows, which may take longer than the wait for an
    answer: each report of the pass restarts the wait (here 30 reports 0.2 s apart, a 3 s wait), and the answer is
    the line after them; a process that stops reporting is given up on."""
    monkeypatch.setattr(mounting, "READY_TIMEOUT", 3.0)
    reports = (
        "import json, sys, time\n"
        "for done in range(30):\n"
        "    print(json.dumps({'rows_read': done, 'rows': 30}), flush=True)\n"
        "    time.sleep(0.2)\n"
        "print(json.dumps({'pid': 7}), flush=True)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", reports], stdout=subprocess.PIPE)
    assert mounting._read_answer(server) == '{"pid": 7}'
    server.wait(30)
    silent = subprocess.Popen(
        [sys.executable, "-c", "import time; print('{\"rows_read\": 0}', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    assert "did not answer within 3 s" in mounting._read_answer(silent)
    assert silent.wait(30) != 0  # killed
