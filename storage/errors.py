"""Exceptions raised by :mod:`datamount.storage`.

Every datamount error derives from :class:`DatamountError`; each kind also derives from the built-in exception a
caller would already catch (``FileNotFoundError``, ``PermissionError``, ``ConnectionError``...).
"""

from __future__ import annotations

import errno


class DatamountError(Exception):
    """Root of every error datamount raises on purpose."""


class StoreConfigError(DatamountError, ValueError):
    """A store URL, option or profile is wrong; the message names it and the fix."""


class BackendNotInstalledError(DatamountError, ImportError):
    """The backend for a protocol needs a package that is not installed."""


class UnsafePathError(DatamountError, ValueError):
    """A path would leave the store's root (``..``, an absolute path, a link pointing outside)."""


class ObjectNotFoundError(DatamountError, FileNotFoundError):
    """An object (or the store's bucket or root) does not exist."""


class ObjectExistsError(DatamountError, FileExistsError):
    """An exclusive create found the path taken: another writer created it first."""


class StorePermissionError(DatamountError, PermissionError):
    """The store refused the operation: missing or wrong credentials, or no right to the path."""


class StoreUnreachableError(DatamountError, ConnectionError):
    """The store's endpoint did not answer (down, wrong host or port, firewalled)."""


class MountError(DatamountError, OSError):
    """A store declared as a mount (e.g. GlusterFS) whose root is not mounted."""


class StoreIOError(DatamountError, OSError):
    """Any other failure of the storage backend, with the store and path named."""


class IntegrityError(DatamountError, OSError):
    """Bytes do not match the checksum recorded for them (a damaged object, shard or cached copy): an ``OSError``
    with ``errno.EIO``, as a damaged disk's read is, for code that reads files through a file system."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        if self.errno is None:
            self.errno = errno.EIO
