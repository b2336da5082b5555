"""``datamount cat`` and ``datamount pretty-print``: in-process, and between real processes joined by OS pipes."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from datamount.cli.main import cli
from datamount.datasets.upload import upload
from datamount.readers.stream import read_from, write_to
from datamount.storage import Store
from tests.generated import MakeImageList

#: The command as its console script runs it.
DATAMOUNT = [sys.executable, "-c", "from datamount.cli.main import main; main()"]


def run(*args: str, stdin: bytes | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    assert "Traceback" not in result.output
    return result


def pipeline(*commands: list[str], timeout: float = 60) -> list[tuple[int, bytes, bytes]]:
    """Run ``commands`` joined by OS pipes, as a shell would; each one's exit status, stdout (last only), stderr."""
    processes: list[subprocess.Popen[bytes]] = []
    for index, command in enumerate(commands):
        upstream = processes[-1].stdout if processes else subprocess.DEVNULL
        processes.append(subprocess.Popen(command, stdin=upstream, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        if index:
            upstream.close()  # type: ignore[union-attr]  # so the upstream process sees its reader leave
    last_out, last_err = processes[-1].communicate(timeout=timeout)
    results = []
    for process in processes[:-1]:
        assert process.stderr is not None
        results.append((process.wait(timeout=timeout), b"", process.stderr.read()))
        process.stderr.close()
    return [*results, (processes[-1].returncode, last_out, last_err)]


@pytest.fixture
def images(local_store: Store, make_image_list: MakeImageList) -> Path:
    list_file = make_image_list(12)
    upload(list_file, "cats", store=local_store)
    return list_file


def test_cat_writes_the_dataset_as_a_stream(local_store: Store, images: Path) -> None:
    result = run("cat", "cats", "--store", local_store.url)
    assert result.exit_code == 0, result.output
    stream = read_from(io.BytesIO(result.stdout_bytes))
    entries = list(stream)
    assert stream.columns == ("file", "label")
    sources = [line.split("\t") for line in images.read_text().splitlines()]
    assert [(e["file"], e["label"]) for e in entries] == [
        ((images.parent / path).read_bytes(), label) for path, label in sources
    ]


def test_cat_of_a_text_dataset(local_store: Store, text_list: Path) -> None:
    upload(text_list, "pairs", store=local_store)
    result = run("cat", "pairs", "--store", local_store.url)
    entries = list(read_from(io.BytesIO(result.stdout_bytes)))
    assert entries[:2] == [{"source": "bonjour", "target": "hello"}, {"source": "le chat", "target": "the cat"}]


def test_cat_of_an_unknown_dataset_is_one_line(local_store: Store) -> None:
    result = run("cat", "nosuch", "--store", local_store.url)
    assert result.exit_code == 3 and result.output.startswith("datamount: error: ") and "nosuch" in result.output


def test_pretty_print_summarises_bytes_and_arrays() -> None:
    buffer = io.BytesIO()
    with write_to(buffer) as stream:
        stream.set_columns("image", "label", "scale", "raw")
        stream.write(
            np.arange(784, dtype=np.float32).reshape(28, 28), "7", np.array(0.5), b"\xff\xd8\xff" + bytes(1231)
        )
        stream.write(np.ones((28, 28), np.float32), "1", np.array(2.0), b"abc")
    result = run("pretty-print", "-n", "5", stdin=buffer.getvalue())
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "0: image=float32[28, 28] [0.0, 1.0, 2.0, 3.0, ...], label='7', scale=float64[] 0.5, raw=<JPEG 1,234 bytes>",
        "1: image=float32[28, 28] [1.0, 1.0, 1.0, 1.0, ...], label='1', scale=float64[] 2.0, raw=<bytes 3 bytes>",
    ]
    assert len(run("pretty-print", "-n", "1", stdin=buffer.getvalue()).output.splitlines()) == 1


def test_pretty_print_of_garbage_is_one_line() -> None:
    result = run("pretty-print", stdin=b"file\tlabel\n")
    assert result.exit_code == 2
    assert result.output == (
        "datamount: error: stdin: not an Arrow IPC stream: it starts with b'file\\tlab' "
        "(a stream written by datamount or any Arrow library starts with b'\\xff\\xff\\xff\\xff')\n"
    )


def test_cat_into_pretty_print_through_real_pipes(local_store: Store, images: Path) -> None:
    (cat, _, cat_err), (status, out, err) = pipeline(
        [*DATAMOUNT, "cat", "cats", "--store", local_store.url], [*DATAMOUNT, "pretty-print", "-n", "2"]
    )
    assert (cat, cat_err, status, err) in {(0, b"", 0, b""), (141, b"", 0, b"")}
    assert out.decode().splitlines() == ["0: file=<JPEG 303 bytes>, label='0'", "1: file=<JPEG 304 bytes>, label='1'"]


def test_cat_into_a_python_program(local_store: Store, images: Path) -> None:
    program = "from datamount.readers.stream import read_from\nprint(sum(len(e['file']) for e in read_from('-')))"
    (cat, _, cat_err), (status, out, err) = pipeline(
        [*DATAMOUNT, "cat", "cats", "--store", local_store.url], [sys.executable, "-c", program]
    )
    assert (cat, cat_err, status, err) == (0, b"", 0, b"")
    assert int(out) == sum(303 + i for i in range(12))


@pytest.mark.parametrize(
    "consumer",
    [["head", "-c", "100"], [sys.executable, "-c", "import sys; sys.stdin.buffer.read(100)"]],
    ids=["head", "python"],
)
def test_cat_ends_quietly_when_its_reader_leaves(
    local_store: Store, make_image_list: MakeImageList, consumer: list[str]
) -> None:
    upload(make_image_list(40, size=50_000), "big", store=local_store)  # 2 MB: more than a pipe holds
    (cat, _, cat_err), (status, _, _) = pipeline([*DATAMOUNT, "cat", "big", "--store", local_store.url], consumer)
    assert (cat, cat_err, status) == (141, b"", 0)


def test_pretty_print_ends_quietly_when_its_reader_leaves(local_store: Store, tmp_path: Path) -> None:
    pairs = tmp_path / "many.list"
    pairs.write_text("".join(f"source {i}\ttarget {i}\n" for i in range(5000)), encoding="utf-8")
    upload(pairs, "many", store=local_store)  # printed, more than a pipe holds
    results = pipeline(
        [*DATAMOUNT, "cat", "many", "--store", local_store.url],
        [*DATAMOUNT, "pretty-print"],
        [sys.executable, "-c", "import sys; print(sys.stdin.readline().strip())"],
    )
    assert [err for _, _, err in results] == [b"", b"", b""]
    assert results[1][0] == 141 and results[2][:2] == (0, b"0: source='source 0', target='target 0'\n")


def run_on_terminal(args: list[str], *, terminal_is: str) -> tuple[int, str]:
    """Run ``datamount args`` with its stdout (or stdin) on a pseudo-terminal; its exit status and stderr."""
    controller, terminal = pty.openpty()
    stdin, stdout = (None, terminal) if terminal_is == "stdout" else (terminal, None)
    try:
        result = subprocess.run(
            [*DATAMOUNT, *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=60, check=False
        )
    finally:
        os.close(terminal)
        os.close(controller)
    return result.returncode, result.stderr.decode()


def test_cat_refuses_to_write_binary_to_a_terminal(local_store: Store, images: Path) -> None:
    status, err = run_on_terminal(["cat", "cats", "--store", local_store.url], terminal_is="stdout")
    assert status == 2 and "refusing to write a binary stream to a terminal; pipe it" in err


def test_terminals_are_refused_before_the_store_is_opened() -> None:
    unreachable = ["--store", "s3://bucket", "-o", "endpoint_url=http://127.0.0.1:9"]
    status, err = run_on_terminal(["cat", "cats", *unreachable], terminal_is="stdout")
    assert status == 2 and "refusing to write a binary stream to a terminal; pipe it" in err
    status, err = run_on_terminal(["import", "cats", *unreachable], terminal_is="stdin")
    assert status == 2 and "import reads a stream on stdin; pipe one in" in err


def test_pretty_print_needs_a_stream_on_stdin() -> None:
    status, err = run_on_terminal(["pretty-print"], terminal_is="stdin")
    assert status == 2 and "pretty-print reads a stream on stdin; pipe one in" in err
