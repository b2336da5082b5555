"""A Ray address is ``host:port`` with a port of ASCII digits up to 65535; anything else is a RayUnreachableError
naming how to write one, never a ValueError or OverflowError from the socket call (no Ray needed to check it)."""

from __future__ import annotations

import pytest

from datamount.datasets.errors import RayUnreachableError
from datamount.datasets.ray_cluster import probe


@pytest.mark.parametrize("address", ["127.0.0.1:²", "127.0.0.1:١٠٠٠", "ray://127.0.0.1:-1", "127.0.0.1:65536", "x:"])
def test_an_address_whose_port_is_no_port_is_named(address: str) -> None:
    with pytest.raises(RayUnreachableError, match="is not a Ray address: write host:port, ray://host:port or auto"):
        probe(address)
