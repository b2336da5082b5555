"""An unpacked version read from a plain HTTP server: ``reader()`` on an ``http://`` store (fsspec's aiohttp
client) against the same objects fetched by obstore's Rust HTTP client and by fsspec's ``cat`` alone.

    python benchmarks/bench_http.py [--quick] [--runs N] [--count N]

The server is nginx (``apt-get install nginx-light``), one worker, serving a local store's folder with its directory
listings on (as ``http://`` stores list folders); it must be on the PATH. The version holds 2,000 files of ~110 KB
(300 with ``--quick``). Each pass runs in a fresh process (imports untimed); reported: objects/s, MB/s and CPU
seconds per 1,000 objects in the client and in nginx, medians of interleaved runs. ``reader()`` checks every object
against its size and xxh3-64; the two raw clients check nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import free_port, processes_cpu_seconds, server_process
from bench_shards import make_dataset

NAME = "http-bench"
#: Requests in flight for the raw clients: as many as ``reader()`` keeps on an ``http://`` store.
IN_FLIGHT = 32

NGINX_CONF = """
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
daemon off;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        autoindex on;
    }}
}}
"""


# --- one pass, in a child process --------------------------------------------------------------------------------


def reader_pass(url: str, paths: list[str]) -> Iterator[int]:
    from datamount.readers import reader

    for data, _ in reader(NAME, url)():
        yield len(data)


def obstore_pass(url: str, paths: list[str]) -> Iterator[int]:
    import obstore
    from obstore.store import HTTPStore

    store = HTTPStore.from_url(url, client_options={"allow_http": True})

    async def fetch_all() -> list[int]:
        pending = iter(paths)
        sizes: list[int] = []

        async def worker() -> None:
            for path in pending:
                answer = await obstore.get_async(store, path)
                sizes.append(len(await answer.bytes_async()))

        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        return sizes

    yield from asyncio.run(fetch_all())


def fsspec_pass(url: str, paths: list[str]) -> Iterator[int]:
    import fsspec

    found = fsspec.filesystem("http").cat([f"{url}/{path}" for path in paths], batch_size=IN_FLIGHT)
    yield from (len(data) for data in found.values())


PASSES: dict[str, Callable[[str, list[str]], Iterator[int]]] = {
    "reader()": reader_pass,
    "obstore HTTPStore": obstore_pass,
    "fsspec http cat": fsspec_pass,
}
IMPORTS = {
    "reader()": "datamount.readers",
    "obstore HTTPStore": "obstore",
    "fsspec http cat": "fsspec.implementations.http",
}


def child(who: str, url: str, paths_file: str) -> None:
    import importlib

    paths = json.loads(Path(paths_file).read_text(encoding="utf-8"))
    importlib.import_module(IMPORTS[who])  # imported before the clock starts, as a training script has
    cpu, started = time.process_time(), time.perf_counter()
    sizes = list(PASSES[who](url, paths))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(json.dumps({"seconds": seconds, "cpu": cpu, "count": len(sizes), "bytes": sum(sizes)}), flush=True)
    # Out at once: obstore's runtime threads may still hold a Python object as a bare interpreter exits, which
    # aborts the process (datamount's own stores wait for them: storage/backends/_obstore_runtime.py).
    os._exit(0)


# --- the parent ---------------------------------------------------------------------------------------------------


def run_child(who: str, url: str, paths_file: Path, server_pids: list[int]) -> dict[str, float]:
    before = processes_cpu_seconds(server_pids)
    done = subprocess.run(
        [sys.executable, __file__, "--child", who, url, str(paths_file)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{who} failed (exit {done.returncode}):\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    result["server_cpu"] = processes_cpu_seconds(server_pids) - before
    return result


def nginx_workers(master: int) -> list[int]:
    """The nginx master and its worker processes."""
    children = Path(f"/proc/{master}/task/{master}/children")
    return [master, *(int(pid) for pid in children.read_text().split())] if children.exists() else [master]


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 objects, for a smoke run")
    parser.add_argument("--runs", type=int, default=5, help="fresh-process passes of each client (median reported)")
    parser.add_argument("--count", type=int, help="files in the version (default 2,000; 300 with --quick)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
    if nginx is None:
        raise SystemExit("nginx is not installed (apt-get install nginx-light)")
    count = args.count or (300 if args.quick else 2000)

    from datamount.datasets import catalog, layout, upload
    from datamount.storage import open_store

    with tempfile.TemporaryDirectory(prefix="datamount-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)  # nginx's worker runs as another user (nobody) when started by root
        store = open_store(tmp / "store")
        upload(make_dataset(tmp / "source", count, 110_000), NAME, store=store)
        manifest = catalog.resolve(store, NAME)
        paths = [layout.object_path(NAME, entry.sha256) for entry in manifest.files]
        paths_file = tmp / "paths.json"
        paths_file.write_text(json.dumps(paths), encoding="utf-8")
        port = free_port()
        config = tmp / "nginx.conf"
        config.write_text(NGINX_CONF.format(folder=tmp, port=port, root=tmp / "store"), encoding="utf-8")
        url = f"http://127.0.0.1:{port}"
        with server_process([nginx, "-c", str(config), "-p", str(tmp)], f"{url}/") as server:
            pids = nginx_workers(server.pid)
            for who in PASSES:  # untimed: the page cache warm, and every client reads every object
                warm = run_child(who, url, paths_file, pids)
                if warm["count"] != count:
                    raise SystemExit(f"{who} read {warm['count']} objects, not {count}")
            found: dict[str, list[dict[str, float]]] = {who: [] for who in PASSES}
            for _ in range(args.runs):
                for who in PASSES:
                    found[who].append(run_child(who, url, paths_file, pids))

    print(f"\n{count:,} objects of ~110 KB from nginx on loopback, a fresh process per pass, median of {args.runs}")
    print(f"{'client':<20} {'objects/s':>10} {'MB/s':>8} {'client CPU-s/1k':>16} {'nginx CPU-s/1k':>15}")
    rates = {}
    for who, results in found.items():
        seconds = statistics.median(r["seconds"] for r in results)
        megabytes = results[0]["bytes"] / 1e6
        cpu = statistics.median(r["cpu"] for r in results) * 1000 / count
        nginx_cpu = statistics.median(r["server_cpu"] for r in results) * 1000 / count
        rates[who] = count / seconds
        print(f"{who:<20} {rates[who]:>10,.0f} {megabytes / seconds:>8,.0f} {cpu:>16.3f} {nginx_cpu:>15.3f}")
    ratios = ", ".join(f"{rates['reader()'] / rates[who]:.2f}x {who}" for who in PASSES if who != "reader()")
    print(f"\nreader(): {ratios}")


if __name__ == "__main__":
    main()
