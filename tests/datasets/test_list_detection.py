"""No silent guesses about a ``.list``: a list that names files is an image list, and every non-blank line is a row."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import catalog
from datamount.datasets.errors import ListFormatError
from datamount.datasets.listfile import Kind, parse_list
from datamount.storage import open_store


def image_list(folder: Path, rows: int, present: int) -> Path:
    """A list of ``rows`` JPEG paths of which only the first ``present`` exist."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for index in range(present):
        (folder / "data" / f"img{index}.jpg").write_bytes(b"\xff\xd8\xff" + bytes([index % 256]) * 50)
    path = folder / "train.list"
    path.write_text("".join(f"data/img{index}.jpg\t{index % 3}\n" for index in range(rows)), encoding="utf-8")
    return path


@pytest.mark.parametrize("present", [0, 1, 100], ids=["none-present", "one-present", "a-third-present"])
def test_a_broken_image_list_never_becomes_a_text_dataset(tmp_path: Path, present: int) -> None:
    path = image_list(tmp_path, 300, present)
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    assert len(caught.value.problems) == 300 - present
    assert all("does not exist" in problem.message for problem in caught.value.problems)
    assert caught.value.problems[0].line == present + 1


def test_a_broken_image_list_reports_folders_and_escapes_too(tmp_path: Path) -> None:
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "data" / "a.jpg").write_bytes(b"A")
    path = tmp_path / "x.list"
    path.write_text("data/a.jpg\t1\ndata/sub\t2\n../outside.jpg\t3\ndata/b.png\t4\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    assert [problem.line for problem in caught.value.problems] == [2, 3, 4]


def test_a_broken_image_list_is_refused_by_upload_with_its_problems(tmp_path: Path) -> None:
    path = image_list(tmp_path / "src", 300, 100)
    store = tmp_path / "store"
    done = CliRunner().invoke(cli, ["upload", str(path), "oops", "--store", str(store), "-q"])
    assert done.exit_code == 2, done.output
    assert "200 problems" in done.output and "--kind text" in done.output
    assert catalog.dataset_names(open_store(store)) == []


@pytest.mark.parametrize("path", ["data/img0.jpg ", " data/img0.jpg", "img0.jpg\u00a0"])
def test_a_path_with_stray_white_space_makes_an_image_list_that_names_it(tmp_path: Path, path: str) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "img0.jpg").write_bytes(b"\xff\xd8\xff")
    list_file = tmp_path / "train.list"
    list_file.write_text(f"{path}\tcat\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(list_file)
    [problem] = caught.value.problems
    assert problem.line == 1
    assert f"file {path!r} does not exist" in problem.message and "white space" in problem.message


def test_a_path_written_with_backslashes_is_named_with_the_separator_to_use(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "img0.jpg").write_bytes(b"\xff\xd8\xff")
    list_file = tmp_path / "train.list"
    list_file.write_text("data\\img0.jpg\tcat\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(list_file)
    [problem] = caught.value.problems
    assert problem.message.endswith("(paths in a .list separate folders with '/', not '\\')")


def test_a_text_list_whose_words_are_not_paths_stays_text(tmp_path: Path) -> None:
    path = tmp_path / "mt.list"
    path.write_text("le chat\tthe cat\nbonjour.\thello.\nmerci\tthanks\n", encoding="utf-8")
    assert parse_list(path).kind is Kind.TEXT


def test_every_non_blank_line_is_a_row_empty_fields_included(tmp_path: Path) -> None:
    path = tmp_path / "mt.list"
    path.write_bytes(b"a\tb\n\t\n  \t  \n\n   \nc\td\n")
    parsed = parse_list(path)
    assert list(parsed.rows()) == [("a", "b"), ("", ""), ("  ", "  "), ("c", "d")]
    path.write_bytes(b"a\tb\n\t\n  \t  \n\n   \nc\n")
    with pytest.raises(ListFormatError, match=":6: 1 column"):  # the line numbers count the blank lines
        parse_list(path)


def test_an_image_row_with_an_empty_path_is_reported_not_dropped(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"A")
    path = tmp_path / "x.list"
    path.write_text("a.jpg\t1\n\t2\n", encoding="utf-8")
    with pytest.raises(ListFormatError, match=r"x\.list:2: the file path"):
        parse_list(path)


@pytest.mark.parametrize("header", ["path\tlabel", "file\tclass", "Image\tLabel"])
def test_a_header_line_is_named_as_one(tmp_path: Path, header: str) -> None:
    (tmp_path / "img0.jpg").write_bytes(b"\xff\xd8\xff")
    list_file = tmp_path / "train.list"
    list_file.write_text(f"{header}\nimg0.jpg\tcat\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(list_file)
    [problem] = caught.value.problems
    assert problem.line == 1 and "a header line? a .list has none" in problem.message


def test_a_name_in_another_unicode_form_than_the_files_is_named(tmp_path: Path) -> None:
    """A list written with composed letters (NFC) for a file whose name has decomposed ones (NFD, as macOS writes
    them): the error shows the name as it is on disk."""
    on_disk = "cafe\u0301.jpg"  # NFD: 'e' and a combining acute accent
    (tmp_path / on_disk).write_bytes(b"\xff\xd8\xff")
    (tmp_path / "other.jpg").write_bytes(b"\xff\xd8\xff")
    list_file = tmp_path / "train.list"
    list_file.write_text("other.jpg\tdrink\ncaf\u00e9.jpg\tdrink\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(list_file)
    [problem] = caught.value.problems
    assert problem.line == 2 and f"there is {on_disk!r}" in problem.message and "Unicode form NFD" in problem.message
