"""The local content cache: paths only from digests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from datamount.storage import IntegrityError
from datamount.storage.cache import ContentCache

SHARD_SIZE = 32 << 10


def blob(number: int, size: int = SHARD_SIZE) -> tuple[str, bytes]:
    data = number.to_bytes(4, "big") * (size // 4)
    return hashlib.sha256(data).hexdigest(), data


@pytest.mark.parametrize(
    "value",
    ["../precious.txt", "../../" + "0" * 58, "A" * 64, "0" * 63, "0" * 65, "0" * 63 + "/", ""],
    ids=["climbs-out", "climbs-out-64-chars", "upper-case", "short", "long", "slash", "empty"],
)
def test_shared_cache_refuses_a_manifest_sha256_that_is_not_hex(tmp_path: Path, value: str) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"keep me")
    cache = ContentCache(tmp_path / "a" / "cache")
    before = sorted(tmp_path.rglob("*"))

    def fill(out: object) -> None:
        pytest.fail("nothing may be fetched for a value that is not a digest")

    with pytest.raises(IntegrityError, match=r"shard-7\.parquet.*not a sha256") as caught:
        cache.get(value, precious.stat().st_size, fill, name="shard-7.parquet")
    assert repr(value) in str(caught.value)
    assert precious.read_bytes() == b"keep me"
    assert sorted(tmp_path.rglob("*")) == before
