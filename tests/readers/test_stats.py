"""Reader statistics: what a pass's consumer waited for against what it spent in its own code, the counters of the
store, the cache and the checks, the ``DATAMOUNT_STATS`` log line and the ``DATAMOUNT_STATS_FILE`` lines.

The times are checked against the truth measured by the consumer itself, around each ``next()`` it makes."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from datamount.datasets.upload import upload
from datamount.readers import StatsConfigError, mix, multiprocess_reader, reader
from datamount.readers.stats import KEYS, LINE_KEYS, MAX_CHUNK, MAX_CHUNK_BYTES, Meter, Where, measured
from datamount.storage import Store, open_store
from tests.generated import MakeImageList, image_rows
from tests.servers.fault_proxy import Action, Fault, FaultProxyFactory
from tests.servers.moto import S3_TEST_KEY, S3_TEST_SECRET, S3Server


def timed_consumer(samples: Iterable[Any], work: Iterator[float]) -> tuple[list[Any], float, float]:
    """Take every sample of ``samples``, sleeping ``next(work)`` seconds after each: the samples, and the seconds
    spent inside ``next()`` (waiting) and outside it (this consumer's own), as measured here."""
    taken, waited, own = [], 0.0, 0.0
    iterator = iter(samples)
    while True:
        asked = time.perf_counter()
        try:
            sample = next(iterator)
        except StopIteration:
            waited += time.perf_counter() - asked
            return taken, waited, own
        got = time.perf_counter()
        waited += got - asked
        taken.append(sample)
        time.sleep(next(work))
        own += time.perf_counter() - got


def compute_share(stats: dict[str, Any]) -> float:
    return stats["compute_s"] / (stats["compute_s"] + stats["waited_s"])


@pytest.fixture
def images(make_image_list: MakeImageList, local_store: Store) -> tuple[Path, str]:
    """40 images of about 2 kB uploaded to a local store (unpacked: one object each)."""
    listing = make_image_list(40, size=2_000)
    upload(listing, "cats", store=local_store)
    return listing, "cats"


@pytest.fixture
def slow_s3(s3_server: S3Server, s3_bucket: str, fault_proxy: FaultProxyFactory, images: tuple[Path, str]) -> Any:
    """The images uploaded to S3 (moto), and a store that reads them through a proxy holding every object GET."""
    listing, name = images
    direct = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=s3_server.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    upload(listing, name, store=direct)
    proxy = fault_proxy(s3_server.endpoint_url, flavour="s3")
    store = open_store(
        f"s3://{s3_bucket}/root", endpoint_url=proxy.endpoint_url, key=S3_TEST_KEY, secret=S3_TEST_SECRET
    )
    return store, proxy


# -- wait against compute --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "work",
    [
        pytest.param(lambda i: 0.004, id="4ms-each"),
        pytest.param(lambda i: 0.03 if i % 8 == 7 else 0.0, id="30ms-every-8th"),
    ],
)
def test_a_consumer_that_sleeps_gets_its_compute_share_within_ten_percent(
    local_store: Store, images: tuple[Path, str], work: Any
) -> None:
    samples = reader("cats", local_store)
    taken, waited, own = timed_consumer(samples(), map(work, range(1_000)))
    assert len(taken) == 40
    stats = samples.stats()
    truth = own / (own + waited)
    assert abs(compute_share(stats) - truth) <= 0.1 * truth, (stats, own, waited)
    assert abs(stats["compute_s"] - own) <= 0.1 * own


@pytest.mark.s3
def test_against_a_slow_store_the_consumers_share_is_measured_and_the_wait_dominates(slow_s3: Any) -> None:
    store, proxy = slow_s3
    proxy.inject(Fault.delay(0.05), methods={"GET"}, containing="/objects/")
    samples = reader("cats", store, max_requests=1)
    before = len(proxy.requests)
    taken, waited, own = timed_consumer(samples(), map(lambda i: 0.002, range(1_000)))
    assert len(taken) == 40
    stats = samples.stats()
    truth = own / (own + waited)
    assert abs(compute_share(stats) - truth) <= 0.1 * truth, (stats, own, waited)
    assert stats["wait_share"] > 0.8, stats
    # Every GET the proxy saw during the pass is one of its requests: the list, the part of the file entries, then the
    # 40 objects.
    gets = [record for record in proxy.requests[before:] if record.method == "GET"]
    assert stats["requests"] == len(gets) == 42
    assert sum(record.action is Action.DELAY for record in gets) == 40


@pytest.mark.s3
def test_retries_and_throttling_pauses_are_counted(slow_s3: Any) -> None:
    store, proxy = slow_s3
    proxy.inject(Fault.status(503), times=1, methods={"GET"}, containing="/objects/")
    proxy.inject(Fault.status(500), skip=10, times=1, methods={"GET"}, containing="/objects/")
    samples = reader("cats", store)
    assert len(list(samples())) == 40
    stats = samples.stats()
    assert stats["retries"] == 2
    assert 0.1 <= stats["throttled_s"] <= 0.2  # one pause, of THROTTLE_PAUSE (0.2 s) times 0.5 to 1
    assert stats["requests"] == 42  # the list, the entries' part, the objects: a retry is not a request of its own


