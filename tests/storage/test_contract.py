"""The Store contract (:mod:`datamount.storage.testing`) on every backend of ``STORE_BACKENDS``.

The ``store`` fixture of the root conftest, parametrised over ``STORE_BACKENDS``, gives each test a fresh, empty
store; a backend of another package runs the same suite with a ``store`` fixture of its own (``docs/storage.md``).
"""

from __future__ import annotations

import pytest

from datamount.storage import Store
from datamount.storage.testing import StoreContractTests
from tests.stores import SECOND_CLIENTS, STORE_BACKENDS


@pytest.fixture(params=[*STORE_BACKENDS, *SECOND_CLIENTS])
def store(request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store on each backend, and through each client of a backend that has two."""
    return request.getfixturevalue(f"{request.param}_store")


class TestStoreContract(StoreContractTests):
    """Every test of the contract, on each built-in backend."""
