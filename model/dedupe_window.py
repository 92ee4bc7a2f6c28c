# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""An exchange's deduplication window: the keys seen, in FIFO order, in flat arrays.

Theory of operation
-------------------
A full window takes a key and evicts its oldest on every publish, so at a million keys what
costs is memory, not instructions: a dict of key -> place, a FIFO list and an int object per
key missed the last-level cache about 29 times a publish (``bench/dedupe_misses.py``), in
the dict's periodic rebuilds (deletions use up its entries), the list's regrowth and cuts,
and each evicted key's dict entry and int. Here nothing is rebuilt while the window turns
over, and the cold memory a publish touches is one table slot for the new key, one for
the evicted one, and the evicted key's bytes as they are freed:

* the **table**: open addressing over one flat array of 64-bit words, linear probing,
  ``2 * capacity`` slots (at most half full; 16 MB at a million keys): each word the high
  bits of the key's tag (its hash) and its ring slot (0 is an empty slot; a ring holds at
  most 2**32 places). A deletion shifts the entries after it back (no tombstones, so no
  rebuild as keys come and go). A tag match is confirmed against the key itself before it counts
  as the key: never a false duplicate, and the key's bytes are read only on a match.
* the **ring**: ``capacity`` places in FIFO order (a ring number grows by one per add; its
  slot is the number modulo the capacity): each place's tag (to find the evicted key's
  table slot without touching the key), its place in the window (``order``, what the store
  knows it by), its key and, once some key expires, its expiry. Read and written in order,
  so they stay cached. A key added again, or discarded, leaves its old place behind (tag 0),
  skipped by eviction; when the ring is full of live and left-behind places, it is laid
  out again, twice as large if more than half of it is live (amortised, as a list's
  growth).

Eviction is exact FIFO at ``size``; TTL expiry is judged on lookup (an expired key is absent
whether or not it was evicted). It is a pure structure (times passed in, wall-clock ms),
tested against a naive model; what is durable is ``broker/dedupe.py``'s. ``floor``: every
place below it was evicted (a lower bound: a key taken out of the middle may leave it below
the oldest place held), moved past each evicted key's place as it goes.

