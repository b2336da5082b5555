"""A command imports what it needs: ``datamount info`` reads a manifest, so it does not pay for the imports of the
commands that upload, pack, read, mount or serve (1.2 s of a 1.3 s ``info`` before they were left out)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from datamount.cli.main import COMMANDS, cli
from datamount.datasets import upload
from datamount.storage import open_store

#: What ``info`` never needs: the reader, the writers, the mount and the formats' libraries.
NOT_FOR_INFO = (
    "datamount.readers",
    "datamount.datasets.upload",
    "datamount.datasets.pack",
    "datamount.datasets.public",
    "datamount.cli.mount",
    "datamount.cli.ui",
    "pyarrow.parquet",
    "pyarrow.compute",
    "pandas",
)


def test_info_imports_none_of_what_other_commands_need(tmp_path: Path) -> None:
    listing = tmp_path / "pairs.list"
    listing.write_text("a\tb\nc\td\n", encoding="utf-8")
    upload(listing, "pairs", store=open_store(tmp_path / "store"), kind="text")
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print(sorted(set({NOT_FOR_INFO!r}) & set(sys.modules)), file=sys.stderr))\n"
        "from datamount.cli.main import main\n"
        f"main(['info', 'pairs', '--store', {str(tmp_path / 'store')!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "rows: 2\n" in done.stdout and "dataset: pairs@1" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_is_found_by_its_name(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command) and command.name == name


def test_help_lists_every_command_and_an_unknown_one_is_named() -> None:
    from click.testing import CliRunner

    shown = CliRunner().invoke(cli, ["--help"])
    assert shown.exit_code == 0
    assert all(f"  {name} " in shown.output for name in COMMANDS)
    wrong = CliRunner().invoke(cli, ["infos"])
    assert wrong.exit_code == 2 and "no such command 'infos'" in wrong.output
