"""Manifests as earlier datamounts wrote them, for the tests of reading old formats and damaged entries."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from datamount.datasets import catalog, layout
from datamount.datasets.file_parts import FileParts
from datamount.datasets.file_parts_writer import write_file_parts
from datamount.datasets.manifest import Manifest
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


def write_format_6(store: Store, name: str, version: int = 1) -> Manifest:
    """Store version ``version`` of ``name`` again as the next version, as format 6 wrote it: its entries in parts
    without their rows, and no row index (the same list, objects and shards); the manifest of that version."""
    manifest = catalog.resolve(store, f"{name}@{version}")
    parts = write_file_parts(store, name, list(manifest.files))
    number = catalog.versions_folder(store, name).next_number
    folder = layout.dataset_folder(name)
    files = FileParts(store, folder, parts, f"{name}@{number}")
    old = dataclasses.replace(manifest, files=files, row_parts=None, format_version=6, version=number)
    store.create(layout.manifest_path(name, number), old.to_json())
    return catalog.resolve(store, f"{name}@{number}")
