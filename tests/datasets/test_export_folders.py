"""``export`` makes its folder whole or not at all: a damaged part, Ctrl-C or SIGTERM leave the target as it was (and
the error names the repair, as a reader's does); a real ``datamount export`` killed with SIGKILL leaves only a hidden
sibling, which the next export of the same version takes over; a folder that holds anything is refused."""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import MissingPartError, export, layout, repair, upload
from datamount.datasets.manifest import Manifest
from datamount.storage import IntegrityError, Store
from tests.generated import tree_of, write_image_list

pytestmark = pytest.mark.timeout(300)

ROWS = 120
#: The row whose object the tests damage or block: after several groups of reads, so that files were written first.
BLOCKED_ROW = 90


def uploaded_tree(store: Store, manifest: Manifest, list_file: Path) -> dict[str, bytes]:
    """What an export of ``manifest``'s version, the upload of ``list_file``, holds: each file at its list path, and
    the list as the store keeps it (normalised)."""
    tree = {list_file.name: store.read(layout.list_path(manifest))}
    for row in list_file.read_text(encoding="utf-8").splitlines():
        path = os.path.normpath(row.split("\t")[0])
        tree[path] = (list_file.parent / path).read_bytes()
    return tree


def original(list_file: Path, row: int) -> bytes:
    """The bytes uploaded for row ``row`` of ``list_file``."""
    path = list_file.read_text(encoding="utf-8").splitlines()[row].split("\t")[0]
    return (list_file.parent / path).read_bytes()


def siblings(folder: Path) -> list[str]:
    """The names beside ``folder`` (and ``folder`` itself, if there)."""
    return sorted(os.listdir(folder.parent))


@pytest.fixture
def cats(local_store: Store, tmp_path: Path) -> tuple[Manifest, Path]:
    list_file = write_image_list(tmp_path / "src", ROWS, size=2000)
    return upload(list_file, "cats", store=local_store).manifest, list_file


def object_file(store: Store, manifest: Manifest, row: int) -> Path:
    return Path(store.local_path() or "", layout.object_path(manifest.name, manifest.files[row].sha256))


def damage(store: Store, manifest: Manifest, row: int, how: str) -> None:
    path = object_file(store, manifest, row)
    if how == "missing":
        path.unlink()
    elif how == "other bytes":
        path.write_bytes(b"x" * manifest.files[row].size)
    else:
        path.write_bytes(path.read_bytes()[:-1])


def as_it_was(out: Path, there: str) -> None:
    """``out`` is as it was before a failed export: absent with the parent it was in, or an empty folder alone."""
    if there == "absent":
        assert not out.parent.exists()  # the parent the export made for it is gone too
    else:
        assert os.listdir(out.parent) == [out.name] and os.listdir(out) == []


@pytest.mark.parametrize("how", ["other bytes", "truncated", "missing"])
@pytest.mark.parametrize("there", ["absent", "empty"])
def test_a_damaged_object_leaves_the_target_as_it_was_and_names_the_repair(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path, how: str, there: str
) -> None:
    manifest, list_file = cats
    damage(local_store, manifest, BLOCKED_ROW, how)
    out = tmp_path / "exports" / "cats"
    if there == "empty":
        out.mkdir(parents=True)
        out.chmod(0o750)
    url = local_store.url_for(layout.object_path("cats", manifest.files[BLOCKED_ROW].sha256))
    problem = {"other bytes": "does not match its xxh3-64", "truncated": "has 2,092 bytes, not 2,093"}.get(how)
    said = (
        rf"^cats@1, row {BLOCKED_ROW}: the object {re.escape(url)} "
        + (rf"{problem}: the store holds a damaged copy" if problem else "is missing from the store")
        + r" \(datamount verify cats@1 --repair --from LIST puts it back\)$"
    )
    with pytest.raises(MissingPartError if how == "missing" else IntegrityError, match=said):
        export("cats", out, store=local_store)
    as_it_was(out, there)

    result = CliRunner().invoke(cli, ["export", "cats@1", str(out), "--store", local_store.url, "-q"])
    assert result.exit_code == (3 if how == "missing" else 1) and result.output.count("\n") == 1, result.output
    assert re.search(said[1:-1], result.output), result.output
    as_it_was(out, there)

    # What the message says puts it back does; then the export is whole.
    assert repair(local_store, manifest, source=list_file).ok
    done = export("cats", out, store=local_store)
    assert (done.written, done.unchanged) == (ROWS + 1, 0)
    assert tree_of(out) == uploaded_tree(local_store, manifest, list_file)
    assert siblings(out) == ["cats"]
    if there == "empty":
        assert stat.S_IMODE(out.stat().st_mode) == 0o750  # the folder given, filled, keeps its mode