Compiled (``dedupe_window.pxd``) the arrays are typed memoryviews read as C arrays; pure, the
same lines index ``array.array``s.
"""

from __future__ import annotations

import ctypes
from array import array
from collections.abc import Iterable

_MIN_CAPACITY = 8  # places in a new window's ring (it grows as keys come)
# A table slot is one 64-bit word: the key's tag with its low bits replaced by the key's
# ring slot (a ring of at most 2**32 places). Its home slot is read from bits 32 and up,
# which the ring slot never reaches, so the word alone says where it belongs; bit 62 is
# set in every tag, so no word is 0 (an empty slot).
_HOME_SHIFT = 32
_TOP = 1 << 62


def _zeros(n: int) -> array[int]:
    return array("q", bytes(8 * n))


def _untracked(keys: list[bytes | None]) -> list[bytes | None]:
    """``keys``, left out of the cyclic garbage collector's walks. It holds only bytes and
    None, which refer to nothing, so it can be in no cycle; tracked, each full collection
    would read every key it holds (at a million keys, a million cold objects: more misses
    than everything else a publish does, in ``bench/dedupe_misses.py``). CPython's own
    call (there is no Python one); elsewhere the list stays tracked."""
    try:
        ctypes.pythonapi.PyObject_GC_UnTrack(ctypes.py_object(keys))
    except AttributeError:  # not CPython
        pass
    return keys


class Window:
    """Keys seen, each with its place in the window (``order``, increasing) and, if it
    has one, its expiry (wall-clock ms). ``timed``: some key was added with an expiry, so
    ``seen`` needs the time (until then, callers may pass 0). ``tag_bits`` narrows the
    tags (tests: to make keys share them)."""

    __slots__ = ("_live", "_next", "_rexp", "_rkeys", "_rmask", "_rorder", "_rtag", "_slots",
                 "_tagmask", "_tail", "_tmask", "floor", "size", "timed")

    def __init__(self, size: int, entries: Iterable[tuple[bytes, int, int]] = (),
                 tag_bits: int = 64) -> None:
        """``entries``: (key, order, expires), oldest first; a key given twice keeps its
        later place."""
        self.size = size
        self.floor = 0
        self.timed = False
        self._tagmask = -1 if tag_bits >= 64 else (1 << tag_bits) - 1
        self._live = 0
        capacity = _MIN_CAPACITY
        if isinstance(entries, (list, tuple)):  # a recovered window: laid out once
            while capacity <= len(entries):
                capacity *= 2
        self._lay_out(capacity)
        first = True
        for key, order, expires in entries:
            if first:
                self.floor = order
                first = False
            self.add(key, order, expires)

    def _lay_out(self, capacity: int) -> None:
        """Empty arrays for a ring of ``capacity`` places (a power of two)."""
        self._rmask = capacity - 1
        self._tmask = 2 * capacity - 1
        self._slots = _zeros(2 * capacity)  # per slot: the tag's high bits | the ring slot
        self._rtag = _zeros(capacity)
        self._rorder = _zeros(capacity)
        self._rexp = _zeros(capacity if self.timed else 1)
        self._rkeys: list[bytes | None] = _untracked([None] * capacity)
        self._tail = 0  # the oldest ring number not yet taken
        self._next = 0  # the next key's ring number

    def __len__(self) -> int:
        return self._live

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self._find(key, self._tag(key)) >= 0

    def _tag(self, key: bytes) -> int:
        return (hash(key) & self._tagmask) | _TOP

    def _probe(self, key: bytes, tag: int) -> int:
        """The table slot holding ``key``, else the empty slot that ends its probe run
        (where it would go)."""
        slots = self._slots
        mask = self._tmask
        rmask = self._rmask
        high = tag & ~rmask
        i = (tag >> _HOME_SHIFT) & mask
        while True:
            held = slots[i]
            if held == 0:
                return i
            if held & ~rmask == high and self._rkeys[held & rmask] == key:
                return i
            i = (i + 1) & mask

    def _find(self, key: bytes, tag: int) -> int:
        """The table slot holding ``key``, or -1."""
        i = self._probe(key, tag)
        return i if self._slots[i] != 0 else -1

    def seen(self, key: bytes, now: int) -> bool:
        """``key`` is in the window and not expired at ``now``."""
        i = self._find(key, self._tag(key))
        if i < 0:
            return False
        if not self.timed:
            return True
        expires = self._rexp[self._slots[i] & self._rmask]
        return expires == 0 or now < expires

    def add(self, key: bytes, order: int, expires: int) -> None:
        """Remember ``key`` at place ``order`` (above every other) until ``expires``,
        evicting the oldest key if the window is then over its size."""
        if self._next - self._tail > self._rmask:  # the ring is full: lay it out again
            self._grow()
        tag = self._tag(key)
        slots = self._slots
        rmask = self._rmask
        high = tag & ~rmask
        i = self._probe(key, tag)
        held = slots[i]
        ring = self._next
        self._next = ring + 1
        at = ring & rmask
        if held == 0:
            self._live += 1
        else:  # added again: its old place is left behind
            old = held & rmask
            self._rtag[old] = 0
            self._rkeys[old] = None
        slots[i] = high | at
        self._rtag[at] = tag
        self._rorder[at] = order
        self._rkeys[at] = key
        if expires and not self.timed:
            self.timed = True
            self._rexp = _zeros(rmask + 1)
        if self.timed:
            self._rexp[at] = expires
        if self._live > self.size:
            self._evict()

    def _evict(self) -> None:
        """Take out the oldest key held, skipping places left behind."""
        rtag = self._rtag
        rmask = self._rmask
        while True:
            ring = self._tail
            self._tail = ring + 1
            at = ring & rmask
            tag = rtag[at]
            if tag != 0:
                break
        slots = self._slots
        mask = self._tmask
        held = (tag & ~rmask) | at
        i = (tag >> _HOME_SHIFT) & mask
        while slots[i] != held:
            i = (i + 1) & mask
        self._delete(i)
        self.floor = self._rorder[at] + 1
        rtag[at] = 0
        self._rkeys[at] = None  # the key's bytes are freed here
        self._live -= 1

    def _delete(self, i: int) -> None:
        """Empty table slot ``i``, shifting back the entries after it that may move."""
        slots = self._slots
        mask = self._tmask
        j = i
        while True:
            j = (j + 1) & mask
            held = slots[j]
            if held == 0:
                break
            home = (held >> _HOME_SHIFT) & mask
            # The entry at j stays if its home is cyclically in (i, j]; else it moves to i.
            if (home <= i or home > j) if j > i else (home <= i and home > j):
                slots[i] = held
                i = j
        slots[i] = 0

    def _grow(self) -> None:
        """A full ring laid out again with only its live places: the same size if at
        least half of it was left behind, else twice as large."""
        capacity = self._rmask + 1
        self._lay_out_again(2 * capacity if 2 * self._live > capacity else capacity)

    def _lay_out_again(self, capacity: int) -> None:
        """The live places, oldest first, into new arrays for ``capacity`` places, copied
        from the old ones as they go (no list of them all: a window turns over millions)."""
        rtag, rorder, rexp, rkeys = self._rtag, self._rorder, self._rexp, self._rkeys
        old_mask = self._rmask
        first, end = self._tail, self._next
        self._lay_out(capacity)
        slots = self._slots
        mask = self._tmask
        rmask = self._rmask
        timed = self.timed
        ring = 0
        for old in range(first, end):
            at = old & old_mask
            tag = rtag[at]
            if tag == 0:
                continue
            i = (tag >> _HOME_SHIFT) & mask
            while slots[i] != 0:
                i = (i + 1) & mask
            slots[i] = (tag & ~rmask) | ring
            self._rtag[ring] = tag
            self._rorder[ring] = rorder[at]
            self._rkeys[ring] = rkeys[at]
            if timed:
                self._rexp[ring] = rexp[at]
            ring += 1
        self._next = ring

    def _held(self) -> list[tuple[int, int, bytes, int]]:
        """(tag, order, key, expires) of each live place, oldest first."""
        rmask = self._rmask
        timed = self.timed
        held = []
        for ring in range(self._tail, self._next):
            at = ring & rmask
            tag = self._rtag[at]
            if tag != 0:
                key = self._rkeys[at]
                assert key is not None
                held.append((tag, self._rorder[at], key, self._rexp[at] if timed else 0))
        return held

    def discard(self, key: bytes) -> bool:
        i = self._find(key, self._tag(key))
        if i < 0:
            return False
        at = self._slots[i] & self._rmask
        self._rtag[at] = 0
        self._rkeys[at] = None
        self._delete(i)
        self._live -= 1
        return True

    def items(self) -> list[tuple[bytes, int, int]]:
        """(key, order, expires), oldest first."""
        return [(key, order, expires) for _, order, key, expires in self._held()]

    def resize(self, size: int) -> int:
        """A new size (a recovered window whose definition changed); returns how many of
        the oldest keys it evicted."""
        self.size = size
        evicted = 0
        while self._live > size:
            self._evict()
            evicted += 1
        return evicted
