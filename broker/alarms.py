"""Resource alarms: block publishing connections while memory is short.

As in RabbitMQ, an alarm blocks only connections that publish: the server
stops reading their sockets (and tells clients that advertise the
``connection.blocked`` capability with ``connection.blocked``); consumers keep
going, which is what frees memory. ``connection.unblocked`` is sent when every
alarm has cleared. The disk-free alarm (``DISK``) works the same way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from typing import Any

log = logging.getLogger(__name__)

MEMORY = "memory"
DISK = "disk"


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - non-POSIX
        return 0


def resident_memory() -> int:
    """This process's RSS in bytes (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def trim_heap() -> None:
    """Hand free heap memory back to the OS (glibc ``malloc_trim``).

    Draining a deep queue frees message bodies (over pymalloc's size limit, so
    plain malloc) in an order that leaves the heap's free space scattered;
    glibc keeps it mapped until asked. Cheap to call once a second.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_malloc_trim = _find_malloc_trim()


class MemoryMonitor:
    """Compares RSS with ``watermark`` x RAM; the caller polls ``check()`` periodically."""

    def __init__(self, watermark: float, total: int | None = None) -> None:
        self.total = total if total is not None else total_memory()
        self.limit = int(self.total * watermark)

    def check(self) -> bool:
        """True while memory use is above the limit."""
        return bool(self.limit) and resident_memory() > self.limit