# -- counters --------------------------------------------------------------------------------------------------------


def test_a_local_pass_counts_its_samples_bytes_and_checked_bytes(local_store: Store, images: tuple[Path, str]) -> None:
    listing, name = images
    stored = sum(len(image) for image, _ in image_rows(listing))
    samples = reader(name, local_store)
    assert samples.stats()["passes"] == 0
    list(samples())
    list(samples())
    stats = samples.stats()
    assert set(stats) == {*KEYS, "pass"} and set(stats["pass"]) == set(KEYS)
    assert (stats["passes"], stats["samples"], stats["bytes"]) == (2, 80, 2 * stored)
    assert stats["bytes_verified"] == 2 * stored  # every object against its checksum
    assert (stats["requests"], stats["retries"], stats["throttled_s"], stats["cache_hits"]) == (0, 0, 0.0, 0)
    assert (stats["pass"]["passes"], stats["pass"]["samples"], stats["pass"]["bytes"]) == (1, 40, stored)
    unchecked = reader(name, local_store, verify=False)
    list(unchecked())
    assert unchecked.stats()["bytes_verified"] == 0


@pytest.mark.s3
def test_a_cached_remote_pass_counts_its_cache_hits_and_no_requests(
    s3_store: Store, make_image_list: MakeImageList, tmp_path: Path
) -> None:
    upload(make_image_list(30, size=2_000), "packed", store=s3_store, packed=True)
    samples = reader("packed", s3_store, cache=tmp_path / "cache")
    list(samples())
    first = samples.stats()["pass"]
    shards = len(samples.manifest.shards)
    assert first["cache_hits"] == 0 and first["requests"] >= shards
    assert first["bytes_verified"] >= 2 * sum(shard.size for shard in samples.manifest.shards)  # fetched, then filled
    list(samples())
    second = samples.stats()["pass"]
    assert (second["cache_hits"], second["requests"]) == (shards, 0)


def test_without_measuring_nothing_is_timed_and_the_samples_are_the_same(
    local_store: Store, images: tuple[Path, str]
) -> None:
    unmeasured = reader("cats", local_store, measure=False)
    assert list(unmeasured()) == list(reader("cats", local_store)())
    assert unmeasured.stats()["passes"] == 0 and unmeasured.stats()["samples"] == 0


def test_the_state_counts_only_the_samples_handed_out(local_store: Store, images: tuple[Path, str]) -> None:
    """A measured pass reads a chunk ahead of its consumer: the state still says what the consumer took."""
    samples = reader("cats", local_store)
    every = list(reader("cats", local_store)())
    passing = samples()
    taken = [next(passing) for _ in range(23)]
    assert samples.state_dict()["position"] == 23
    assert samples.stats()["pass"]["samples"] == 23
    passing.close()
    resumed = reader("cats", local_store)
    resumed.load_state_dict(samples.state_dict())
    assert taken + list(resumed()) == every


