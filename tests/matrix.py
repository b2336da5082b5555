"""The two runs of the tests: what ``python -m pytest`` runs on any machine by default, and the full matrix.

The full matrix (``@pytest.mark.full``, given here) is what needs root, Debian packages, a Ray cluster or downloads
done before the tests, and what takes long: every test of the servers in :data:`FULL_SERVERS` (GlusterFS, HDFS,
Ceph, the data-center rigs, the local Ray cluster), and every test marked ``slow`` (spawned worker processes,
stalled servers waited out, long hypothesis runs). ``addopts`` leaves it out (``-m "not full"``): the README's test
command runs everything else, on any machine, in minutes (every promise on the local, memory, moto and GCS-emulator
stores, in threads and forked workers). ``python -m pytest -m full`` runs the matrix alone, ``-m ""`` everything;
``.ci/run`` runs the README's command, then the matrix and what the first run skipped (``--skipped-to``,
:mod:`tests.skip_summary`) with every server and optional package installed.
"""

from __future__ import annotations

import pytest

from tests.parallel import server_group

#: The servers whose tests belong to the full matrix.
FULL_SERVERS = ("gluster", "hdfs", "ceph", "datacenter", "ray")


@pytest.hookimpl(tryfirst=True)  # before pytest's own, which deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if server_group(item) in FULL_SERVERS or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.full)
