"""A committed version survives a crash of the machine: every file it names is on the disk before its manifest
exists. Shown from the system calls of a real ``datamount upload`` and ``datamount pack``, traced with strace."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from datamount.datasets import catalog, layout
from datamount.storage import Store
from tests.generated import MakeImageList

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (.ci/run installs it)")

TRACED = "fsync,fdatasync,syncfs,rename,renameat,renameat2,link,linkat"
#: ``1234 name(args) = 0``, ``1234 name(args <unfinished ...>`` and ``1234 <... name resumed>) = 0``.
_CALL = re.compile(r"^(\d+) +(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
_PATH = re.compile(r'"([^"]+)"|<([^>]+)>')


@dataclass
class Call:
    """One traced system call: where in the trace it started and ended, its name, the paths it names."""

    started: int
    ended: int
    name: str
    paths: list[str]
    ok: bool


def trace(tmp_path: Path, *args: str) -> list[Call]:
    """The traced calls of ``datamount ARGS`` run in a process of its own (and its threads)."""
    out = tmp_path / "strace.txt"
    command = ["strace", "-f", "-y", "-qq", "-s", "4096", "-e", f"trace={TRACED}", "-o", str(out)]
    done = subprocess.run(
        [*command, sys.executable, "-m", "datamount.cli.main", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return parse_trace(out.read_text().splitlines())


def parse_trace(lines: list[str]) -> list[Call]:
    calls: list[Call] = []
    open_calls: dict[str, Call] = {}
    for number, line in enumerate(lines):
        found = _CALL.match(line)
        if found is None:
            continue
        pid, resumed_name, rest, name, args = found.groups()
        if resumed_name is not None:
            call = open_calls.pop(pid)
            call.ended = number
            call.paths += _paths(rest)
            call.ok = rest.rstrip().endswith("= 0")
            continue
        unfinished = args.endswith("<unfinished ...>")
        args = args.removesuffix("<unfinished ...>")
        call = Call(number, number, name, _paths(args), args.rstrip().endswith("= 0"))
        if unfinished:
            open_calls[pid] = call
        calls.append(call)
    return calls


def _paths(text: str) -> list[str]:
    return [quoted or fd_path for quoted, fd_path in _PATH.findall(text)]


def end_of_renames_into(calls: list[Call], folder: str) -> int:
    """Where the last rename or link of a file into ``folder`` ended."""
    placed = [c.ended for c in calls if c.name.startswith(("rename", "link")) and c.ok and folder in c.paths[-1]]
    assert placed, f"no file was placed in {folder}"
    return max(placed)


def creation_of(calls: list[Call], path: str) -> Call:
    [created] = [c for c in calls if c.name.startswith("link") and c.ok and c.paths[-1].endswith(path)]
    return created


def test_an_uploads_files_reach_the_disk_in_one_sync_before_the_manifest_exists(
    tmp_path: Path, local_store: Store, make_image_list: MakeImageList
) -> None:
    calls = trace(tmp_path, "upload", str(make_image_list(40)), "d", "--store", local_store.url, "-q")
    root = local_store.root
    objects_placed = end_of_renames_into(calls, f"{root}/{layout.dataset_folder('d')}/{layout.OBJECTS}/")
    manifest = creation_of(calls, layout.manifest_path("d", 1))
    synced = [c for c in calls if c.name == "syncfs" and c.ok and c.started > objects_placed]
    assert synced and synced[0].ended < manifest.started
    # One sync for the whole version, not one per file.
    assert sum(c.name == "fsync" and layout.OBJECTS in c.paths[0] for c in calls) == 0


def test_a_packs_shards_reach_the_disk_before_its_record_exists(
    tmp_path: Path, local_store: Store, make_image_list: MakeImageList
) -> None:
    trace(tmp_path, "upload", str(make_image_list(20)), "d", "--store", local_store.url, "-q")
    calls = trace(tmp_path, "pack", "d", "--store", local_store.url, "-q")
    shards_placed = end_of_renames_into(calls, f"{local_store.root}/{layout.dataset_folder('d')}/{layout.PACKS}/")
    record = creation_of(calls, layout.pack_record_path("d", 1))
    assert any(c.name == "syncfs" and c.started > shards_placed and c.ended < record.started for c in calls)
    assert catalog.read_manifest(local_store, "d", 1).shards


@pytest.mark.gluster
def test_on_a_shared_mount_each_file_and_folder_is_fsynced_before_the_manifest_exists(
    tmp_path: Path, gluster_store: Store, make_image_list: MakeImageList
) -> None:
    """A FUSE mount does not pass syncfs on to its servers: there every file is fsynced, then its folder."""
    calls = trace(
        tmp_path, "upload", str(make_image_list(30)), "d", "--store", gluster_store.url, "-o", "mount=glusterfs", "-q"
    )
    manifest = creation_of(calls, layout.manifest_path("d", 1))
    objects = f"{layout.dataset_folder('d')}/{layout.OBJECTS}/"
    placed = ("rename", "link")
    stored = [c.paths[-1] for c in calls if c.name.startswith(placed) and c.ok and objects in c.paths[-1]]
    assert len(stored) == 30
    synced = {c.paths[0]: c for c in calls if c.name == "fsync" and c.ok}
    for path in stored:
        assert path in synced and synced[path].ended < manifest.started, f"{path} was not fsynced before the commit"
        folder = str(Path(path).parent)
        assert folder in synced and synced[folder].ended < manifest.started, f"{folder} was not fsynced"
