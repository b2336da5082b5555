"""The two runs of the tests: what ``python -m pytest`` runs on any machine by default, and the full matrix.

The full matrix (``@pytest.mark.full``, given here to every test of the servers in :data:`FULL_SERVERS`) is the
real-server and rig part that needs root, Debian packages or downloads done before the tests: GlusterFS, HDFS,
Ceph, the data-center rigs. ``addopts`` leaves it out (``-m "not full"``): the README's test command runs everything
else, on any machine, in minutes. ``python -m pytest -m full`` runs the matrix alone, ``-m ""`` everything;
``.ci/run`` runs the README's command, then the matrix and what the first run skipped (``--skipped-to``,
:mod:`tests.skip_summary`) with every server and optional package installed.
"""

from __future__ import annotations

import pytest

from tests.parallel import server_group

#: The servers whose tests make up the full matrix.
FULL_SERVERS = ("gluster", "hdfs", "ceph", "datacenter")


@pytest.hookimpl(tryfirst=True)  # before pytest's own, which deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if server_group(item) in FULL_SERVERS:
            item.add_marker(pytest.mark.full)
