"""A version's pack folder is named after what cut its shards, and read back by the same module
(``layout.version_pack_folder`` and ``layout.pack_settings``): what ``verify --repair`` makes a lost shard again
with. Any other pack folder (a draft's, an upload's) names no settings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from datamount.datasets import layout

SIZES = st.integers(min_value=1, max_value=2**40)


@given(
    version=st.integers(min_value=1, max_value=10**9),
    shard_bytes=SIZES,
    row_group_bytes=SIZES,
    first_group_bytes=SIZES,
    compression=st.sampled_from(["zstd", "snappy", "lz4", "gzip", "brotli"]),
)
def test_a_version_pack_folder_names_its_settings(
    version: int, shard_bytes: int, row_group_bytes: int, first_group_bytes: int, compression: str
) -> None:
    folder = layout.version_pack_folder(version, shard_bytes, row_group_bytes, first_group_bytes, compression)
    first = min(first_group_bytes, row_group_bytes)  # a first group no smaller is not named: groups cut alike
    assert layout.pack_settings(folder) == layout.PackSettings(
        version, shard_bytes, row_group_bytes, first, compression
    )


def test_folders_named_otherwise_name_no_settings() -> None:
    assert layout.pack_settings(layout.new_pack_folder()) is None
    assert layout.pack_settings(layout.upload_pack_folder("0123abcd", 0)) is None
    assert layout.pack_settings("packs/1-2") is None and layout.pack_settings("lists/1-2-3") is None
    assert layout.pack_settings("packs/1-2-3-٣") is None  # digits of other scripts are not a size
    assert layout.pack_settings("packs/7-1000-500") == layout.PackSettings(7, 1000, 500, 500, "snappy")
