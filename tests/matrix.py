"""The two runs of the tests: what ``python -m pytest`` runs on any machine by default, and the full matrix.

The full matrix (``@pytest.mark.full``, given here) is what needs root, Debian packages, a Ray cluster or downloads
done before the tests, and what takes long: every test of the servers in :data:`FULL_SERVERS` (GlusterFS, HDFS,
Ceph, the data-center rigs, the local Ray cluster), and every test marked ``slow`` (spawned worker processes,
stalled servers waited out, long hypothesis runs). ``addopts`` leaves it out (``-m "not full"``): the README's test
command runs everything else, on any machine, in minutes (every promise on the local, memory, moto and GCS-emulator
stores, in threads and forked workers). ``python -m pytest -m full`` runs the matrix alone, ``-m ""`` everything;
``.ci/run`` runs the README's command, then, in one session, the matrix and what the first run skipped
(``--skipped-to``, :mod:`tests.skip_summary`; ``-m full --with-ids=FILE``) with every server and optional package
installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parallel import server_group

#: The servers whose tests belong to the full matrix.
FULL_SERVERS = ("gluster", "hdfs", "ceph", "datacenter", "ray")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--with-ids",
        metavar="FILE",
        help="the tests FILE names (node ids or module paths, one a line, as --skipped-to writes them) join the full "
        "matrix of this run: `-m full --with-ids=FILE` runs both in one session",
    )


def named_in(node_id: str, names: set[str]) -> bool:
    """Whether ``node_id`` is one of ``names`` or lies within one of them (a module's path, a folder's)."""
    parts = node_id.split("::")
    within = {"::".join(parts[:end]) for end in range(1, len(parts) + 1)}
    folders = node_id.split("/")
    within |= {"/".join(folders[:end]) for end in range(1, len(folders))}
    return not within.isdisjoint(names)


@pytest.hookimpl(tryfirst=True)  # before pytest's own, which deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = config.getoption("with_ids", None)
    names = set(Path(listed).read_text(encoding="utf-8").splitlines()) - {""} if listed else set()
    for item in items:
        if server_group(item) in FULL_SERVERS or item.get_closest_marker("slow") or named_in(item.nodeid, names):
            item.add_marker(pytest.mark.full)
