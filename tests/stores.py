"""The backends the stores of the tests run on: the parametrisation of the ``store`` and ``shared_store`` fixtures
(root conftest)."""

from __future__ import annotations

from collections.abc import Collection

import pytest

#: Backends the contract suite and the dataset round trips run on: each names the fixtures ``<name>_store`` (fresh
#: for each test) and ``<name>_shared_store`` (one for the session, for datasets that tests only read).
STORE_BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("memory", id="memory"),
    pytest.param("s3", id="s3-moto", marks=pytest.mark.s3),
    pytest.param("gluster", id="gluster", marks=pytest.mark.gluster),
    pytest.param("gcs", id="gcs", marks=pytest.mark.gcs),
    pytest.param("hdfs", id="hdfs", marks=pytest.mark.hdfs),
    pytest.param("ceph", id="ceph-rgw", marks=pytest.mark.ceph),
]

#: Further clients of a backend of :data:`STORE_BACKENDS` (S3 through s3fs rather than obstore): the contract suite
#: and the process matrix run on them too.
SECOND_CLIENTS = [pytest.param("s3fs", id="s3fs-moto", marks=pytest.mark.s3)]


def store_backends(*, slow: Collection[str]) -> list[pytest.ParameterSet]:
    """:data:`STORE_BACKENDS` with the ``slow`` mark added to the backends whose ids are in ``slow``, for a test
    that is slow on those only: ``@pytest.mark.parametrize("store", store_backends(slow={"s3-moto"}),
    indirect=True)``."""
    unknown = set(slow) - {backend.id for backend in STORE_BACKENDS}
    if unknown:
        raise ValueError(f"no backend has the id {sorted(unknown)} in STORE_BACKENDS")
    return [
        pytest.param(*backend.values, id=backend.id, marks=[*backend.marks, pytest.mark.slow])
        if backend.id in slow
        else backend
        for backend in STORE_BACKENDS
    ]
