"""Resource alarms: block publishing connections while memory is short.

As in RabbitMQ, an alarm blocks only connections that publish: the server
stops reading their sockets (and tells clients that advertise the
``connection.blocked`` capability with ``connection.blocked``); consumers keep
going, which is what frees memory. ``connection.unblocked`` is sent when every
alarm has cleared. The disk-free alarm (``DISK``) works the same way.

Free disk space (``DiskMonitor``) is the filesystem's free space plus the
free pages inside the store's file: LMDB never gives its file back to the
filesystem, it reuses freed pages first, so after a big queue is deleted the
disk is effectively free again although ``df`` does not show it (RabbitMQ
measures only the filesystem; its message store files do shrink). The check
runs on a timer and also whenever the store's file has grown by
``GROWTH_STEP`` since the last check, so a fast publisher is blocked before
the disk fills, not up to a timer period later.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
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
    """Compares RSS with ``watermark`` x RAM (the alarm) and with ``paging_ratio`` of that
    (queues page, ``queues/paging.py``); the caller polls ``check()`` periodically."""

    def __init__(self, watermark: float, total: int | None = None,
                 paging_ratio: float = 0.5) -> None:
        self.total = total if total is not None else total_memory()
        self.limit = int(self.total * watermark)
        self.paging_limit = int(self.limit * paging_ratio)

    def check(self) -> tuple[bool, bool]:
        """(above the limit, above the paging threshold), from one RSS reading. Without a
        limit (RAM not known) neither; a paging ratio of 0 pages always."""
        if not self.limit:
            return False, False
        rss = resident_memory()
        return rss > self.limit, rss > self.paging_limit


# Check free disk space each time the store's file has grown by this much: well under
# any sensible disk_free_limit, so the alarm is raised before the disk fills.
GROWTH_STEP = 1 << 20
# While the disk alarm is on, re-check after commits at most this often (s): freeing
# space (deleting a queue) unblocks publishers without waiting for the timer.
ALARM_RECHECK = 0.2


def filesystem_free(path: Path) -> int:
    return shutil.disk_usage(path).free


def directory_bytes(path: Path) -> int:
    """Disk blocks used by the files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class DiskMonitor:
    """Free space = the filesystem's + the store's reusable pages; alarm under ``limit``.

    ``capacity`` (config ``disk_capacity``) makes the data dir behave as a disk of
    that size (free = capacity - bytes under the data dir, or the filesystem's free
    space if smaller): a quota, and a small disk for tests.
    """

    def __init__(self, path: Path, limit: int, store_space: Callable[[], Any],
                 store_file_bytes: Callable[[], int], clock: Callable[[], float],
                 capacity: int = 0,
                 filesystem_free: Callable[[Path], int] = filesystem_free) -> None:
        self.path = Path(path)
        self.limit = limit
        self.capacity = capacity
        self._store_space = store_space
        self._store_file_bytes = store_file_bytes
        self._clock = clock
        self._filesystem_free = filesystem_free
        self.alarm = False
        self._checked_size = -1
        self._checked_at = float("-inf")

    def free(self) -> int:
        try:
            free = self._filesystem_free(self.path)
            if self.capacity:
                free = min(free, self.capacity - directory_bytes(self.path))
        except OSError:
            return self.limit + 1  # cannot tell: no alarm, as before
        return int(free + self._store_space().free_bytes)

    def check(self) -> bool:
        """Measure now; True while free space is under the limit."""
        self._checked_size = self._store_file_bytes()
        self._checked_at = self._clock()
        self.alarm = bool(self.limit) and self.free() < self.limit
        return self.alarm

    def due(self) -> bool:
        """After a commit: has the store grown enough (or is the alarm on) to measure again?"""
        if self.alarm:
            return self._clock() - self._checked_at >= ALARM_RECHECK
        return self._store_file_bytes() - self._checked_size >= GROWTH_STEP
