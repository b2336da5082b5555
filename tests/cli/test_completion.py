"""``datamount completion SHELL`` and what the shells then complete: commands, dataset names of the store the
command line names, their versions after ``@``, public datasets and profile names; as a shell asks, in a real
process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from datamount.datasets import upload
from datamount.storage import open_store
from tests.generated import write_image_list


def complete(words: str, tmp_path: Path) -> list[str]:
    """What bash would be offered for the last of ``words`` (``datamount`` first)."""
    config = tmp_path / "config.toml"
    if not config.exists():
        config.write_text('[stores.team-s3]\nurl = "s3://team/data"\n[stores.laptop]\nurl = "/tmp/x"\n', "utf-8")
    environment = {
        **os.environ,
        "_DATAMOUNT_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        "DATAMOUNT_CONFIG": str(config),
    }
    command = [sys.executable, "-m", "datamount.cli.main"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=60, check=True)
    return [line.partition(",")[2] for line in done.stdout.splitlines() if line]


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    store = open_store(tmp_path / "store")
    list_file = write_image_list(tmp_path / "src", 2)
    for name in ("cats", "cars", "dogs"):
        upload(list_file, name, store=store)
    upload(write_image_list(tmp_path / "src2", 3), "cats", store=store)
    return str(tmp_path / "store")


def test_dataset_names_and_versions_of_the_named_store(store_dir: str, tmp_path: Path) -> None:
    assert complete(f"datamount info --store {store_dir} ca", tmp_path) == ["cars", "cats"]
    assert complete(f"datamount head --store {store_dir} cats@", tmp_path) == ["cats@1", "cats@2"]
    assert complete(f"datamount rm --store {store_dir} ", tmp_path) == ["cars", "cats", "dogs"]
    assert complete("datamount info --store /nonexistent/store ca", tmp_path) == []  # no error printed


def test_commands_public_datasets_and_profiles(tmp_path: Path) -> None:
    assert complete("datamount i", tmp_path) == ["import", "info"]
    assert complete("datamount public install m", tmp_path) == ["mnist"]
    assert complete("datamount ls --store team", tmp_path)[0] == "team-s3"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_the_bash_script_loads(tmp_path: Path) -> None:
    script = subprocess.run(
        [sys.executable, "-m", "datamount.cli.main", "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    assert "_DATAMOUNT_COMPLETE=bash_complete" in script
    loaded = subprocess.run(["bash", "-c", f"{script}\ncomplete -p datamount"], capture_output=True, text=True)
    assert loaded.returncode == 0 and "_datamount_completion" in loaded.stdout, loaded.stderr
