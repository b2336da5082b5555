"""No silent guesses about a ``.list``: a list that names files is an image list, and every non-blank line is a row."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.cli.main import cli
from datamount.datasets import catalog, upload
from datamount.datasets.errors import ListFormatError
from datamount.datasets.listfile import Kind, parse_list
from datamount.readers import reader
from datamount.storage import Store, open_store


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


def shapes(folder: Path, rows: int = 3, *, separator: str = " ", name: str = "sp.list") -> Path:
    """``rows`` PNG files under ``folder/imgs/`` and a list naming each with a label, joined by ``separator``."""
    (folder / "imgs").mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(rows):
        (folder / "imgs" / f"{index:04d}.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes([index % 256]) * 20)
        lines.append(f"imgs/{index:04d}.png{separator}{('circle', 'square')[index % 2]}\n")
    path = folder / name
    path.write_text("".join(lines), encoding="utf-8")
    return path


FIX = "Separate the columns with TABs, or give --kind text to store the lines as text"


@pytest.mark.parametrize(
    "separator", [" ", "   ", " \u00a0", "\u3000"], ids=["space", "spaces", "no-break-space", "ideographic-space"]
)
def test_an_image_list_joined_by_spaces_is_refused_with_its_lines_and_the_fix(tmp_path: Path, separator: str) -> None:
    path = shapes(tmp_path, separator=separator)
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    assert [problem.line for problem in caught.value.problems] == [1, 2, 3]
    first = caught.value.problems[0].message
    assert first.startswith(
        f"{'imgs/0000.png' + separator + 'circle'!r} starts with the path of the file 'imgs/0000.png'"
    )
    assert "taken for a text list, but 3 lines start with the path of an existing file" in str(caught.value)
    assert FIX in str(caught.value)


def test_with_kind_text_the_lines_joined_by_spaces_are_stored_as_text_as_asked(tmp_path: Path) -> None:
    path = shapes(tmp_path)
    with parse_list(path, kind="text") as parsed:
        assert parsed.kind is Kind.TEXT and parsed.kind_reason is None
        assert list(parsed.rows()) == [("imgs/0000.png circle",), ("imgs/0001.png square",), ("imgs/0002.png circle",)]


def test_a_path_with_a_space_in_its_name_joined_by_a_space_is_found(tmp_path: Path) -> None:
    (tmp_path / "my cat.png").write_bytes(b"\x89PNG")
    path = tmp_path / "x.list"
    path.write_text("le chat\tthe cat\n  my cat.png  cute\tyes\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    [problem] = caught.value.problems
    assert problem.line == 2 and "starts with the path of the file 'my cat.png'" in problem.message


def test_every_line_joined_by_spaces_is_in_the_report_file(tmp_path: Path) -> None:
    path = shapes(tmp_path, 45)
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    error = caught.value
    assert error.total == 45 and [problem.line for problem in error.problems] == list(range(1, 46))
    assert str(error).count("\n  line ") == 20 and "... and 25 more" in str(error) and FIX in str(error)
    assert error.report is not None
    written = Path(error.report).read_text(encoding="utf-8").splitlines()
    os.unlink(error.report)
    assert [int(line.split(":")[1]) for line in written] == list(range(1, 46))
    assert written[44].startswith(f"{path}:45: 'imgs/0044.png circle' starts with the path of the file")


def test_a_line_joined_by_spaces_in_an_image_list_is_named_with_the_separator_to_use(tmp_path: Path) -> None:
    path = shapes(tmp_path, 4, separator="\t")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace("\t", " ")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(path)
    assert [problem.line for problem in caught.value.problems] == [3, 3]
    assert caught.value.problems[1].message.endswith(
        "(columns separated by spaces? 'imgs/0002.png' exists: separate the columns with TABs)"
    )


def test_a_detected_kind_says_why_and_a_given_one_says_nothing(tmp_path: Path) -> None:
    images = shapes(tmp_path / "images", separator="\t")
    with parse_list(images) as parsed:
        assert parsed.kind_reason == f"image: every line's first column names a file in {images.parent}"
    with parse_list(images, kind="image") as parsed:
        assert parsed.kind is Kind.IMAGE and parsed.kind_reason is None
    text = tmp_path / "mt.list"
    text.write_text("le chat\tthe cat\nimgs x\ty\n", encoding="utf-8")
    (tmp_path / "imgs").mkdir()  # a folder, not a file: "imgs x" is text
    with parse_list(text) as parsed:
        assert parsed.kind is Kind.TEXT
        assert parsed.kind_reason is not None
        assert parsed.kind_reason.startswith(f"text: no line's first column names a file in {tmp_path} ")


def test_a_list_of_files_alone_is_an_image_list_without_labels(tmp_path: Path) -> None:
    """One column, each line an existing file: an image list whose rows are ``(bytes,)``, said so."""
    path = shapes(tmp_path, separator="")
    path.write_text("".join(f"imgs/{index:04d}.png\n" for index in range(3)), encoding="utf-8")
    store = open_store(tmp_path / "store")
    result = upload(path, "unlabelled", store=store)
    assert result.manifest.kind is Kind.IMAGE and result.manifest.columns == ["file"]
    assert result.kind_reason == (
        f"image: every line's first column names a file in {tmp_path} (one column: files without labels)"
    )
    rows = list(reader("unlabelled", store=store)())
    assert rows == [((tmp_path / "imgs" / f"{index:04d}.png").read_bytes(),) for index in range(3)]


def test_upload_refuses_a_list_joined_by_spaces_and_takes_it_as_text_when_asked(tmp_path: Path) -> None:
    path = shapes(tmp_path / "src")
    store = open_store(tmp_path / "store")
    with pytest.raises(ListFormatError, match="starts with the path of the file"):
        upload(path, "sp", store=store)
    assert catalog.dataset_names(store) == []
    result = upload(path, "sp", store=store, kind="text")
    assert result.manifest.kind is Kind.TEXT and result.kind_reason is None
    assert next(iter(reader("sp", store=store)())) == ("imgs/0000.png circle",)


def test_upload_to_s3_of_a_list_joined_by_spaces_stores_nothing(tmp_path: Path, s3_store: Store) -> None:
    path = shapes(tmp_path)
    with pytest.raises(ListFormatError):
        upload(path, "sp", store=s3_store)
    assert s3_store.list("") == {}
    upload(path, "sp", store=s3_store, kind="text")  # the same store takes it when told it is text
    assert s3_store.list("") != {}


def test_the_command_refuses_a_list_joined_by_spaces_with_its_lines_and_the_fix(tmp_path: Path) -> None:
    path = shapes(tmp_path / "src")
    store = str(tmp_path / "store")
    done = CliRunner().invoke(cli, ["upload", str(path), "sp", "--store", store, "-q"])
    assert done.exit_code == 2, done.output
    assert f"{path}: 3 problems:\n  line 1: 'imgs/0000.png circle' starts with the path" in done.stderr
    assert FIX in done.stderr and done.stdout == ""
    assert catalog.dataset_names(open_store(store)) == []
    done = CliRunner().invoke(cli, ["upload", str(path), "sp", "--store", store, "-q", "--kind", "text"])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("uploaded sp@1: text, 3 rows") and done.stderr == ""


def test_the_command_says_which_kind_it_detected_and_why(tmp_path: Path) -> None:
    path = shapes(tmp_path / "src", separator="\t")
    store = str(tmp_path / "store")
    done = CliRunner().invoke(cli, ["upload", str(path), "shapes", "--store", store, "-q"])
    assert done.exit_code == 0, done.output
    assert done.stderr == f"detected image: every line's first column names a file in {path.parent}\n"
    assert done.stdout.startswith("uploaded shapes@1: image, 3 rows")
    done = CliRunner().invoke(cli, ["upload", str(path), "shapes2", "--store", store, "--json"])
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert (document["datamount"], document["dataset"], document["version"]) == ("upload", "shapes2", 1)
    assert document["kind"] == "image" and document["kind_reason"].startswith("image: every line's first column")
    assert (document["rows"], document["files"], document["created"], document["columns"]) == (
        3,
        3,
        True,
        ["file", "label"],
    )
    given = CliRunner().invoke(cli, ["upload", str(path), "shapes3", "--store", store, "--json", "--kind", "image"])
    assert json.loads(given.stdout)["kind_reason"] is None


#: First columns of the property test's lines: files (one with a space in its name, one without a suffix), a
#: missing file, a folder, words.
FIRST = ["imgs/0.png", "imgs/1.png", "my cat.png", "notes", "imgs/9.png", "imgs", "le"]
SEPARATORS = ["\t", " ", "   ", "\u00a0", "\t ", " \t"]


def spaced_file(column: str, root: Path) -> str | None:
    """The existing file that ``column`` starts with, up to its first word or a later word ending in a file's
    suffix, when more words follow (the rule of docs/datasets.md); None if there is none."""
    start = column.strip()
    words = list(re.finditer(r"\S+", start))
    for index, word in enumerate(words[:-1]):
        if (index == 0 or word.group().endswith(".png")) and (root / start[: word.end()]).is_file():
            return start[: word.end()]
    return None


@settings(max_examples=120, deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["", " "]),
            st.sampled_from(FIRST),
            st.sampled_from(SEPARATORS),
            st.sampled_from(["circle", "le chat", "7"]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_no_list_whose_lines_start_with_a_file_and_white_space_is_taken_for_text(
    tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[str, str, str, str]]
) -> None:
    root = tmp_path_factory.mktemp("mixed")
    (root / "imgs").mkdir()
    for name in ("imgs/0.png", "imgs/1.png", "my cat.png", "notes"):
        (root / name).write_bytes(b"\x89PNG" + name.encode())
    texts = [lead + first + separator + label for lead, first, separator, label in lines]
    path = root / "x.list"
    path.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    spaced = {number for number, text in enumerate(texts, 1) if spaced_file(text.split("\t")[0], root)}
    try:
        parsed = parse_list(path)
    except ListFormatError as refused:
        assert spaced <= {problem.line for problem in refused.problems}
        if "taken for a text list" in str(refused):
            named = {p.line for p in refused.problems if "starts with the path of the file" in p.message}
            assert named == spaced and FIX in str(refused)
    else:
        with parsed:
            assert not spaced, f"lines {sorted(spaced)} start with a file and white space, yet {parsed.kind} was taken"
            assert parsed.kind_reason is not None and parsed.kind_reason.startswith(f"{parsed.kind.value}: ")
            if parsed.kind is Kind.IMAGE:
                assert all((root / row[0]).is_file() for row in parsed.rows())
    widths = {len(text.split("\t")) for text in texts}
    if len(widths) == 1:  # told it is text, a list of one width is stored as written
        with parse_list(path, kind="text") as parsed:
            assert list(parsed.rows()) == [tuple(text.split("\t")) for text in texts]
