"""What a lock file may say: a file of the locks folder that says anything else holds nothing, is named, and never
stops a writer or a removal, on every backend and through the command."""

from __future__ import annotations

import json
import math
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datamount.cli.main import cli
from datamount.datasets import catalog, locks, upload
from datamount.storage import Store, open_store
from tests.generated import write_image_list
from tests.stores import STORE_BACKENDS

HOST = socket.gethostname()
#: A lock file that is read (another host's, refreshed a second ago), and the fields written into it by each case.
GOOD = {"format": 1, "host": "elsewhere.example", "pid": 4242, "purpose": "upload", "stale_after": 600.0}


def lock_body(**fields: Any) -> bytes:
    now = time.time()
    return json.dumps({**GOOD, "created": now - 1, "refreshed": now - 1, **fields}).encode()


def deep(depth: int) -> bytes:
    """A lock file whose ``purpose`` is ``depth`` nested lists, and whose other fields are good."""
    return lock_body(purpose="@").replace(b'"@"', b"[" * depth + b"]" * depth)


#: Lock files of this host whose content has crashed every rm and upload of their dataset (OverflowError,
#: RecursionError), and ones that made a lock that never went stale (a pid of 0 or -1 "runs": os.kill(0, 0)
#: signals this process's group; a NaN time is never old).
HOSTILE = {
    "pid-10**30": lock_body(host=HOST, pid=10**30),
    "pid-1.5e300": lock_body(host=HOST, pid=1.5e300),
    "pid-Infinity": lock_body(host=HOST, pid=math.inf),
    "nested-100000": deep(100_000),
    "nested-2000": deep(2_000),
    "pid-0": lock_body(host=HOST, pid=0, stale_after=1e300),
    "pid--1": lock_body(host=HOST, pid=-1, stale_after=1e300),
    "refreshed-NaN": lock_body(refreshed=math.nan),
    "refreshed-in-3000": lock_body(refreshed=32_503_680_000.0),
    "stale-after-Infinity": lock_body(stale_after=math.inf),
    "pid-beyond-pid_max": lock_body(host=HOST, pid=locks.pid_max()),
    "host-control-characters": lock_body(host="node7\x1b[2J"),
    "longer-than-4-KiB": lock_body(purpose="x" * locks.LOCK_BYTES),
    "not-utf-8": b'{"host": "\xff"}',
    "not-an-object": b"[1, 2]",
}


def cli_store(store: Store) -> list[str]:
    """The command-line options that open ``store`` (moto's endpoint for S3; its credentials are in the env)."""
    endpoint = ["-o", f"endpoint_url={store.settings.address}"] if store.url.startswith("s3://") else []
    return ["--store", store.url, *endpoint]


@pytest.fixture
def dataset(store: Store, tmp_path: Path) -> Store:
    upload(write_image_list(tmp_path / "src", 3), "d", store=store)
    return store


