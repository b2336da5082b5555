"""Manifests as earlier datamounts wrote them, for the tests of reading old formats and damaged entries."""

from __future__ import annotations

import json
from typing import Any

from datamount.datasets import catalog, layout
from datamount.storage import Store


def inline_body(store: Store, name: str, version: int = 1) -> dict[str, Any]:
    """The JSON document of version ``version`` of ``name`` as format 5 wrote it: its file entries in it
    (``[path, size, sha256, xxh3]``, the xxh3-64 left out when empty), not in parts, and no blocks of its list."""
    body = json.loads(store.read(layout.manifest_path(name, version)))
    body.pop("row_parts", None)
    if body.pop("list_blocks", None) is not None:
        body["format_version"] = 5
    if "file_parts" in body:
        manifest = catalog.read_manifest(store, name, version, packed=False)
        del body["file_parts"]
        body["files"] = [list(entry) if entry.xxh3 else list(entry[:3]) for entry in manifest.files]
        body["format_version"] = 5
    return body


def write_inline(store: Store, name: str, version: int = 1) -> dict[str, Any]:
    """Rewrite version ``version`` of ``name`` as format 5 wrote it (:func:`inline_body`); its JSON document."""
    body = inline_body(store, name, version)
    store.write(layout.manifest_path(name, version), json.dumps(body, separators=(",", ":")).encode())
    return body
