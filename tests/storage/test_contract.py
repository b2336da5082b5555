"""The Store contract (:mod:`datamount.storage.testing`) on every backend of ``STORE_BACKENDS`` and every second
client of ``SECOND_CLIENTS``.

The ``store`` fixture of ``tests/storage/conftest.py`` gives each test a fresh, empty store on each of them; a backend
of another package runs the same suite with a ``store`` fixture of its own (``docs/storage.md``).
"""

from __future__ import annotations

from datamount.storage.testing import StoreContractTests


class TestStoreContract(StoreContractTests):
    """Every test of the contract, on each built-in backend."""
