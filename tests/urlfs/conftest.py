"""The versions the ``datamount://`` tests read, on a local store and on moto's S3 (``tests/urlfs/versions.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from datamount.storage import Store
from tests.urlfs.versions import Versions, make_versions

ON_STORES = pytest.mark.parametrize(
    "store", ["local", pytest.param("s3", id="s3-moto", marks=pytest.mark.s3)], indirect=True
)


@pytest.fixture
def versions(store: Store, tmp_path: Path, request: pytest.FixtureRequest) -> Versions:
    """``packed`` and ``unpacked`` on ``store``, and where a filesystem on it caches."""
    endpoint = request.getfixturevalue("s3_server").endpoint_url if store.local_path() is None else None
    return make_versions(store, tmp_path, endpoint)
