"""Any dataset version as a read-only folder: ``mount("name@N", "/mnt/data")``, for code that reads files by path.

=====================  ===============================================================================
module                 job
=====================  ===============================================================================
:mod:`.tree`           the folder tree, from the manifest and the list
:mod:`.content`        the files' bytes: fetched, checked, kept in memory under a budget
:mod:`.filesystem`     the FUSE operations (pyfuse3 over libfuse 3) and read-ahead
:mod:`.mounting`       checks before a mount, the serving process, unmounting
=====================  ===============================================================================
"""

from datamount.mount.mounting import FSTYPE, Mounted, check_fuse, mount, unmount

__all__ = ["FSTYPE", "Mounted", "check_fuse", "mount", "unmount"]
