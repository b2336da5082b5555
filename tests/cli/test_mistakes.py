"""The common mistakes at every command, made in a real process: each is one ``datamount: error:`` line on stderr,
nothing on stdout, and the documented exit status (2 bad input or configuration, 3 not found)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from datamount.datasets import upload
from datamount.storage import open_store
from tests.generated import write_image_list

MISTAKES = [
    ("no-such-command", ["bogus"], 2, "no such command 'bogus' (see 'datamount --help')"),
    ("misspelt-command", ["lss"], 2, "no such command 'lss'. Did you mean 'ls'? (see 'datamount --help')"),
    ("unknown-option", ["ls", "--bogus", "--store", "{store}"], 2, "no such option '--bogus' (see 'datamount ls"),
    ("missing-argument", ["upload"], 2, "missing argument 'LIST_FILE'"),
    ("missing-list", ["upload", "{tmp}/nope.list", "x", "--store", "{store}"], 2, "nope.list: no such file"),
    ("bad-name", ["upload", "{list}", "bad/../name", "--store", "{store}"], 2, "invalid dataset name 'bad/../name'"),
    ("no-dataset", ["info", "nosuch", "--store", "{store}"], 3, "no dataset named 'nosuch'"),
    ("misspelt-dataset", ["head", "cots", "--store", "{store}"], 3, "(nor in the public area); did you mean 'cats'?"),
    ("misspelt-rm", ["rm", "cast", "--yes", "--store", "{store}"], 3, "store; did you mean 'cats'?"),
    ("no-version", ["info", "cats@7", "--store", "{store}"], 3, "dataset cats has no version 7"),
    ("bad-count", ["head", "cats", "-n", "-1", "--store", "{store}"], 2, "invalid value for '-n'"),
    ("bad-size", ["pack", "cats", "--shard-size", "12Q", "--store", "{store}"], 2, "'12Q' is not a size"),
    ("rm-unconfirmed", ["rm", "cats", "--store", "{store}"], 2, "without confirmation; pass --yes"),
    ("from-without-repair", ["verify", "cats", "--from", "{list}", "--store", "{store}"], 2, "go with --repair"),
    ("option-without-value", ["ls", "--store", "{store}", "-o", "novalue"], 2, "expected KEY=VALUE, got 'novalue'"),
    ("unknown-store-option", ["ls", "--store", "s3://b", "-o", "endpoint=http://x"], 2, "did you mean endpoint_url?"),
    ("malformed-endpoint", ["ls", "--store", "s3://b", "-o", "endpoint_url=127.0.0.1:5055"], 2, "must be a URL"),
    ("s3fs-option", ["ls", "--store", "s3://b", "-o", "client=s3fs", "-o", "endpoint=x"], 2, "and s3fs's own"),
    ("hdfs-option", ["ls", "--store", "hdfs://127.0.0.1:1/x", "-o", "foo=1"], 2, "unknown HDFS store option foo"),
    ("memory-option", ["ls", "--store", "memory://m", "-o", "foo=1"], 2, "a memory store takes no options"),
    ("option-superscript", ["ls", "--store", "memory://m", "-o", "foo=²"], 2, "a memory store takes no options"),
    ("option-two-signs", ["ls", "--store", "memory://m", "-o", "foo=--5"], 2, "a memory store takes no options"),
    ("version-superscript", ["info", "cats@²", "--store", "{store}"], 2, "invalid version '²' in 'cats@²'"),
    ("version-other-digits", ["rm", "cats@١", "--yes", "--store", "{store}"], 2, "invalid version '١' in 'cats@١'"),
    ("no-profile", ["ls", "--store", "nosuchprofile"], 2, "is neither a profile nor an existing folder"),
    ("no-public", ["public", "install", "nosuch", "--store", "{store}"], 3, "no public dataset named 'nosuch'"),
]


#: Mistakes that only the backend of an optional extra can name: (the package it needs, the extra).
NEEDS_AN_EXTRA = {"hdfs-option": ("hdfs_native", "datamount[hdfs]")}
#: Mistakes that click suggests a name for only from 8.2 on (its ``NoSuchCommand``).
NEEDS_CLICK_SUGGESTIONS = {"misspelt-command"}


def mistake_params() -> list[Any]:  # pytest.param's type is not public
    """The mistakes as parameters, each skipped (with the reason) where the extra that names it is missing."""
    params = []
    for name, arguments, code, says in MISTAKES:
        marks = []
        if name in NEEDS_AN_EXTRA:
            module, extra = NEEDS_AN_EXTRA[name]
            missing = importlib.util.find_spec(module) is None
            marks.append(pytest.mark.skipif(missing, reason=f"{module} is not installed (pip install '{extra}')"))
        if name in NEEDS_CLICK_SUGGESTIONS:
            old_click = not hasattr(click.exceptions, "NoSuchCommand")
            marks.append(pytest.mark.skipif(old_click, reason="click before 8.2 suggests no command names"))
        params.append(pytest.param(arguments, code, says, id=name, marks=marks))
    return params


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("mistakes")
    list_file = write_image_list(tmp / "src", 2)
    upload(list_file, "cats", store=open_store(tmp / "store"))
    (tmp / "config.toml").write_text("# no profiles\n", encoding="utf-8")
    return {"tmp": str(tmp), "store": str(tmp / "store"), "list": str(list_file)}


@pytest.mark.parametrize(("arguments", "code", "says"), mistake_params())
def test_a_mistake_is_one_line_and_its_exit_status(
    places: dict[str, str], arguments: list[str], code: int, says: str
) -> None:
    command = [sys.executable, "-m", "datamount.cli.main", *(argument.format(**places) for argument in arguments)]
    environment = {**os.environ, "DATAMOUNT_CONFIG": str(Path(places["tmp"]) / "config.toml")}
    environment.pop("DATAMOUNT_STORE", None)
    done = subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=environment, timeout=60, check=False
    )
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("datamount: error: "), done.stderr
    assert says in lines[0]


@pytest.mark.parametrize(
    ("modules", "url", "extra"),
    [
        (["obstore", "s3fs", "boto3"], "s3://b", "s3"),
        (["gcsfs"], "gs://b", "gcs"),
        (["hdfs_native", "hdfs_native.fsspec"], "hdfs://127.0.0.1:1/x", "hdfs"),
        (["aiohttp"], "http://127.0.0.1:1/x", "http"),
        (["aiohttp"], "https://127.0.0.1:1/x", "http"),
    ],
    ids=["s3", "gcs", "hdfs", "http", "https"],
)
def test_a_missing_extra_is_one_line_naming_it(modules: list[str], url: str, extra: str) -> None:
    """Without hdfs-native, fsspec's fallback to libhdfs printed a hundred dlopen lines; the base install has no
    S3 or GCS client at all, nor aiohttp for fsspec's HTTP client (whose own message named no extra)."""
    hide = "import sys; " + "".join(f"sys.modules[{module!r}] = None; " for module in modules)
    run = "from datamount.cli.main import main; main()"
    command = [sys.executable, "-c", hide + run, "ls", "--store", url]
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"datamount: error: {url.partition(':')[0]}:// stores need {modules[0]}")
    assert lines[0].endswith(f"not installed: pip install 'datamount[{extra}]'")


@pytest.mark.parametrize("group", [[], ["public"], ["master"]], ids=["datamount", "public", "master"])
def test_a_group_named_alone_prints_its_help(group: list[str]) -> None:
    command = [sys.executable, "-m", "datamount.cli.main", *group]
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"Usage: {' '.join(['datamount', *group])} [OPTIONS] COMMAND [ARGS]...")