@pytest.mark.parametrize("sample_bytes", [110_000, 784], ids=["large", "small"])
def test_a_measured_pass_reads_at_most_a_chunks_bytes_ahead_of_its_consumer(sample_bytes: int) -> None:
    """Chunks grow to :data:`MAX_CHUNK` samples, but to no more than :data:`MAX_CHUNK_BYTES` of them: large samples are
    made a few at a time as they are taken (so their memory is reused), not a thousand together."""
    made = 0

    def source() -> Iterator[int]:
        nonlocal made
        for number in range(5_000):
            made += 1
            yield number

    metered = Meter().begin(Where("d@1", 0, 1, None), 0, lambda: (0, 0.0, {}))
    samples = measured(source(), metered, contextlib.nullcontext, bytes_per_sample=sample_bytes)
    most_ahead = 0
    for taken, _ in enumerate(samples, start=1):
        most_ahead = max(most_ahead, made - taken)
    largest = max(1, min(MAX_CHUNK, MAX_CHUNK_BYTES // sample_bytes))
    assert most_ahead < largest <= MAX_CHUNK
    assert most_ahead >= largest // 2  # the chunks did grow, up to the bound
    assert made == 5_000


# -- reports ---------------------------------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        assert list(line) == list(LINE_KEYS), line
        assert line["format"] == 1
    return lines


def assert_lines_add_up(lines: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    for key in ("samples", "bytes", "requests", "retries", "cache_hits", "bytes_verified"):
        assert sum(line[key] for line in lines) == stats[key], key
    for key in ("waited_s", "compute_s", "throttled_s"):
        assert math.isclose(sum(line[key] for line in lines), stats[key], abs_tol=1e-6), key


def test_the_file_lines_parse_and_add_up_to_the_totals(
    local_store: Store, images: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stats.jsonl"
    monkeypatch.setenv("DATAMOUNT_STATS", "0.05")
    monkeypatch.setenv("DATAMOUNT_STATS_FILE", str(path))
    samples = reader("cats", local_store)
    for _ in range(2):
        timed_consumer(samples(), map(lambda i: 0.005, range(1_000)))
    lines = read_lines(path)
    assert_lines_add_up(lines, samples.stats())
    assert [line["pass"] for line in lines if line["final"]] == [0, 1]
    for number in (0, 1):
        of_pass = [line for line in lines if line["pass"] == number]
        assert len(of_pass) >= 3  # about 0.2 s each: lines every 0.05 s, and the last
        assert [line["final"] for line in of_pass] == [False] * (len(of_pass) - 1) + [True]
        assert sum(line["samples"] for line in of_pass) == 40
        # Each line counts the bytes checked in its interval: every sample handed out was checked before, so the
        # bytes verified until a line are at least those of the samples taken until then (bytes: the average's).
        verified = taken = 0
        for line in of_pass:
            verified, taken = verified + line["bytes_verified"], taken + line["bytes"]
            assert verified >= 0.9 * taken > 0 or line["samples"] == 0, of_pass
        # Each line says how long its pass has run: the last one, the pass's whole time, not its own interval's.
        assert of_pass[-1]["pass_s"] == pytest.approx(sum(line["interval_s"] for line in of_pass), abs=1e-5)
        assert of_pass[-1]["pass_s"] > 3 * of_pass[-1]["interval_s"]
        assert [line["local"] for line in of_pass] == [True] * len(of_pass)
    assert {(line["dataset"], line["rank"], line["world_size"], line["worker"]) for line in lines} == {
        ("cats@1", 0, 1, None)
    }
    for line in lines:  # each line's times are those of its interval
        assert line["waited_s"] + line["compute_s"] <= line["interval_s"] + 1e-6


def test_worker_processes_write_their_own_lines(
    local_store: Store, images: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stats.jsonl"
    monkeypatch.setenv("DATAMOUNT_STATS_FILE", str(path))
    samples = reader("cats", local_store)
    assert len(list(multiprocess_reader([samples] * 2, mp_context="fork")())) == 40
    lines = read_lines(path)
    assert sorted(line["worker"] for line in lines if line["final"]) == [0, 1]
    assert sum(line["samples"] for line in lines) == 40


def test_a_mixture_reports_its_passes_with_its_parts_figures(
    local_store: Store, make_image_list: MakeImageList, text_list: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(make_image_list(20, name="a.list"), "a", store=local_store)
    upload(text_list, "b", store=local_store, kind="text")
    path = tmp_path / "stats.jsonl"
    monkeypatch.setenv("DATAMOUNT_STATS_FILE", str(path))
    mixture = mix({"a": 3, "b": 1}, local_store, stop="all_exhausted")
    taken, waited, own = timed_consumer(mixture(), map(lambda i: 0.002, range(1_000)))
    stats = mixture.stats()
    assert stats["samples"] == len(taken) and stats["passes"] == 1
    parts = [part.stats() for part in mixture.parts.values()]
    assert stats["bytes"] == sum(part["bytes"] for part in parts)
    assert stats["bytes_verified"] == parts[0]["bytes_verified"] > 0
    truth = own / (own + waited)
    assert abs(compute_share(stats) - truth) <= 0.1 * truth, (stats, own, waited)
    lines = read_lines(path)  # the mixture's own, not its parts'
    assert {line["dataset"] for line in lines} == {"a@1+b@1"}
    assert_lines_add_up(lines, stats)


def test_the_log_line_appears_with_datamount_stats_1(local_store: Store, images: tuple[Path, str]) -> None:
    script = (
        "from datamount.readers import reader\n"
        f"samples = reader('cats', {local_store.url!r})\n"
        "print(sum(1 for _ in samples()))\n"
    )
    environment = {**os.environ, "DATAMOUNT_STATS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "40"
    said = [line for line in done.stderr.splitlines() if line.startswith("datamount.readers.stats: ")]
    assert len(said) == 1, done.stderr  # the pass ends within the 10 s: its last line only
    assert said[0].startswith("datamount.readers.stats: cats@1 pass 0 (rank 0 of 1) ended after "), said
    assert re.search(r" ended after \d+\.\d s, its last \d+\.\d s: 40 samples ", said[0]), said
    assert said[0].endswith("; local files, 0.1 MB verified"), said  # not '0 requests': a local store makes none
    quiet = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DATAMOUNT_STATS": "0"},
    )
    assert quiet.returncode == 0 and "datamount.readers.stats" not in quiet.stderr


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("DATAMOUNT_STATS", "often", "$DATAMOUNT_STATS='often'"),
        ("DATAMOUNT_STATS", "-5", "$DATAMOUNT_STATS='-5'"),
        ("DATAMOUNT_STATS_FILE", "{tmp}/no/such/folder/stats.jsonl", "{tmp}/no/such/folder/stats.jsonl"),
    ],
    ids=["word", "negative", "missing-folder"],
)
def test_settings_that_cannot_be_used_are_named_before_the_pass_begins(
    local_store: Store,
    images: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    named: str,
) -> None:
    monkeypatch.setenv(variable, value.format(tmp=tmp_path))
    samples = reader("cats", local_store)
    with pytest.raises(StatsConfigError, match=variable) as caught:
        samples()
    assert named.format(tmp=tmp_path) in str(caught.value)
    assert samples.epoch == 0  # no pass began
