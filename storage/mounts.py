"""Which filesystem a local path is on, from ``/proc/mounts`` (for stores that must live on a mount)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from datamount.storage.errors import MountError, StoreConfigError

PROC_MOUNTS = "/proc/mounts"

#: ``mount`` option values and the ``/proc/mounts`` types that satisfy them.
MOUNT_TYPES: dict[str, frozenset[str]] = {
    "glusterfs": frozenset({"fuse.glusterfs", "glusterfs"}),
    "nfs": frozenset({"nfs", "nfs4"}),
    "cephfs": frozenset({"ceph", "fuse.ceph-fuse"}),
    "lustre": frozenset({"lustre"}),
}


@dataclass(frozen=True)
class MountPoint:
    """One line of ``/proc/mounts``."""

    source: str
    target: str
    fstype: str


def _unescape(field: str) -> str:
    # /proc/mounts writes spaces, tabs, newlines and backslashes in octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def read_mounts(path: str = PROC_MOUNTS) -> list[MountPoint]:
    """The mount table of this machine."""
    with open(path, encoding="utf-8", errors="replace") as table:
        rows = [line.split() for line in table]
    return [MountPoint(_unescape(r[0]), _unescape(r[1]), r[2]) for r in rows if len(r) >= 3]


def mount_of(path: str, mounts: list[MountPoint] | None = None) -> MountPoint:
    """The mount that holds ``path`` (the nearest existing ancestor when ``path`` does not exist yet)."""
    probe = os.path.realpath(path)
    while not os.path.exists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    best: MountPoint | None = None
    for mount in mounts if mounts is not None else read_mounts():
        target = mount.target.rstrip("/") or "/"
        inside = probe == target or probe.startswith(target + "/") or target == "/"
        if inside and (best is None or len(target) >= len(best.target.rstrip("/") or "/")):
            best = mount
    if best is None:
        raise MountError(f"no mount holds {path} according to {PROC_MOUNTS}")
    return best


def require_mount(path: str, kind: str) -> MountPoint:
    """Raise :class:`MountError` unless ``path`` is on a mount of ``kind`` (e.g. ``"glusterfs"``)."""
    accepted = MOUNT_TYPES.get(kind, frozenset({kind}))
    if not kind:
        raise StoreConfigError("the 'mount' option needs a filesystem type, e.g. mount = \"glusterfs\"")
    if not os.path.exists(PROC_MOUNTS):
        raise MountError(f"cannot check that {path} is a {kind} mount: {PROC_MOUNTS} does not exist here")
    found = mount_of(path)
    if found.fstype not in accepted:
        raise MountError(
            f"{path} must be on a {kind} mount, but it is on {found.target} ({found.fstype}); "
            f"mount the volume first (e.g. mount -t {kind} SERVER:/VOLUME {path}) — "
            "writing into an unmounted mount point would fill the local disk instead"
        )
    return found