@pytest.mark.parametrize("store", [b for b in STORE_BACKENDS if b.id in ("local", "s3-moto")], indirect=True)
@pytest.mark.parametrize("content", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_lock_file_of_hostile_content_stops_no_removal_nor_upload(
    dataset: Store, tmp_path: Path, content: bytes
) -> None:
    path = f"{locks.locks_folder('d')}/shared-{uuid.uuid4().hex}.json"
    dataset.write(path, content)
    removed = CliRunner().invoke(cli, ["rm", "d@1", "--yes", "--wait", "0", *cli_store(dataset)])
    assert removed.exit_code == 0, removed.output
    assert f"datamount: {dataset.url_for(path)} is not a lock file datamount can read (" in removed.output
    assert "Traceback" not in removed.output
    uploaded = CliRunner().invoke(
        cli, ["upload", "-q", str(write_image_list(tmp_path / "again", 2)), "d", *cli_store(dataset)]
    )
    assert uploaded.exit_code == 0, uploaded.output
    assert catalog.resolve(dataset, "d").rows == 2
    assert dataset.read(path) == content  # left for a person to delete


def test_an_unreadable_lock_file_is_named_once_per_process(
    memory_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    path = f"{locks.locks_folder('d')}/exclusive-{uuid.uuid4().hex}.json"
    memory_store.write(path, HOSTILE["pid-0"])
    with caplog.at_level("WARNING", logger=locks.__name__):
        assert locks.read_locks(memory_store, "d") == []
        assert locks.read_locks(memory_store, "d") == []
    said = [record.getMessage() for record in caplog.records if "is not a lock file" in record.getMessage()]
    assert said == [
        f"{memory_store.url_for(path)} is not a lock file datamount can read (Expected `int` >= 1 - at `$.pid`): "
        "it holds nothing; delete it if no one uses it"
    ]


def test_a_lock_of_another_host_is_read_whatever_its_pid_on_this_host(memory_store: Store) -> None:
    """The pid_max of this host bounds only its own processes: another host may give larger pids."""
    path = f"{locks.locks_folder('d')}/shared-other.json"
    memory_store.write(path, lock_body(pid=locks.LARGEST_PID))
    assert [lock.pid for lock in locks.read_locks(memory_store, "d")] == [locks.LARGEST_PID]


# ------------------------------------------------------------------------------------- any content of any field

#: Clock offsets and stale_after values far enough apart that the test's clock and the read's never disagree.
STALE_AFTERS = [0.05, 600.0, locks.LONGEST_STALE_AFTER]
OFFSETS = [-1e9, -3600.0, -1.0, 0.0, 1.0, 700.0, 90_000.0, 1e12]
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=300),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def lock_fields(draw: st.DrawFn) -> dict[str, Any]:
    now = time.time()
    stale_after = draw(st.sampled_from(STALE_AFTERS) | ANYTHING)
    fields = {
        "host": draw(st.sampled_from([HOST, "elsewhere.example", "", "n" * 256]) | ANYTHING),
        "pid": draw(st.sampled_from([1, 4242, locks.pid_max() - 1, locks.pid_max(), locks.LARGEST_PID]) | ANYTHING),
        "purpose": draw(st.sampled_from(["upload", "remove"]) | ANYTHING),
        "created": draw(st.sampled_from(OFFSETS).map(lambda offset: now + offset) | ANYTHING),
        "refreshed": draw(st.sampled_from(OFFSETS).map(lambda offset: now + offset) | ANYTHING),
        "stale_after": stale_after,
    }
    return {name: value for name, value in fields.items() if draw(st.integers(0, 20))}


def readable(fields: dict[str, Any], now: float) -> bool:
    """The rule of datasets/locks.py, written out on its own."""

    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    def text(value: object) -> bool:
        return isinstance(value, str) and len(value) <= 255 and value.isprintable()

    if set(fields) != {"host", "pid", "purpose", "created", "refreshed", "stale_after"}:
        return False
    host, pid, stale_after = fields["host"], fields["pid"], fields["stale_after"]
    if not (text(host) and text(fields["purpose"]) and number(stale_after) and 0 < stale_after <= 86_400):
        return False
    if not isinstance(pid, int) or isinstance(pid, bool) or not 1 <= pid < (locks.pid_max() if host == HOST else 2**31):
        return False
    return all(number(fields[name]) and 0 <= fields[name] <= now + stale_after for name in ("created", "refreshed"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lock_fields())
def test_a_lock_file_is_read_only_when_every_field_is_in_range_and_then_goes_stale(fields: dict[str, Any]) -> None:
    store = open_store(f"memory://datamount-lock-fields-{uuid.uuid4().hex}")
    try:
        now = time.time()
        store.write(f"{locks.locks_folder('d')}/shared-1.json", json.dumps(fields).encode())
        read = locks.read_locks(store, "d")
        assert len(read) == readable(fields, now)
        for lock in read:
            assert (lock.host, lock.pid, lock.purpose) == (fields["host"], fields["pid"], fields["purpose"])
            assert (lock.created, lock.refreshed, lock.stale_after) == tuple(
                float(fields[name]) for name in ("created", "refreshed", "stale_after")
            )
            lock.describe()
            lock.is_stale(now)
            assert lock.is_stale(now + 2 * locks.LONGEST_STALE_AFTER + 1)  # every lock read lets go in the end
    finally:
        store.remove("", recursive=True, missing_ok=True)


def test_a_holder_refreshing_too_rarely_for_its_lock_to_be_read_is_refused(memory_store: Store) -> None:
    with pytest.raises(ValueError, match="refresh_every must be at most 8640 s"):
        locks.Lock(memory_store, "d", locks.SHARED, "upload", locks.LONGEST_STALE_AFTER)
    with pytest.raises(ValueError, match="refresh_every must be a positive number, got nan"):
        locks.Lock(memory_store, "d", locks.SHARED, "upload", math.nan)
