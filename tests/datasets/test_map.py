"""``pack --map``: a version's rows through a function, as a new packed dataset; resumable after a kill."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from datamount.cli.main import cli
from datamount.datasets import MapFunctionError, catalog, layout, map_version
from datamount.datasets.pack import pack
from datamount.datasets.transform import plan_map
from datamount.datasets.upload import upload
from datamount.readers import reader
from datamount.storage import Store, open_store
from tests.datasets import map_functions

SMALL = {"shard_bytes": 600, "row_group_bytes": 200}


def text_dataset(store: Store, tmp_path: Path, rows: int = 120) -> None:
    listing = tmp_path / "t.list"
    listing.write_text("".join(f"s{i} {'w ' * (i % 5)}\tt{'x' * (i % 4)}\n" for i in range(rows)))
    upload(listing, "t", store=store)


@pytest.mark.parametrize("packed", [False, True])
def test_mapped_rows_become_a_packed_dataset_row_for_row(local_store: Store, tmp_path: Path, packed: bool) -> None:
    text_dataset(local_store, tmp_path)
    if packed:
        pack("t", store=local_store, row_group_bytes=300)
    mapped = map_version("t", "tests.datasets.map_functions:lengths", "t-lengths", store=local_store, **SMALL)
    assert mapped.kind == "table" and mapped.columns == ["source", "words", "marks"] and mapped.rows == 120
    assert len(mapped.shards) > 2 and mapped.source == "t@1 | tests.datasets.map_functions:lengths"
    got = list(reader("t-lengths", local_store)())
    want = [map_functions.lengths(row) for row in reader("t", local_store)()]
    assert [(source, words) for source, words, _ in got] == [(w["source"], w["words"]) for w in want]
    for (_, _, marks), expected in zip(got, want, strict=True):
        assert isinstance(marks, np.ndarray) and np.array_equal(marks, expected["marks"])
    folder = f"{layout.dataset_folder('t-lengths')}/{layout.pack_folder_of(mapped.shards[0])}"
    assert not [key for key in local_store.list(folder) if key.endswith(".done.json")]  # markers gone once committed


def test_a_killed_map_goes_on_with_the_units_left(
    local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text_dataset(local_store, tmp_path)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv(map_functions.CALLS, str(calls))
    monkeypatch.setenv(map_functions.FAIL_AT, "s70 ")
    function = "tests.datasets.map_functions:flaky"
    with pytest.raises(MapFunctionError, match=r"failed on row 70 of t@1: OSError\('simulated crash at s70 '\)"):
        map_version("t", function, "t-flaky", store=local_store, **SMALL)
    assert catalog.versions(local_store, "t-flaky") == []  # nothing committed
    first_run = calls.read_text().splitlines()
    monkeypatch.delenv(map_functions.FAIL_AT)
    calls.write_text("")
    mapped = map_version("t", function, "t-flaky", store=local_store, **SMALL)
    second_run = calls.read_text().splitlines()
    units = plan_map(catalog.resolve(local_store, "t"), function, SMALL["shard_bytes"], SMALL["row_group_bytes"])
    killed_in = next(unit for unit in units if unit.start <= 70 < unit.stop)
    sources = [row[0] for row in reader("t", local_store)()]
    assert killed_in.number > 0 and first_run == sources[:71]
    assert second_run == sources[killed_in.start :]  # the units written before the kill are not read again
    assert [row[0] for row in reader("t-flaky", local_store)()] == [row[0] for row in reader("t", local_store)()]
    assert mapped.rows == 120


def test_what_the_function_returns_is_checked(local_store: Store, tmp_path: Path) -> None:
    text_dataset(local_store, tmp_path, rows=20)
    with pytest.raises(MapFunctionError, match="returned tuple for row 0 of t@1: return a dict"):
        map_version("t", "tests.datasets.map_functions:not_a_dict", "bad", store=local_store)
    with pytest.raises(MapFunctionError, match=r"the columns \['b'\] for row 7 and \['a'\] before"):
        map_version("t", map_functions.changing_columns, "bad", store=local_store)
    assert catalog.versions(local_store, "bad") == []


def test_the_command_line(local_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text_dataset(local_store, tmp_path, rows=30)
    (tmp_path / "mine.py").write_text("def upper(row):\n    return {'text': row[0].upper()}\n")
    monkeypatch.chdir(tmp_path)  # a module of the folder the command runs in
    runner = CliRunner()
    store = ["--store", str(local_store.local_path())]
    result = runner.invoke(cli, ["pack", "t", *store, "--map", "mine:upper", "--to", "t-upper", "-q"])
    assert result.exit_code == 0, result.output
    assert "t-upper@1: 30 rows of text in 1 shard(s)" in result.output
    assert next(iter(reader("t-upper", local_store)())) == ("S0 ",)
    for arguments, message in [
        (["--map", "mine:upper"], "--map and --to go together"),
        (["--map", "nothing_here:f", "--to", "x"], "cannot import 'nothing_here'"),
        (["--map", "mine:lower", "--to", "x"], "mine has no 'lower'"),
        (["--map", "mine", "--to", "x"], "name a function as module:function"),
    ]:
        result = runner.invoke(cli, ["pack", "t", *store, *arguments])
        assert result.exit_code == 2 and message in result.output, (arguments, result.output)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_cluster")
def test_a_ray_map_writes_what_a_local_map_writes(tmp_path: Path, local_store: Store) -> None:
    ray_store = open_store(tmp_path / "ray-store")
    for store in (local_store, ray_store):
        text_dataset(store, tmp_path)

    def double(row: tuple[str, str]) -> dict[str, str]:  # defined here: Ray sends it by value
        return {"twice": row[0] * 2}

    local = map_version("t", double, "t2", store=local_store, **SMALL)
    distributed = map_version("t", double, "t2", store=ray_store, use_ray=True, **SMALL)
    assert [s.sha256 for s in distributed.shards] == [s.sha256 for s in local.shards]
    assert list(reader("t2", ray_store)()) == list(reader("t2", local_store)())
