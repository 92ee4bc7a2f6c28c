"""Give back the resident pages of a memory-mapped store file.

LMDB reads through a read-only shared mapping of its data file. Every page
touched stays mapped into the process, and Linux counts those file-backed
pages in the broker's RSS even though they are only page cache: draining a
1 GB backlog would show as 1 GB of RSS. ``release`` drops this process's
mappings of the pages (``madvise(MADV_DONTNEED)``); the data stays in the page
cache and a later read just maps it again (a minor fault). It is safe while
other threads read or write the file: a clean shared file page that is
unmapped is simply faulted back in when needed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)

MADV_DONTNEED = 4

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_madvise = _libc.madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_madvise.restype = ctypes.c_int


def mapped_ranges(path: str) -> list[tuple[int, int]]:
    """(start, length) of every mapping of ``path`` in this process (Linux /proc)."""
    real = os.path.realpath(path)
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].strip() == real:
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    ranges.append((start, end - start))
    except OSError:  # not Linux: nothing to release
        return []
    return ranges


def release(ranges: list[tuple[int, int]]) -> None:
    for start, length in ranges:
        if _madvise(start, length, MADV_DONTNEED) != 0:
            log.debug("madvise failed: %s", os.strerror(ctypes.get_errno()))


# A record next to the last one touched (key order: a FIFO queue's read or ack) lies on the
# page that one did or the next, already mapped by the fault-around: it spends its share
# of a page, its size over this. A record anywhere else spends a whole page (``spend()``).
PAGE_SIZE = 4096
# What an index entry, or a record's node in its leaf page, occupies (a leaf's worth of
# neighbouring entries shares one page).
ENTRY_SIZE = 64


def nearby(size: int) -> float:
    """The budget a record of ``size`` bytes next to the last one touched spends."""
    return (size + ENTRY_SIZE) / PAGE_SIZE


class PageBudget:
    """Gives the mapped pages back after every ``every`` pages' worth of record accesses.

    A long transaction (a deep priority queue's drain deletes thousands of entries in
    one write) maps pages far faster than a timer gives them back: each page LMDB
    touches brings up to 64 KiB of neighbours with it (the kernel's fault-around), and
    a priority level's records lie interleaved with the other levels' in the file. A
    budget counted in accesses bounds what one call can map, whatever the machine's load.
    An access spends a page, or its share of one when it is next to the last record its
    caller touched (``nearby``): a FIFO drain reads and deletes in key order, a few records
    to a page, and a release after every ``every`` records cost it a ``madvise`` walking the
    whole mapping's page tables every few hundred messages. A priority queue's levels, read
    apart from each other, still spend a page a record: its RSS bound is unchanged.
    Counting is approximate when the loop and the writer thread both spend (no lock):
    a missed decrement only delays one release.
    """

    __slots__ = ("_left", "_release", "every")

    def __init__(self, release: Callable[[], None], every: int) -> None:
        self._release = release
        self.every = every
        self._left: float = every

    def spend(self, n: float = 1) -> None:
        self._left -= n
        if self._left <= 0:
            self._left = self.every
            self._release()
