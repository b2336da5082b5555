"""Running the tests on several workers (pytest-xdist, ``-n``): a server that runs once per machine (glusterd's port
24007) or that is heavy (HDFS, Ceph, a Ray cluster, the data-center rigs) is started by one worker only.

With ``--dist loadgroup`` every test that needs such a server is put in that server's group, and each group runs on
one worker; the other tests are spread over all of them. The groups follow the servers' marks (``@pytest.mark.ceph``,
and those of the ``store`` fixture's parameters) and the fixtures that start them (``gluster_server``...).
"""

from __future__ import annotations

import pytest

#: The servers whose tests share one worker, by mark and by the prefix of the fixtures that start them.
ONE_WORKER_SERVERS = ("gluster", "hdfs", "ceph", "ray", "datacenter")


def server_group(item: pytest.Item) -> str | None:
    """The server whose worker ``item`` must run on, if any."""
    fixtures = getattr(item, "fixturenames", ())
    for server in ONE_WORKER_SERVERS:
        if item.get_closest_marker(server) or any(name.startswith(f"{server}_") for name in fixtures):
            return server
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = server_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
