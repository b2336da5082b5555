"""Running the tests on several workers (pytest-xdist, ``-n``): a server that runs once per machine (glusterd's port
24007) or that is heavy (HDFS, Ceph, a Ray cluster, the data-center rigs) is started by one worker only.

With ``--dist loadgroup`` every test that needs such a server is put in that server's group, and each group runs on
one worker; the other tests are spread over all of them. The groups follow the servers' marks (``@pytest.mark.ceph``,
and those of the ``store`` fixture's parameters) and the fixtures that start them (``gluster_server``...).
"""

from __future__ import annotations

import pytest

#: Why a group can be lost: pytest-xdist (3.8) names a test's group by rewriting ``Item._nodeid``, which pytest 9.2
#: no longer reads (pytest-xdist issue #1386); the test extra holds pytest below 9.2 until xdist names groups another
#: way.
LOST_GROUPS = (
    "pytest-xdist's --dist loadgroup would not keep each server's tests on one worker: this pytest ({version}) does "
    "not read Item._nodeid, where pytest-xdist writes a test's group (pytest-xdist issue #1386). Install the test "
    "extra's pytest (below 9.2), or run in one process with -n 0"
)

#: The servers whose tests share one worker, by mark and by the prefix of the fixtures that start them.
ONE_WORKER_SERVERS = ("gluster", "hdfs", "ceph", "ray", "datacenter")


def server_group(item: pytest.Item) -> str | None:
    """The server whose worker ``item`` must run on, if any."""
    fixtures = getattr(item, "fixturenames", ())
    for server in ONE_WORKER_SERVERS:
        if item.get_closest_marker(server) or any(name.startswith(f"{server}_") for name in fixtures):
            return server
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = server_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def groups_are_kept() -> bool:
    """Whether this pytest reads ``Item._nodeid``, where pytest-xdist's loadgroup writes a test's group."""
    return "_nodeid" in pytest.Item.nodeid.fget.__code__.co_names


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to spread the tests over workers where their groups would be lost: two workers would each start the
    same server (glusterd, on one port per machine)."""
    spread = config.getoption("dist", "no") == "loadgroup" and config.getoption("numprocesses", None)
    if spread and not hasattr(config, "workerinput") and not groups_are_kept():
        raise pytest.UsageError(LOST_GROUPS.format(version=pytest.__version__))
