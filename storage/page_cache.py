"""Whether a file's first page is in the page cache, asked without reading it.

``cachestat(2)`` (Linux 6.5) answers from the page cache alone. The older way, a one-byte ``RWF_NOWAIT`` read, is
the fallback: on Linux 5.9 and later such a read that misses starts reading the file, and on a fast disk it can finish
before the call returns, so the same cold file may be answered either way.
"""

from __future__ import annotations

import ctypes
import errno
import os

#: The system call's number, the same on every architecture since Linux 5.1 (alpha aside).
_CACHESTAT = 451


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


_FIRST_PAGE = _Range(0, 1)
_PROBE = bytearray(1)
_syscall = getattr(ctypes.CDLL(None, use_errno=True), "syscall", None)
if _syscall is not None:
    _syscall.restype = ctypes.c_long
    _syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.POINTER(_Range), ctypes.POINTER(_Stat), ctypes.c_uint]
_use_cachestat = _syscall is not None and os.uname().sysname == "Linux"


def first_page_cached(descriptor: int) -> bool:
    """Whether the first page of the open file ``descriptor`` is in the page cache; ``False`` where neither
    ``cachestat`` nor ``RWF_NOWAIT`` can tell."""
    global _use_cachestat
    if _use_cachestat:
        answer = _Stat()
        if _syscall(_CACHESTAT, descriptor, _FIRST_PAGE, answer, 0) == 0:
            return answer.nr_cache > 0
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):  # an older kernel, or a seccomp filter refusing it
            _use_cachestat = False
        else:
            return False
    return _read_would_not_wait(descriptor)


def _read_would_not_wait(descriptor: int) -> bool:
    try:
        os.preadv(descriptor, [_PROBE], 0, os.RWF_NOWAIT)
    except (OSError, AttributeError):
        return False
    return True
