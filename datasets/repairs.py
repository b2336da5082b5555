"""What puts a lost or damaged part of a version back: the one text of each repair, named by every error about such
a part (a reader's, the mount's, ``export``'s, ``cp``'s), so that each says the same command.

An object or a list comes back from the ``.list`` the version was uploaded from (``datamount verify NAME@N --repair
--from LIST``); a shard that ``pack`` made from the version's objects is packed again from them (``--repair`` alone);
a shard that holds the only copy of its rows (an import, a public install, ``upload --pack``) comes back from
nowhere in the store.
"""

from __future__ import annotations

from datamount.datasets.manifest import Manifest


def object_repair(manifest: Manifest) -> str:
    """What puts back an object or the list of ``manifest``'s version: the list it was uploaded from."""
    return f"datamount verify {manifest.ref} --repair --from LIST puts it back"


def shard_repair(manifest: Manifest) -> str:
    """What puts back a shard of ``manifest``'s version: packing it again from the version's objects, when it has
    them; otherwise nothing in the store."""
    if manifest.objects and manifest.has_list:
        return f"datamount verify {manifest.ref} --repair makes it again from the version's objects"
    return (
        f"the store holds its rows nowhere else: datamount verify {manifest.ref} names every part lost; write "
        "the data again as a new version"
    )
