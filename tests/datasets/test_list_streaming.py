"""Lists checked as a stream: the same problems, line for line, as the checks that held every row in memory; runs
sorted on disk whatever their number; many problems reported in bounded output, every one in a file."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamount.datasets import spool as spool_module
from datamount.datasets.errors import ListFormatError
from datamount.datasets.listfile import Kind, parse_list
from datamount.datasets.manifest import FileEntry
from datamount.datasets.spool import ExternalSort, FileSpool
from tests.datasets._list_reference import reference_check

#: First columns an image list may hold: files, the same file written two ways, missing ones, a folder, paths
#: through links that lead out of the root, one that stays inside, paths refused as written, a header word, and paths
#: of files joined to a label by white space (one with a space in its name).
PATHS = [
    "a.jpg",
    "./a.jpg",
    "b.jpg",
    "sub/c.jpg",
    "sub/../b.jpg",
    "missing.jpg",
    "sub/missing.png",
    " a.jpg",
    "folder.jpg",
    "out/x.jpg",
    "out/y.jpg",
    "./out/x.jpg",
    "out2/z.jpg",
    "alias.jpg",
    "../up.jpg",
    "/abs.jpg",
    "",
    "path",
    "a.jpg/inner.jpg",
    "sub\\c.jpg",
    "le chat",
    "a.jpg cat",
    "sub/c.jpg \u00a0 2",
    "my cat.jpg dog",
    "my cat",
]
_LABEL = st.sampled_from(["1", "cat", "", " 2 ", "chien"])
_ROW = st.tuples(st.sampled_from(PATHS), st.lists(_LABEL, min_size=0, max_size=2))
_LINE = st.one_of(_ROW, st.sampled_from(["", "   "]))


def _folder(base: Path) -> Path:
    """The root the lists are read in: three files (one with a space in its name), one in a sub-folder, a folder
    named like a file, two links to folders outside and one to a file inside."""
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (root / "folder.jpg").mkdir()
    (root / "a.jpg").write_bytes(b"A")
    (root / "b.jpg").write_bytes(b"BB")
    (root / "sub" / "c.jpg").write_bytes(b"CCC")
    (root / "my cat.jpg").write_bytes(b"M")
    for name in ("outside", "outside2"):
        (base / name).mkdir()
        (base / name / "x.jpg").write_bytes(b"X")
    os.symlink(base / "outside", root / "out")
    os.symlink(base / "outside2", root / "out2")
    os.symlink(root / "a.jpg", root / "alias.jpg")
    return root


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(_LINE, min_size=0, max_size=25),
    kind=st.sampled_from([None, Kind.IMAGE, Kind.TEXT]),
    crlf=st.booleans(),
    follow_links=st.booleans(),
)
def test_the_streaming_checks_find_what_the_checks_in_memory_found(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[tuple[str, list[str]] | str],
    kind: Kind | None,
    crlf: bool,
    follow_links: bool,
) -> None:
    root = _folder(tmp_path_factory.mktemp("list"))
    ending = "\r\n" if crlf else "\n"
    text = "".join(("\t".join([line[0], *line[1]]) if isinstance(line, tuple) else line) + ending for line in lines)
    list_file = root / "x.list"
    list_file.write_text(text, encoding="utf-8")
    expected_kind, expected_rows, expected = reference_check(str(list_file), kind=kind, follow_links=follow_links)
    with pytest.MonkeyPatch.context() as patch:  # every sort spills runs to disk and merges them in rounds
        patch.setattr(spool_module, "RUN_RECORDS", 2)
        patch.setattr(spool_module, "FAN_IN", 2)
        if expected:
            with pytest.raises(ListFormatError) as caught:
                parse_list(list_file, kind=kind, follow_links=follow_links)
            assert caught.value.problems == expected and caught.value.total == len(expected)
            return
        with parse_list(list_file, kind=kind, follow_links=follow_links) as parsed:
            assert (parsed.kind, list(parsed.rows())) == (expected_kind, expected_rows)
            assert parsed.row_count == len(expected_rows)
            if parsed.kind is Kind.IMAGE:
                named = sorted({row[0] for row in expected_rows})
                assert [entry.path for entry in parsed.files] == named
                sizes = {entry.path: entry.size for entry in parsed.files}
                assert list(parsed.row_sizes()) == [sizes[row[0]] for row in expected_rows]


def test_a_long_list_s_problems_are_counted_shown_in_part_and_written_to_a_file(tmp_path: Path) -> None:
    (tmp_path / "here.jpg").write_bytes(b"here")
    rows = ["here.jpg\tok\n" if i % 7 == 0 else f"gone/{i}.jpg\tlost\n" for i in range(5000)]
    rows[4321] = "here.jpg\tok\textra\n"
    list_file = tmp_path / "x.list"
    list_file.write_text("".join(rows), encoding="utf-8")
    missing = [i + 1 for i in range(5000) if i % 7 and i != 4321]
    with pytest.raises(ListFormatError) as caught:
        parse_list(list_file, kind="image")
    error = caught.value
    assert error.total == len(missing) + 1 and len(error.problems) == 1000
    assert [problem.line for problem in error.problems] == sorted([*missing, 4322])[:1000]
    message = str(error)
    assert message.count("\n  line ") == 20 and f"... and {error.total - 20} more" in message
    assert error.report is not None and f"every problem is listed in {error.report}" in message
    written = Path(error.report).read_text(encoding="utf-8").splitlines()
    os.unlink(error.report)
    assert len(written) == error.total
    assert written[0] == f"{list_file}:2: file 'gone/1.jpg' does not exist ({tmp_path}/gone/1.jpg)"
    assert f"{list_file}:4322: 3 column(s), but line 1 has 2 (columns are TAB-separated)" in written
    assert [int(line.split(":")[1]) for line in written] == sorted([*missing, 4322])


def test_a_few_problems_need_no_report_file(tmp_path: Path) -> None:
    list_file = tmp_path / "x.list"
    list_file.write_text("a\tb\n" + "c\n" * 20, encoding="utf-8")
    with pytest.raises(ListFormatError) as caught:
        parse_list(list_file)
    assert caught.value.total == 20 and caught.value.report is None and "more" not in str(caught.value)


def test_the_external_sort_gives_every_record_in_order(tmp_path: Path) -> None:
    draw = random.Random(7)
    records = [(draw.choice("abcde") * draw.randint(0, 3), draw.randint(0, 50), str(i)) for i in range(2000)]
    order = ExternalSort(str(tmp_path), run_records=37, fan_in=3)
    for record in records:
        order.add(record)
    assert len(order) == 2000 and list(order.sorted()) == sorted(records)
    assert os.listdir(tmp_path) == []  # the runs are gone once read


def test_a_file_spool_reads_back_by_index_and_in_order(tmp_path: Path) -> None:
    entries = [FileEntry(f"dir/{i}\r.jpg", i * 3, f"{i:064x}", f"{i:016x}" if i % 2 else "") for i in range(10_000)]
    spool = FileSpool(str(tmp_path))
    spool.extend(entries[:5000])
    assert spool[4999] == entries[4999] and len(spool) == 5000  # read while it is being written
    spool.extend(entries[5000:])
    assert list(spool) == entries and spool[0] == entries[0] and spool[-1] == entries[-1]
    assert spool[7001] == entries[7001] and spool[10:13] == entries[10:13]
    with pytest.raises(IndexError):
        spool[10_000]
    with pytest.raises(ValueError, match="no TAB or line break"):
        spool.append(FileEntry("a\tb", 1, "0" * 64))
    spool.close()
