"""Resource alarms: block publishing connections while memory is short.

As in RabbitMQ, an alarm blocks only connections that publish: the server
stops reading their sockets (and tells clients that advertise the
``connection.blocked`` capability with ``connection.blocked``); consumers keep
going, which is what frees memory. ``connection.unblocked`` is sent when every
alarm has cleared. The disk-free alarm (``DISK``) works the same way.
"""

from __future__ import annotations

import logging
import os

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


class MemoryMonitor:
    """Compares RSS with ``watermark`` x RAM; the caller polls ``check()`` periodically."""

    def __init__(self, watermark: float, total: int | None = None) -> None:
        self.total = total if total is not None else total_memory()
        self.limit = int(self.total * watermark)

    def check(self) -> bool:
        """True while memory use is above the limit."""
        return bool(self.limit) and resident_memory() > self.limit
