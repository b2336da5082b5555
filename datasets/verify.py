"""``verify``: re-hash everything a version stores against its manifest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from datamount.datasets import layout
from datamount.datasets.manifest import Manifest
from datamount.storage import Store


@dataclass
class VerifyReport:
    """What ``verify`` found: each object checked, and the problems."""

    manifest: Manifest
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(store: Store, manifest: Manifest, *, on_checked: Callable[[int], None] | None = None) -> VerifyReport:
    """Re-hash the list, every object and every shard of ``manifest``; report every missing one and every mismatch."""
    report = VerifyReport(manifest)
    folder = layout.dataset_folder(manifest.name)
    targets = []
    if manifest.has_list:
        targets.append((layout.list_path(manifest), manifest.list_size, manifest.list_sha256, "the list"))
    targets += [(layout.object_path(manifest.name, e.sha256), e.size, e.sha256, e.path) for e in manifest.files]
    targets += [(layout.shard_path(manifest.name, s), s.size, s.sha256, f"shard {s.path}") for s in manifest.shards]
    present: dict[str, int] = {}
    packs = {layout.pack_folder_of(shard) for shard in manifest.shards}
    for area in (layout.OBJECTS, layout.LISTS, *sorted(packs)):
        present.update(store.list(f"{folder}/{area}"))
    for path, size, sha256, label in targets:
        report.checked += 1
        if path not in present:
            report.problems.append(f"missing: {label} ({store.url_for(path)})")
        elif present[path] != size:
            report.problems.append(f"wrong size: {label}: {present[path]} bytes, manifest says {size}")
        elif store.sha256(path) != sha256:
            report.problems.append(f"wrong content: {label} ({store.url_for(path)}) does not match its sha256")
        if on_checked is not None:
            on_checked(size)
    return report
