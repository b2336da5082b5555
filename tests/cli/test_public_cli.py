"""``datamount public ls / install / rm`` against a real mirror on loopback and generated files; one-line errors with
their exit status."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from datamount.cli.main import cli
from datamount.datasets import public
from datamount.readers import reader
from tests.cli.terminal import answered_at_a_terminal
from tests.datasets.http_files import FileServer
from tests.datasets.public_files import make_mnist, make_wmt14, md5, registered, serve, with_checksums_of


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    assert result.output.startswith("datamount: error: ") and result.output.count("\n") == 1, result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[FileServer]:
    """A mirror serving generated MNIST and WMT14 files, registered with their md5s."""
    mnist_files = make_mnist(tmp_path / "mnist", train=60, test=10).folder
    wmt_files = make_wmt14(tmp_path / "wmt14").path.parent
    with FileServer() as server:
        serve(server, "mnist", mnist_files)
        serve(server, "wmt14", wmt_files)
        with registered(with_checksums_of("mnist", mnist_files)), registered(with_checksums_of("wmt14", wmt_files)):
            yield server


def test_ls_shows_what_can_be_installed(store_dir: str) -> None:
    listing = run("public", "ls", "--store", store_dir)
    assert listing.exit_code == 0, listing.output
    lines = {line.split()[0]: line for line in listing.output.splitlines()[1:5]}
    assert sorted(lines) == ["imagenet", "imdb", "mnist", "wmt14"]
    assert " no " in lines["mnist"] and "download (11.6 MB)" in lines["mnist"]
    assert "--from PATH only" in lines["imagenet"]


def test_install_ls_read_and_install_again(store_dir: str, mirror: FileServer) -> None:
    installed = run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url)
    assert installed.exit_code == 0, installed.output
    assert installed.output.startswith("installed mnist as public/mnist@1: train 60, test 10 rows")
    assert "reader('mnist')" in installed.output

    again = run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url)
    assert again.output == "mnist is already installed as public/mnist@1 (train 60, test 10 rows); nothing to do\n"
    assert len(mirror.requests) == 4

    listing = run("public", "ls", "--store", store_dir)
    mnist_line = next(line for line in listing.output.splitlines() if line.startswith("mnist"))
    assert "@1" in mnist_line and "train 60, test 10" in mnist_line

    head = run("head", "mnist", "-n", "2", "--store", store_dir)
    assert head.exit_code == 0 and all(line.startswith("(<bytes 784 bytes>, '") for line in head.output.splitlines())
    first = next(iter(reader("mnist", store_dir)()))
    assert len(first) == 2 and len(first[0]) == 784 and first[1] in set("0123456789")


def test_install_from_a_folder(store_dir: str, tmp_path: Path, mirror: FileServer) -> None:
    installed = run("public", "install", "wmt14", "--from", str(tmp_path / "wmt14"), "--store", store_dir)
    assert installed.exit_code == 0, installed.output
    assert installed.output.startswith("installed wmt14 as public/wmt14@1: train 15, test 15, gen 15 rows")
    assert mirror.requests == []


def test_a_server_error_is_one_line_naming_the_url_and_status(store_dir: str, mirror: FileServer) -> None:
    mirror.fail("mnist/train-images-idx3-ubyte.gz", 503)
    result = run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url, "--retries", "1")
    assert_one_line_error(
        result,
        5,
        f"could not download {mirror.url}/mnist/train-images-idx3-ubyte.gz: HTTP 503 Service Unavailable",
        "(after 2 attempts)",
    )
    assert "public/mnist" not in run("ls", "--store", store_dir).output


def test_a_missing_file_on_the_mirror_is_not_found(store_dir: str, mirror: FileServer) -> None:
    mirror.fail("mnist/t10k-labels-idx1-ubyte.gz", 404)
    result = run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url)
    assert_one_line_error(result, 3, "t10k-labels-idx1-ubyte.gz: HTTP 404 Not Found")


def test_a_checksum_mismatch_is_one_line_and_installs_nothing(store_dir: str, mirror: FileServer) -> None:
    mirror.corrupt("mnist/train-labels-idx1-ubyte.gz")
    result = run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url)
    assert_one_line_error(result, 1, "train-labels-idx1-ubyte.gz: the downloaded file's md5 is")
    assert run("public", "rm", "mnist", "--yes", "--store", store_dir).exit_code == 3


def test_rm_asks_unless_yes(store_dir: str, mirror: FileServer) -> None:
    run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url)
    refused = run("public", "rm", "mnist", "--store", store_dir)
    assert refused.exit_code == 2
    assert "refusing to remove public/mnist without confirmation; pass --yes" in refused.output
    removed = run("public", "rm", "mnist", "--yes", "--store", store_dir)
    assert removed.exit_code == 0 and removed.output == "removed public/mnist version(s) 1\n"
    gone = run("public", "rm", "mnist", "--yes", "--store", store_dir)
    assert_one_line_error(gone, 3, "the public dataset mnist is not installed")


def test_rm_at_a_terminal_keeps_the_dataset_when_the_answer_is_no(store_dir: str, mirror: FileServer) -> None:
    run("public", "install", "mnist", "--store", store_dir, "--mirror", mirror.url)
    rows = len(reader("mnist", store_dir))
    status, output = answered_at_a_terminal(b"n\n", "public", "rm", "mnist", "--store", store_dir)
    assert status == 0 and output.endswith("? [y/N]: n\nnothing removed: public/mnist is kept\n"), output
    assert len(reader("mnist", store_dir)) == rows


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["install", "mnsit"], 3, "no public dataset named 'mnsit'; datamount knows: imagenet, imdb, mnist, wmt14"),
        (["install", "imagenet"], 3, "imagenet cannot be downloaded; install it with --from PATH"),
        (["install", "mnist", "--from", "/nonexistent/folder"], 3, "/nonexistent/folder does not exist"),
        (["install", "mnist", "--mirror", "ftp://mirror.example"], 2, "is not an http:// or https:// URL"),
        (["rm", "nothing"], 3, "no public dataset named 'nothing'"),
    ],
    ids=["unknown", "imagenet-needs-from", "missing-from", "bad-mirror", "rm-unknown"],
)
def test_mistakes_are_one_line(store_dir: str, args: list[str], code: int, fragment: str) -> None:
    assert_one_line_error(run("public", *args, "--store", store_dir), code, fragment)


def test_the_registered_checksums_are_restored(tmp_path: Path) -> None:
    original = public.get("mnist")
    with registered(with_checksums_of("mnist", make_mnist(tmp_path / "m", train=2, test=1).folder)):
        assert public.get("mnist") != original
    assert public.get("mnist") == original


def test_a_sites_own_copy_installs_with_its_checksums(store_dir: str, tmp_path: Path) -> None:
    """Files whose md5s are not the published ones were a dead end; the error now names --checksums."""
    folder = make_mnist(tmp_path / "site", train=6, test=2).folder
    refused = run("public", "install", "mnist", "--from", str(folder), "--store", store_dir)
    assert_one_line_error(refused, 1, "is not the published one", "--checksums FILE (md5sum's format)")
    sums = tmp_path / "mnist.md5"
    if shutil.which("md5sum"):  # the tool's own output, as a site would write it
        listing = subprocess.run(["md5sum", *sorted(str(path) for path in folder.iterdir())], capture_output=True)
        sums.write_bytes(listing.stdout)
    else:
        sums.write_text("".join(f"{md5(path)}  {path}\n" for path in sorted(folder.iterdir())), encoding="utf-8")
    installed = run("public", "install", "mnist", "--from", str(folder), "--checksums", str(sums), "--store", store_dir)
    assert installed.exit_code == 0, installed.output
    assert "checked against the md5s in" in installed.output and "your site's copy" in installed.output
    assert "installed mnist as public/mnist@1: train 6, test 2 rows" in installed.output


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not an md5 line\n", "mnist.md5:1: not an md5sum line"),
        (f"{'0' * 32}  other.gz\n", "mnist.md5:1: mnist has no file named 'other.gz'; its files: t10k-images"),
        ("\n", "mnist.md5: no md5sum lines"),
    ],
    ids=["malformed", "unknown-file", "empty"],
)
def test_a_wrong_checksums_file_is_one_line_naming_its_line(
    store_dir: str, tmp_path: Path, text: str, fragment: str
) -> None:
    sums = tmp_path / "mnist.md5"
    sums.write_text(text, encoding="utf-8")
    result = run("public", "install", "mnist", "--checksums", str(sums), "--from", str(tmp_path), "--store", store_dir)
    assert_one_line_error(result, 2, fragment)


def test_a_dataset_a_user_put_in_the_public_area_is_listed_and_removed(store_dir: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"shared")
    listing = tmp_path / "team.list"
    listing.write_text("a.txt\tone\n", encoding="utf-8")
    assert run("upload", str(listing), "public/shared", "--store", store_dir, "--quiet").exit_code == 0
    assert list(reader("shared", store_dir)()) == [(b"shared", "one")]

    shown = run("public", "ls", "--store", store_dir)
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if line.startswith("shared "))
    assert "@1 " in line and "uploaded" in line
    as_json = json.loads(run("public", "ls", "--store", store_dir, "--json").output)
    (entry,) = [entry for entry in as_json["datasets"] if entry["name"] == "shared"]
    assert entry["kind"] == "image" and entry["installed"]["version"] == 1 and not entry["downloadable"]

    assert_one_line_error(run("public", "rm", "shared", "--store", store_dir), 2, "pass --yes")
    removed = run("public", "rm", "shared", "--yes", "--store", store_dir)
    assert removed.exit_code == 0 and "removed public/shared version(s) 1" in removed.output, removed.output
    assert_one_line_error(run("public", "rm", "shared", "--yes", "--store", store_dir), 3, "datamount knows: ")
    assert "shared" not in run("public", "ls", "--store", store_dir).output
