"""A local Ray cluster (2 CPUs) for the tests of the task master and of the Ray pack: one per session.

The cluster's services listen on 127.0.0.1 only. Started by the first test that needs it, shut down when the session
ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tests.servers._launch import cannot_run


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This process connected to a local Ray cluster; yields the cluster's address, for trainer processes."""
    try:
        import ray
    except ImportError:
        cannot_run("Ray", "Ray is not installed (pip install 'datamount[ray]')")
    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address
        return
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level=logging.WARNING,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
