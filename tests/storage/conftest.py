"""The storage tests' ``store``: every backend of ``STORE_BACKENDS``, and every further client of one (S3 through
s3fs as well as obstore), so that the contract suite and the process matrix run on each."""

from __future__ import annotations

import pytest

from datamount.storage import Store
from tests.stores import SECOND_CLIENTS, STORE_BACKENDS


@pytest.fixture(params=[*STORE_BACKENDS, *SECOND_CLIENTS])
def store(request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store on each backend, and through each client of a backend that has two."""
    return request.getfixturevalue(f"{request.param}_store")
