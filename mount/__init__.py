"""Any dataset version as a read-only folder: ``mount("name@N", "/mnt/data")``, for code that reads files by path.

=====================  ===============================================================================
module                 job
=====================  ===============================================================================
:mod:`.tree_view`      the tree the FUSE operations serve: a built ``datasets/tree.py`` Tree, or ...
:mod:`.lazy_tree`      ... an indexed version's, a node at a time from its indexes, bounded
:mod:`.content`        the files' bytes: fetched, checked, kept in memory under a budget
:mod:`.filesystem`     the FUSE operations (pyfuse3 over libfuse 3) and read-ahead
:mod:`.open_folder`    an open folder's listing, a window of its nodes at a time
:mod:`.push`           read-ahead files put into the kernel's page cache
:mod:`.mounting`       checks before a mount, the serving process, unmounting
=====================  ===============================================================================
"""

from datamount.mount.mounting import FSTYPE, Mounted, check_fuse, mount, unmount

__all__ = ["FSTYPE", "Mounted", "check_fuse", "mount", "unmount"]
