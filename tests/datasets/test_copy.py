"""``copy_version`` / ``datamount cp``: a version moves from one store to another with only the missing parts sent,
each checked, committed last; a second copy sends nothing; a damaged source part commits nothing and is named with
its repair; a copy killed half-way leaves no version, and the next one sends only the rest."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import MissingPartError, catalog, copy_version, layout, pack, repair, upload, verify
from datamount.datasets.manifest import FileEntry, Manifest
from datamount.readers import reader
from datamount.storage import IntegrityError, Store, open_store
from tests.generated import write_image_list
from tests.servers.moto import S3Server


@pytest.mark.parametrize("packed", ["objects", "upload --pack", "pack"])
def test_a_version_arrives_whole_and_reads_the_same(store: Store, tmp_path: Path, packed: str) -> None:
    source = open_store(tmp_path / "source")
    list_file = write_image_list(tmp_path / "src", 6)
    upload(list_file, "cats", store=source)
    (tmp_path / "src" / "data" / "new.jpg").write_bytes(b"\xff\xd8\xffnew")
    with list_file.open("a", encoding="utf-8") as rows:
        rows.write("data/new.jpg\t2\n")  # version 2 shares version 1's six files
    upload(list_file, "cats", store=source, packed=packed == "upload --pack")
    if packed == "pack":
        pack("cats", store=source, shard_bytes=1000, row_group_bytes=500)
    expected = list(reader("cats", source)())

    copied = copy_version("cats", source=source, target=store)
    assert copied.created and copied.manifest.version == 1 and copied.sent > 0 and copied.present == 0
    assert list(reader("cats", store)()) == expected
    assert verify(store, copied.manifest).ok
    assert copy_version("cats", source=source, target=store).created is False  # nothing new to commit

    # An older version: its objects shared with the copied one are not sent again.
    older = copy_version("cats@1", source=source, target=store)
    assert older.created and older.manifest.version == 2
    assert list(reader("cats@2", store)()) == list(reader("cats@1", source)())
    if packed == "objects":
        assert older.present > 0


def test_an_interrupted_copy_sends_only_the_rest(local_store: Store, tmp_path: Path) -> None:
    source = open_store(tmp_path / "source")
    manifest = upload(write_image_list(tmp_path / "src", 10), "cats", store=source).manifest
    for entry in manifest.files[:4]:  # as if a copy had sent these before it was killed
        path = layout.object_path("cats", entry.sha256)
        local_store.write(path, source.read(path))
    copied = copy_version("cats", source=source, target=local_store)
    assert (copied.present, copied.sent) == (4, 7)  # six objects and the list


def test_a_damaged_source_part_copies_nothing(local_store: Store, tmp_path: Path) -> None:
    source = open_store(tmp_path / "source")
    manifest = upload(write_image_list(tmp_path / "src", 5), "cats", store=source).manifest
    entry = manifest.files[1]
    source.write(layout.object_path("cats", entry.sha256), b"y" * entry.size)
    with pytest.raises(IntegrityError, match="datamount verify cats@1 --repair"):
        copy_version("cats", source=source, target=local_store)
    assert catalog.versions(local_store, "cats") == []


#: Files of the version the tests below copy: more than one batch of parts (the list and 63 objects go first).
FILES = 150
#: The file whose object the tests damage or hold back: in the second batch, so that the first was sent (a copy
#: sends the objects a folder of objects/ at a time: in the order of their sha256).
HELD = 100


def held_entry(manifest: Manifest) -> FileEntry:
    """The entry of the object a copy sends :data:`HELD`-th."""
    return sorted(manifest.files, key=lambda entry: entry.sha256)[HELD]


def objects_in(store: Store) -> int:
    """The objects of ``cats`` stored in ``store`` (by their final name)."""
    return len(store.list("datasets/cats/objects"))


@pytest.mark.parametrize("how", ["damaged", "missing"])
def test_a_damaged_source_part_names_its_repair_and_the_next_copy_sends_only_the_rest(
    local_store: Store, tmp_path: Path, how: str
) -> None:
    source = open_store(tmp_path / "source")
    list_file = write_image_list(tmp_path / "src", FILES)
    manifest = upload(list_file, "cats", store=source).manifest
    path = layout.object_path("cats", held_entry(manifest).sha256)
    if how == "damaged":
        source.write(path, b"y" * held_entry(manifest).size)
        problem = "does not match its sha256: the store copied from holds a damaged copy"
    else:
        source.remove(path)
        problem = "is missing from the store copied from"
    said = (
        rf"^cats@1: {re.escape(source.url_for(path))} {problem} \(datamount verify cats@1 --repair --from LIST puts "
        rf"it back\); nothing was committed to {re.escape(local_store.url)}: the parts sent stay there, and the next "
        r"copy sends only the rest$"
    )
    with pytest.raises(IntegrityError if how == "damaged" else MissingPartError, match=said):
        copy_version("cats", source=source, target=local_store)
    assert catalog.versions(local_store, "cats") == [] and catalog.dataset_names(local_store) == []
    sent = objects_in(local_store) + 1  # and the list
    assert sent >= 64

    assert repair(source, manifest, source=list_file).ok  # what the message says puts it back
    copied = copy_version("cats", source=source, target=local_store)
    assert (copied.present, copied.sent) == (sent, FILES + 1 - sent)
    assert list(reader("cats", local_store)()) == list(reader("cats", source)())


def test_a_copy_to_a_local_store_killed_half_way_leaves_no_version_and_the_next_sends_the_rest(tmp_path: Path) -> None:
    source, target = open_store(tmp_path / "source"), open_store(tmp_path / "target")
    list_file = write_image_list(tmp_path / "src", FILES)
    manifest = upload(list_file, "cats", store=source).manifest
    held = Path(source.local_path() or "", layout.object_path("cats", held_entry(manifest).sha256))
    held.unlink()
    os.mkfifo(held)  # the copy reading it waits there, its first batch of parts sent
    command = [sys.executable, "-m", "datamount.cli.main", "cp", "cats", "--from", source.url, "--to", target.url]
    process = subprocess.Popen([*command, "-q"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (target.exists("datasets/cats/objects") and objects_in(target) >= 63):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert catalog.versions(target, "cats") == [] and catalog.dataset_names(target) == []
    sent = objects_in(target) + 1  # and the list

    held.unlink()
    held.write_bytes((list_file.parent / held_entry(manifest).path).read_bytes())
    copied = copy_version("cats", source=source, target=target)  # the killed copy's lock is not waited for
    assert copied.created and (copied.present, copied.sent) == (sent, FILES + 1 - sent)
    assert list(reader("cats", target)()) == list(reader("cats", source)())


def test_the_command(tmp_path: Path) -> None:
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    upload(write_image_list(tmp_path / "src", 3), "cats", store=source)
    runner = CliRunner()
    sent = runner.invoke(cli, ["cp", "cats", "--from", source, "--to", target, "-q"])
    assert sent.exit_code == 0, sent.output
    assert sent.output.startswith("copied cats to cats@1 in ") and "4 part(s)" in sent.output
    again = runner.invoke(cli, ["cp", "cats", "--from", source, "--to", target, "-q"])
    assert again.output == f"{target} already holds cats as cats@1; nothing sent\n"
    missing = runner.invoke(cli, ["cp", "dogs", "--from", source, "--to", target])
    assert missing.exit_code == 3 and missing.output.startswith("datamount: error: no dataset named 'dogs'")


def test_the_command_takes_backend_options_for_each_store(tmp_path: Path, s3_server: S3Server, s3_bucket: str) -> None:
    """``-o`` is for the store copied from, ``--to-option`` for the store copied to (an S3 store needs its endpoint
    here); an option one store does not take is refused, naming it."""
    local = str(tmp_path / "local")
    upload(write_image_list(tmp_path / "src", 3), "cats", store=local)
    remote, endpoint = f"s3://{s3_bucket}/team", f"endpoint_url={s3_server.endpoint_url}"
    runner = CliRunner()
    sent = runner.invoke(cli, ["cp", "cats", "--from", local, "--to", remote, "--to-option", endpoint, "-q"])
    assert sent.exit_code == 0, sent.output
    assert sent.output.startswith(f"copied cats to cats@1 in {remote}: 4 part(s)")
    back = str(tmp_path / "back")
    fetched = runner.invoke(cli, ["cp", "cats", "--from", remote, "-o", endpoint, "--to", back, "-q"])
    assert fetched.exit_code == 0, fetched.output
    assert list(reader("cats", back)()) == list(reader("cats", local)())
    wrong = runner.invoke(cli, ["cp", "cats", "--from", local, "-o", endpoint, "--to", remote])
    assert wrong.exit_code == 2
    assert wrong.output == "datamount: error: unknown local store option endpoint_url; the options are mount\n"
