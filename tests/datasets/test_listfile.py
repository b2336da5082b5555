"""Parsing and checking ``.list`` files: every problem found, each with its line number."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets.errors import ListFormatError
from datamount.datasets.listfile import Kind, parse_list


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def test_image_list_rows_and_files(tmp_path: Path) -> None:
    write(tmp_path / "data" / "a.jpg", b"A")
    write(tmp_path / "data" / "b.jpg", b"BB")
    parsed = parse_list(write(tmp_path / "x.list", "./data/a.jpg\t1\ndata/b.jpg\t5\n./data/a.jpg\t2\n"))
    assert parsed.kind is Kind.IMAGE
    assert list(parsed.rows()) == [("data/a.jpg", "1"), ("data/b.jpg", "5"), ("data/a.jpg", "2")]
    assert [entry.path for entry in parsed.files] == ["data/a.jpg", "data/b.jpg"]
    assert parsed.files[1].size == 2 and list(parsed.row_sizes()) == [1, 2, 1]
    assert parsed.columns() == ["file", "label"]


def test_text_list_with_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "mt.list", "\ufeffbonjour\thello\r\n\r\n  \nle chat\tthe cat\r\n".encode())
    parsed = parse_list(path)
    assert parsed.kind is Kind.TEXT
    assert list(parsed.rows()) == [("bonjour", "hello"), ("le chat", "the cat")]
    assert parsed.row_count == 2
    assert parsed.columns() == ["source", "target"]


def test_labels_stay_exactly_as_written(tmp_path: Path) -> None:
    write(tmp_path / "a.jpg", b"A")
    parsed = parse_list(write(tmp_path / "x.list", "a.jpg\t007\t 1.50 \tcat dog\n"))
    assert list(parsed.rows()) == [("a.jpg", "007", " 1.50 ", "cat dog")]
    assert parsed.columns() == ["file", "label1", "label2", "label3"]


def test_one_column_lists_are_allowed(tmp_path: Path) -> None:
    parsed = parse_list(write(tmp_path / "x.list", "just text\nmore text\n"))
    assert (parsed.kind, parsed.width, parsed.columns()) == (Kind.TEXT, 1, ["text"])


def test_every_wrong_line_is_reported_with_both_counts(tmp_path: Path) -> None:
    path = write(tmp_path / "mt.list", "a\tb\nc\nd\te\tf\ng\th\n")
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    assert [p.line for p in caught.value.problems] == [2, 3]
    assert "1 column(s), but line 1 has 2" in str(caught.value)
    assert "3 column(s), but line 1 has 2" in str(caught.value)
    assert str(path) in str(caught.value)


def test_missing_files_folders_and_escapes_are_all_reported(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root / "ok.jpg", b"ok")
    (root / "folder.jpg").mkdir()
    write(tmp_path / "outside.jpg", b"secret")
    os.symlink(tmp_path / "outside.jpg", root / "link.jpg")
    path = write(
        root / "x.list",
        "ok.jpg\t1\nmissing.jpg\t1\nfolder.jpg\t1\n../outside.jpg\t1\n/etc/passwd\t1\nlink.jpg\t1\nok.jpg\t1\n"
        "ok.jpg/inner.jpg\t1\n",
    )
    with pytest.raises(ListFormatError) as caught:
        parse_list(path, kind="image")
    messages = {p.line: p.message for p in caught.value.problems}
    assert sorted(messages) == [2, 3, 4, 5, 6, 8]
    assert "does not exist" in messages[2]
    assert "is a folder" in messages[3]
    assert "leaves the root" in messages[4]
    assert "absolute path" in messages[5]
    assert "through the link 'link.jpg'" in messages[6]
    # A path through a file (as if it were a folder) was a bare NotADirectoryError, with no line.
    assert messages[8] == f"file 'ok.jpg/inner.jpg' does not exist ({root}/ok.jpg/inner.jpg)"


def test_a_linked_folder_is_one_problem_per_link_and_follow_links_reads_through_it(tmp_path: Path) -> None:
    """A ``data/`` folder that is a link elsewhere gave one identical line per file, with no way through."""
    for folder in ("real", "other"):
        for i in range(40):
            write(tmp_path / folder / f"{i}.jpg", f"{folder}{i}".encode())
    root = tmp_path / "project"
    root.mkdir()
    os.symlink(tmp_path / "real", root / "data")
    os.symlink(tmp_path / "other", root / "more")
    write(root / "inside.jpg", b"inside")
    os.symlink(root / "inside.jpg", root / "alias.jpg")  # a link that stays inside is fine
    rows = [f"data/{i}.jpg\t1\n" for i in range(40)] + ["alias.jpg\t2\n", "more/3.jpg\t3\n"]
    path = write(root / "x.list", "".join(rows))
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    data, more = caught.value.problems
    assert data.line == 1 and more.line == 42
    assert "'data/0.jpg' (and 39 more lines through it)" in data.message
    assert f"through the link 'data' (to {tmp_path / 'real'})" in data.message and "--follow-links" in data.message
    assert "'more/3.jpg' leads outside" in more.message and "through the link 'more'" in more.message
    parsed = parse_list(path, follow_links=True)
    files = {entry.path: entry for entry in parsed.files}
    assert parsed.local_path(files["data/7.jpg"].path) == str(root / "data" / "7.jpg") and len(parsed.files) == 42


def test_root_option_changes_where_paths_point(tmp_path: Path) -> None:
    write(tmp_path / "images" / "a.jpg", b"A")
    parsed = parse_list(write(tmp_path / "lists" / "x.list", "a.jpg\tcat\n"), root=str(tmp_path / "images"))
    assert parsed.kind is Kind.IMAGE
    assert parsed.local_path(parsed.files[0].path) == str(tmp_path / "images" / "a.jpg")


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty"), (b"\n\n  \n", "empty"), (b"ok\tfine\nbad \xff\xfe byte\tx\n", ":2: not UTF-8")],
    ids=["empty", "blank-only", "not-utf8"],
)
def test_unusable_list_files(tmp_path: Path, content: bytes, message: str) -> None:
    with pytest.raises(ListFormatError, match=message):
        parse_list(write(tmp_path / "x.list", content))


def test_a_folder_or_a_missing_list_file(tmp_path: Path) -> None:
    with pytest.raises(ListFormatError, match="is a folder"):
        parse_list(tmp_path)
    with pytest.raises(ListFormatError, match="no such file"):
        parse_list(tmp_path / "absent.list")


def test_forcing_text_keeps_paths_as_text(tmp_path: Path) -> None:
    write(tmp_path / "a.jpg", b"A")
    parsed = parse_list(write(tmp_path / "x.list", "a.jpg\tcaption\n"), kind="text")
    assert parsed.kind is Kind.TEXT and len(parsed.files) == 0


def test_many_problems_are_summarised(tmp_path: Path) -> None:
    path = write(tmp_path / "x.list", "a\tb\n" + "c\n" * 50)
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    assert len(caught.value.problems) == 50
    assert "50 problems" in str(caught.value) and "... and 30 more" in str(caught.value)


_CELL = st.text(alphabet=st.characters(exclude_characters="\t\n\r", exclude_categories=["Cs"]), min_size=1).filter(
    lambda s: s.strip() != ""
)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(_CELL, _CELL), min_size=1, max_size=20))
def test_text_lists_round_trip(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str]]) -> None:
    folder = tmp_path_factory.mktemp("prop")
    path = write(folder / "x.list", "".join(f"{a}\t{b}\n" for a, b in rows))
    parsed = parse_list(path, kind="text")
    assert list(parsed.rows()) == [(a.removeprefix("\ufeff") if i == 0 else a, b) for i, (a, b) in enumerate(rows)]
