"""``--json`` on every command that reports: one JSON document of the documented shape (``docs/cli.md``), with the
same exit status as the text; and tables that stay one line per row when stdout is not a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from datamount.cli.formatting import JSON_FORMAT
from datamount.cli.main import cli
from datamount.datasets import catalog, layout, upload
from datamount.storage import open_store
from tests.generated import MakeImageList


def run_json(*args: str, code: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == code, result.output
    document = json.loads(result.output)
    assert document["format"] == JSON_FORMAT
    return document


@pytest.fixture
def store_dir(tmp_path: Path, make_image_list: MakeImageList) -> str:
    folder = str(tmp_path / "store")
    store = open_store(folder)
    upload(make_image_list(4), "cats", store=store)
    upload(make_image_list(6), "cats", store=store)
    return folder


def test_ls_and_info(store_dir: str) -> None:
    listing = run_json("ls", "--store", store_dir)
    assert listing["datamount"] == "ls" and listing["store"] == open_store(store_dir).url
    (cats,) = listing["datasets"]
    assert cats["name"] == "cats" and cats["versions"] == [1, 2]
    latest = {key: cats["latest"][key] for key in ("version", "kind", "rows")}
    assert latest == {"version": 2, "kind": "image", "rows": 6}
    assert cats["latest"]["bytes"] > 0 and cats["latest"]["created"]

    info = run_json("info", "cats@1", "--store", store_dir)
    assert info["datamount"] == "info"
    assert (info["dataset"], info["version"], info["rows"], info["files"]) == ("cats", 1, 4, 4)
    assert info["columns"] == ["file", "label"] and info["versions"] == [1, 2] and info["shards"] == 0


def test_an_empty_store_lists_no_datasets(tmp_path: Path) -> None:
    assert run_json("ls", "--store", str(tmp_path / "empty"))["datasets"] == []


def test_verify_reports_damage_with_exit_status_1(store_dir: str) -> None:
    store = open_store(store_dir)
    ok = run_json("verify", "cats", "--store", store_dir)
    assert (ok["dataset"], ok["version"], ok["ok"], ok["problems"]) == ("cats", 2, True, [])
    assert ok["checked"] == 9  # six objects, the list and the parts of the entries and of the row index
    entry = catalog.resolve(store, "cats").files[0]
    store.write(layout.object_path("cats", entry.sha256), b"not the bytes uploaded")
    found = run_json("verify", "cats", "--store", store_dir, code=1)
    assert found["ok"] is False and len(found["problems"]) == 1 and "wrong size" in found["problems"][0]


def test_public_ls(tmp_path: Path) -> None:
    listing = run_json("public", "ls", "--store", str(tmp_path / "store"))
    assert listing["datamount"] == "public ls"
    mnist = next(entry for entry in listing["datasets"] if entry["name"] == "mnist")
    assert mnist["installed"] is None and mnist["downloadable"] is True and mnist["splits"] == ["train", "test"]
    assert mnist["download_bytes"] > 0


def test_stores_never_show_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        'default = "team"\n[stores.team]\nurl = "s3://bucket/root"\nkey = "AKIAJSON"\nsecret = "very-secret-value"\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("DATAMOUNT_CONFIG", str(config))
    monkeypatch.delenv("DATAMOUNT_STORE", raising=False)
    document = run_json("stores")
    assert "very-secret-value" not in json.dumps(document)
    assert document["default"]["name"] == "team" and document["default"]["url"] == "s3://bucket/root"
    (team,) = document["stores"]
    assert team["default"] is True and set(team["options"]) == {"key", "secret"}


def test_doctor_on_a_local_folder(tmp_path: Path) -> None:
    report = run_json("doctor", str(tmp_path / "probe"), "--quick")
    assert report["datamount"] == "doctor" and report["ok"] is True
    assert report["steps"] and all(step["ok"] for step in report["steps"])
    assert {"name", "value", "unit"} <= set(report["measurements"][0])


def test_a_piped_listing_keeps_each_row_on_one_line(tmp_path: Path, make_image_list: MakeImageList) -> None:
    """Through a pipe (a real process): no wrapping at 80 columns, no trailing spaces."""
    store = str(tmp_path / "store")
    long_name = "a-dataset-whose-name-is-long-enough-to-wrap-a-table-at-eighty-columns"
    upload(make_image_list(2), long_name, store=open_store(store))
    environment = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "datamount.cli.main", "ls", "--store", store],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout  # the header and one row
    assert long_name in lines[1] and "@1 " in lines[1] and len(lines[1]) > 80
    assert all(line == line.rstrip() for line in lines)