def test_a_folder_that_holds_anything_else_is_refused_and_left_as_it_was(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    refused = r"out is not empty, and is not an export of cats@1: its data/img0000\.jpg is missing; export into a"
    with pytest.raises(FileExistsError, match=refused):
        export("cats", out, store=local_store)
    assert tree_of(out) == {"mine.txt": b"keep"} and siblings(out) == ["out", "src", "store"]
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / ".keep").write_text("")
    with pytest.raises(FileExistsError, match="hidden is not empty"):
        export("cats", hidden, store=local_store)
    (tmp_path / "file").write_text("a file")
    with pytest.raises(NotADirectoryError, match="file exists and is not a folder"):
        export("cats", tmp_path / "file", store=local_store)
    assert sorted(os.listdir(tmp_path)) == ["file", "hidden", "out", "src", "store"]


def test_a_folder_that_holds_the_export_already_is_done_and_one_changed_since_is_refused(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    export("cats", out, store=local_store)
    before = tree_of(out)
    again = CliRunner().invoke(cli, ["export", "cats", str(out), "--store", local_store.url, "-q"])
    assert again.exit_code == 0 and f"0 file(s) written (0 B), the list as train.list; {ROWS + 1} already there" in (
        again.output
    )
    (out / "data" / "img0003.jpg").write_bytes(b"mine")
    changed = CliRunner().invoke(cli, ["export", "cats", str(out), "--store", local_store.url, "-q"])
    assert changed.exit_code == 1 and "its data/img0003.jpg has other bytes" in changed.output
    assert tree_of(out) == {**before, "data/img0003.jpg": b"mine"} and siblings(out) == ["out", "src", "store"]


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """An empty mount point, as a Kubernetes ``emptyDir`` or a container's volume is: a folder that cannot be
    replaced by another."""
    point = tmp_path / "volume"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "datamount-test", str(point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here (root and CAP_SYS_ADMIN are needed): {mounted.stderr.strip()}")
    yield point
    subprocess.run(["umount", str(point)], check=True)


def test_an_empty_mount_point_is_filled_in_place_and_left_empty_after_a_failure(
    local_store: Store, cats: tuple[Manifest, Path], volume: Path
) -> None:
    manifest, list_file = cats
    damage(local_store, manifest, BLOCKED_ROW, "other bytes")
    with pytest.raises(IntegrityError, match=r"datamount verify cats@1 --repair --from LIST puts it back"):
        export("cats", volume, store=local_store)
    assert os.path.ismount(volume) and os.listdir(volume) == []
    assert repair(local_store, manifest, source=list_file).ok
    assert export("cats", volume, store=local_store).written == ROWS + 1
    assert os.path.ismount(volume) and tree_of(volume) == uploaded_tree(local_store, manifest, list_file)
    assert export("cats", volume, store=local_store).unchanged == ROWS + 1


# ------------------------------------------------------------------------------------------- a real process


def blocked(store: Store, manifest: Manifest, row: int) -> Path:
    """Make row ``row``'s object a FIFO: the export reading it waits there, in the middle of its rows, until the test
    writes its bytes (or forever)."""
    path = object_file(store, manifest, row)
    path.unlink()
    os.mkfifo(path)
    return path


def release(fifo: Path, data: bytes, process: subprocess.Popen[str]) -> None:
    """Give the export waiting at ``fifo`` the bytes it is reading, if it still waits there."""
    while process.poll() is None:
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # no reader at the other end (yet, or any more)
                raise
            time.sleep(0.05)
            continue
        os.set_blocking(writer, True)
        try:
            os.write(writer, data)
        finally:
            os.close(writer)
        return


def start_export(store: Store, ref: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "datamount.cli.main", "export", ref, str(out), "--store", store.url, "-q"],
        stderr=subprocess.PIPE,
        text=True,
    )


def staged_files(out: Path, process: subprocess.Popen[str], at_least: int) -> Path:
    """The hidden sibling the export at work writes, once it holds ``at_least`` files."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        for name in os.listdir(out.parent) if out.parent.exists() else []:
            if name.startswith(f".{out.name}.datamount-export-") and len(tree_of(out.parent / name)) >= at_least:
                return out.parent / name
        time.sleep(0.05)
    raise AssertionError(f"no sibling of {out} with {at_least} files")


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_a_killed_export_leaves_a_hidden_sibling_that_the_next_one_takes_over(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path, running: list[subprocess.Popen[str]]
) -> None:
    manifest, list_file = cats
    fifo = blocked(local_store, manifest, BLOCKED_ROW)
    out = tmp_path / "out"
    running.append(process := start_export(local_store, "cats@1", out))
    stage = staged_files(out, process, at_least=32)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert not out.exists() and siblings(out) == sorted([stage.name, "src", "store"])
    expected = uploaded_tree(local_store, manifest, list_file)
    right = [path for path, data in tree_of(stage).items() if expected[path] == data]  # not the one cut short
    assert len(right) >= 31

    fifo.unlink()
    local_store.write(layout.object_path("cats", manifest.files[BLOCKED_ROW].sha256), original(list_file, BLOCKED_ROW))
    result = export("cats@1", out, store=local_store)
    assert result.unchanged == len(right) and result.written == ROWS + 1 - len(right)  # taken over: kept
    assert tree_of(out) == expected
    assert siblings(out) == ["out", "src", "store"]


def test_a_sibling_a_killed_export_of_another_version_left_is_removed(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path, running: list[subprocess.Popen[str]]
) -> None:
    manifest, _ = cats
    (tmp_path / "src2").mkdir()
    other = write_image_list(tmp_path / "src2", 3, name="other.list")
    upload(other, "cats", store=local_store)
    blocked(local_store, manifest, BLOCKED_ROW)
    out = tmp_path / "out"
    running.append(process := start_export(local_store, "cats@1", out))
    stage = staged_files(out, process, at_least=16)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    export("cats@2", out, store=local_store)
    assert not stage.exists() and siblings(out) == ["out", "src", "src2", "store"]
    assert sorted(tree_of(out)) == ["data/img0000.jpg", "data/img0001.jpg", "data/img0002.jpg", "other.list"]


def test_a_sibling_another_export_is_writing_is_left_alone(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path, running: list[subprocess.Popen[str]]
) -> None:
    manifest, list_file = cats
    fifo = blocked(local_store, manifest, BLOCKED_ROW)
    out = tmp_path / "out"
    running.append(first := start_export(local_store, "cats@1", out))
    stage = staged_files(out, first, at_least=16)
    (tmp_path / "src2").mkdir()
    upload(write_image_list(tmp_path / "src2", 3), "dogs", store=local_store)
    export("dogs", out, store=local_store)  # beside a live export: its sibling untouched, and this one is whole
    assert stage.is_dir() and len(tree_of(out)) == 4
    release(fifo, original(list_file, BLOCKED_ROW), first)
    assert first.wait(timeout=120) == 1
    assert "out was filled by another process while this ran" in (first.stderr.read() if first.stderr else "")
    assert not stage.exists() and len(tree_of(out)) == 4


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_export_stopped_by_sigterm_or_ctrl_c_removes_what_it_wrote(
    local_store: Store, cats: tuple[Manifest, Path], tmp_path: Path, running: list[subprocess.Popen[str]], how: int
) -> None:
    manifest, list_file = cats
    fifo = blocked(local_store, manifest, BLOCKED_ROW)
    out = tmp_path / "deep" / "out"
    running.append(process := start_export(local_store, "cats@1", out))
    staged_files(out, process, at_least=16)
    process.send_signal(how)
    # The signal is pending in the process before the bytes it waits for arrive: it stops there, whatever the order
    # in which its threads then run.
    release(fifo, original(list_file, BLOCKED_ROW), process)
    code = process.wait(timeout=120)
    assert code == (-signal.SIGTERM if how == signal.SIGTERM else 130)
    assert sorted(os.listdir(tmp_path)) == ["src", "store"]  # nor the folder it made for it
