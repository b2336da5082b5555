"""``datamount upload / ls / info / head / verify / rm / demo``, and one clear line for every kind of bad input."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from datamount.cli.formatting import format_size
from datamount.cli.main import cli
from datamount.storage import open_store
from tests.cli.terminal import answered_at_a_terminal
from tests.generated import MakeImageList


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    assert result.output.startswith("datamount: error: ")
    for fragment in fragments:
        assert fragment in result.output, result.output


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def test_one_row_is_counted_as_one(store_dir: str, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(1)
    uploaded = run("upload", str(list_file), "one", "--store", store_dir)
    assert "uploaded one@1: image, 1 row, 1 file (1 sent" in uploaded.output, uploaded.output
    again = run("upload", str(list_file), "one", "--store", store_dir)
    assert "it already holds exactly this list (1 row)" in again.output, again.output


def test_upload_then_catalog_commands(store_dir: str, make_image_list: MakeImageList) -> None:
    list_file = make_image_list(8)
    uploaded = run("upload", str(list_file), "cats", "--store", store_dir)
    assert uploaded.exit_code == 0, uploaded.output
    assert "uploaded cats@1: image, 8 rows, 8 files (8 sent" in uploaded.output
    assert "is up to date" in run("upload", str(list_file), "cats", "--store", store_dir).output

    listing = run("ls", "--store", store_dir)
    assert "cats" in listing.output and "image" in listing.output

    info = run("info", "cats", "--store", store_dir)
    for fragment in ("cats@1", "kind: image", "columns: file, label", "rows: 8", "versions: @1 (1 kept)"):
        assert fragment in info.output
    file_bytes = sum(path.stat().st_size for path in (list_file.parent / "data").iterdir())  # 8 x ~300 B
    list_bytes = sum(open_store(store_dir).list("datasets/cats/lists").values())
    assert f"files: 8 ({format_size(file_bytes)})" in info.output, info.output
    assert f"stored: {format_size(file_bytes + list_bytes)} (objects, list and shards)" in info.output

    head = run("head", "cats", "-n", "2", "--store", store_dir)
    assert head.output.splitlines() == ["(<JPEG 303 bytes>, '0')", "(<JPEG 304 bytes>, '1')"]

    verified = run("verify", "cats", "--store", store_dir, "--quiet")
    assert verified.exit_code == 0 and "all 11 objects match" in verified.output  # the list, 2 index parts, 8 files


def test_pack_twice_says_the_version_is_packed_and_info_counts_the_versions_kept(
    store_dir: str, make_image_list: MakeImageList
) -> None:
    run("upload", str(make_image_list(3)), "cats", "--store", store_dir)
    run("upload", str(make_image_list(5)), "cats", "--store", store_dir)
    first = run("pack", "cats", "--store", store_dir, "-q")
    assert first.exit_code == 0 and first.output.startswith("cats@2 is packed in 1 shard(s)"), first.output
    again = run("pack", "cats", "--store", store_dir, "-q")
    assert again.exit_code == 0 and again.output.startswith("cats@2 is already packed in 1 shard(s)"), again.output
    assert run("rm", "cats@1", "--yes", "--store", store_dir).exit_code == 0
    assert "versions: @2 (1 kept)" in run("info", "cats", "--store", store_dir).output


def test_info_of_a_version_not_packed_names_the_command_that_packs_it(
    store_dir: str, make_image_list: MakeImageList
) -> None:
    run("upload", str(make_image_list(2)), "team/cats.v2", "--store", store_dir)
    run("upload", str(make_image_list(3)), "team/cats.v2", "--store", store_dir)
    info = run("info", "team/cats.v2@1", "--store", store_dir)
    assert "   packed: no (datamount pack team/cats.v2@1)\n" in info.output, info.output


def test_verify_fails_on_a_corrupt_object(store_dir: str, make_image_list: MakeImageList) -> None:
    run("upload", str(make_image_list(3)), "cats", "--store", store_dir)
    store = open_store(store_dir)
    victim = sorted(store.list("datasets/cats/objects"))[0]
    store.write(victim, b"tampered")
    result = run("verify", "cats", "--store", store_dir, "--quiet")
    assert result.exit_code == 1
    assert "wrong size" in result.output and "1 of 6 objects does not match the manifest" in result.output


def test_verify_counts_and_words_missing_objects_apart_from_damaged_ones(
    store_dir: str, make_image_list: MakeImageList
) -> None:
    run("upload", str(make_image_list(6)), "cats", "--store", store_dir)
    store = open_store(store_dir)
    objects = sorted(store.list("datasets/cats/objects"))  # 6 objects, the list, 2 index parts: 9 checked
    store.remove(objects[0])
    missing = run("verify", "cats", "--store", store_dir, "--quiet")
    assert missing.exit_code == 1
    assert missing.output.splitlines()[-1] == "cats@1: 1 of 9 objects is missing", missing.output
    store.remove(objects[1])
    for victim in objects[2:4]:
        store.write(victim, b"tampered")
    both = run("verify", "cats", "--store", store_dir, "--quiet")
    assert both.output.count("missing: ") == 2 and both.output.count("wrong size: ") == 2, both.output
    assert both.output.splitlines()[-1] == "cats@1: 2 of 9 objects are missing and 2 do not match the manifest"
    still = run("verify", "cats", "--repair", "--store", store_dir, "--quiet")
    assert still.exit_code == 1
    assert (
        still.output.splitlines()[-1]
        == "cats@1: 2 of 9 objects are still missing and 2 still do not match the manifest"
    )


def test_rm_asks_unless_yes(store_dir: str, make_image_list: MakeImageList) -> None:
    run("upload", str(make_image_list(2)), "cats", "--store", store_dir)
    refused = run("rm", "cats", "--store", store_dir)
    assert refused.exit_code == 2 and "pass --yes" in refused.output
    assert open_store(store_dir).list() != {}
    removed = run("rm", "cats", "--yes", "--store", store_dir)
    assert removed.exit_code == 0 and "removed cats version(s) 1" in removed.output
    assert "no datasets" in run("ls", "--store", store_dir).output


@pytest.mark.parametrize(
    ("answer", "code", "said", "kept"),
    [
        (b"n\n", 0, "nothing removed: cats (versions [1]) is kept\n", True),
        (b"\n", 0, "nothing removed: cats (versions [1]) is kept\n", True),  # the default is no
        (b"y\n", 0, "removed cats version(s) 1\n", False),
        (b"\x04", 130, "datamount: interrupted\n", True),  # end of input (Ctrl-D): not an answer
    ],
    ids=["no", "default", "yes", "end-of-input"],
)
def test_rm_at_a_terminal_removes_only_on_yes(
    store_dir: str, make_image_list: MakeImageList, answer: bytes, code: int, said: str, kept: bool
) -> None:
    """Declining is an answer, not a failure: status 0 and a line saying nothing was removed."""
    run("upload", str(make_image_list(2)), "cats", "--store", store_dir)
    status, output = answered_at_a_terminal(answer, "rm", "cats", "--store", store_dir)
    assert status == code and "? [y/N]: " in output and output.endswith(said), output
    assert ("cats" in run("ls", "--store", store_dir).output) == kept


def test_ls_of_an_empty_store(store_dir: str) -> None:
    assert "no datasets in" in run("ls", "--store", store_dir).output


def test_demo_runs_offline_on_the_default_store() -> None:
    result = run("demo", "--quiet")
    assert result.exit_code == 0, result.output
    assert "uploaded demo-images@1 (image, 200 rows)" in result.output
    assert "uploaded demo-translation@1 (text, 16 rows)" in result.output
    assert "(<PNG " in result.output and "samples/s" in result.output
    # Each rate is measured over a quarter of a second at least, whole passes read again as often as it takes (one
    # pass of the 16 pairs alone takes a few hundredths of a millisecond).
    rates = re.findall(
        r"([\d,]+) pass\(es\) of (\d+) samples \([^)]+\) in (\d+\.\d\d) s: [\d,]+ samples/s", result.output
    )
    assert [int(rows) for _, rows, _ in rates] == [200, 16], result.output
    assert all(float(seconds) >= 0.25 for _, _, seconds in rates), result.output
    assert "Le chat dort sur le canapé." in result.output
    again = run("demo", "--quiet")
    assert "already up to date: demo-images@1" in again.output


# -- bad input: one line naming the cause, a non-zero exit, the store as it was ------------------------------


def write_list(tmp_path: Path, text: str | bytes, name: str = "bad.list") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "a.jpg").write_bytes(b"A")
    (tmp_path / "b.jpg").write_bytes(b"B")
    (tmp_path / "folder.jpg").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("a.jpg\t1\nb.jpg\t2\textra\n", [":2: 3 column(s), but line 1 has 2"]),
        ("a.jpg\t1\nmissing.jpg\t2\n", [":2: file 'missing.jpg' does not exist"]),
        ("a.jpg\t1\nfolder.jpg\t2\n", [":2: 'folder.jpg' is a folder, not a file"]),
        ("a.jpg\t1\n../../etc/passwd\t2\n", [":2: path '../../etc/passwd' leaves the root folder"]),
        ("a.jpg\t1\n/etc/passwd\t2\n", [":2: absolute path '/etc/passwd'"]),
        (b"a.jpg\t1\nb\xe9.jpg\t2\n", [":2: not UTF-8 text"]),
        ("", ["the list is empty"]),
        ("a.jpg\t1\nmissing.jpg\nfolder.jpg\t2\n", ["3 problems", "line 2:", "line 3:"]),
    ],
    ids=["columns", "missing", "folder", "escape", "absolute", "not-utf8", "empty", "several"],
)
def test_a_bad_list_is_refused_and_nothing_is_written(
    files: Path, store_dir: str, content: str | bytes, fragments: list[str]
) -> None:
    result = run("upload", write_list(files, content), "d", "--store", store_dir, "--kind", "image")
    assert_one_line_error(result, 2, *fragments)
    assert open_store(store_dir).list() == {}


def test_a_link_leading_out_of_the_root_is_refused(files: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside") / "secret.jpg"
    outside.write_bytes(b"secret")
    os.symlink(outside, files / "link.jpg")
    store_dir = str(tmp_path_factory.mktemp("store"))
    result = run("upload", write_list(files, "a.jpg\t1\nlink.jpg\t2\n"), "d", "--store", store_dir)
    assert_one_line_error(result, 2, ":2: path 'link.jpg' leads outside the root folder")
    assert open_store(store_dir).list() == {}


@pytest.mark.parametrize("name", ["../escape", "public", "bad name", "a/b/c", "x@2"])
def test_invalid_or_reserved_names(files: Path, store_dir: str, name: str) -> None:
    result = run("upload", write_list(files, "a.jpg\t1\n"), name, "--store", store_dir)
    assert_one_line_error(result, 2, repr(name.partition("@")[0]) if "@" not in name else "invalid dataset name")
    assert open_store(store_dir).list() == {}


@pytest.mark.parametrize("command", ["info", "head", "verify", "rm"])
def test_unknown_dataset_or_version(command: str, store_dir: str, make_image_list: MakeImageList) -> None:
    run("upload", str(make_image_list(2)), "cats", "--store", store_dir)
    unknown = run(command, "dogs", "--store", store_dir, *(["--yes"] if command == "rm" else []))
    assert_one_line_error(unknown, 3, "no dataset named 'dogs'")
    version = run(command, "cats@9", "--store", store_dir, *(["--yes"] if command == "rm" else []))
    assert_one_line_error(version, 3, "no version 9")


def test_an_unreachable_store_fails_fast_naming_it(files: Path) -> None:
    result = run(
        "upload",
        write_list(files, "a.jpg\t1\n"),
        "d",
        "--store",
        "s3://bucket",
        "-o",
        "endpoint_url=http://127.0.0.1:9",
    )
    # Refused, then given up after the default 3 attempts: before the open check's deadline, not cut by it.
    assert_one_line_error(result, 5, "http://127.0.0.1:9 did not answer (", "; 3 attempts)")
    assert "no answer within" not in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["upload", "LIST", "d", "--pack", "--shard-size", "12XB"], "'12XB' is not a size; write e.g. 256MB"),
        (["pack", "d", "--shard-size", "0"], "the size must be at least one byte"),
        (["ls", "-o", "no-value"], "expected KEY=VALUE, got 'no-value'"),
        (
            ["upload", "LIST", "d", "--pack", "--shard-size", "4MiB"],
            "a shard size of 4,194,304 bytes is less than one row group of 8,388,608 bytes",
        ),
        (
            ["pack", "d", "--shard-size", "1MB"],
            "a shard size of 1,000,000 bytes is less than one row group of 8,388,608 bytes: a shard holds whole row "
            "groups, so it cannot be that small; ask for shards of at least 8,388,608 bytes",
        ),
        (["import", "d", "--shard-size", "100KB"], "a shard size of 100,000 bytes is less than one row group"),
    ],
    ids=["upload-size", "pack-size", "option", "upload-below-a-row-group", "pack-below-a-row-group", "import"],
)
def test_usage_errors_come_before_the_store_is_opened(files: Path, args: list[str], fragment: str) -> None:
    args = [write_list(files, "a.jpg\t1\n") if arg == "LIST" else arg for arg in args]
    result = run(*args, "--store", "s3://bucket", "-o", "endpoint_url=http://127.0.0.1:9")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("datamount: error: invalid value for") and fragment in result.output
    assert "127.0.0.1:9" not in result.output


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "ok.jpg").write_bytes(b"ok")
    (tmp_path / "locked.jpg").write_bytes(b"locked")
    (tmp_path / "locked.jpg").chmod(0o000)
    (tmp_path / "x.list").write_text("ok.jpg\t1\nlocked.jpg\t2\n", encoding="utf-8")
    command = [sys.executable, "-m", "datamount.cli.main", "upload", str(tmp_path / "x.list"), "d"]
    command += ["--store", str(tmp_path / "store")]
    if os.geteuid() == 0:
        # root reads any file; without the capabilities that let it, it meets permissions as others do
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and util-linux's setpriv is not installed")
        drop = "-dac_override,-dac_read_search"
        command = [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}", *command]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "x.list:2: file 'locked.jpg' cannot be read (permission denied)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "store").exists() or open_store(tmp_path / "store").list() == {}


def test_export_counts_the_list_among_the_files_it_writes(
    store_dir: str, make_image_list: MakeImageList, tmp_path: Path
) -> None:
    list_file = make_image_list(3)
    run("upload", str(list_file), "cats", "--store", store_dir)
    folder = tmp_path / "out"
    first = run("export", "cats", str(folder), "--store", store_dir, "-q")
    assert first.exit_code == 0, first.output
    written = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
    assert len(written) == 4 and "4 file(s) written" in first.output, (written, first.output)
    assert first.output.rstrip().endswith(f"the list as {list_file.name}"), first.output
    again = run("export", "cats", str(folder), "--store", store_dir, "-q")
    assert again.exit_code == 0 and "0 file(s) written (0 B)" in again.output and "; 4 already there" in again.output


def test_reading_a_store_folder_that_does_not_exist_names_it_and_makes_nothing(tmp_path: Path) -> None:
    """A mistyped ``--store`` path (or ``$DATAMOUNT_STORE``) to read from: the message says there is no such folder,
    and none is made (before, each command made an empty store there and said it held no datasets)."""
    missing = tmp_path / "stroe"
    listing = run("ls", "--store", str(missing))
    assert listing.exit_code == 0 and f"no datasets in file://{missing} (no such folder)" in listing.output
    head = run("head", "cats", "--store", str(missing))
    assert_one_line_error(head, 3, f"no dataset named 'cats' in file://{missing} (no such folder); see 'datamount ls'")
    assert not missing.exists()


@pytest.mark.parametrize(
    "version", ["²", "١", "+1", " 1", "01", "1 "], ids=["super-2", "arabic-1", "plus", "space", "zero", "after"]
)
@pytest.mark.parametrize("command", [["info"], ["rm", "--yes"], ["diff"]], ids=["info", "rm", "diff"])
def test_a_version_not_in_ascii_digits_is_one_line_naming_the_rule(
    store_dir: str, make_image_list: MakeImageList, command: list[str], version: str
) -> None:
    """Not a traceback (``²``: str.isdigit takes it, int refuses it) nor version 1 (``١``: int reads it as 1)."""
    run("upload", str(make_image_list(2)), "k", "--store", store_dir)
    result = run(*command, f"k@{version}", "--store", store_dir)
    assert_one_line_error(result, 2, f"invalid version {version!r} in 'k@{version}'", "in the digits 0-9")
    assert result.output.count("\n") == 1
    assert run("info", "k@1", "--store", store_dir).exit_code == 0
