# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""An exchange's deduplication window: the keys seen, in FIFO order, in flat arrays.

Theory of operation
-------------------
A full window takes a key and evicts its oldest on every publish, so at a million keys what
costs is memory, not instructions: a dict of key -> place, a FIFO list and an int object per
key missed the last-level cache about 29 times a publish (``bench/dedupe_misses.py``), in
the dict's periodic rebuilds (deletions use up its entries), the list's regrowth and cuts,
and each evicted key's dict entry and int. Keeping each key as its own ``bytes`` object
cost too: freeing an evicted key touched memory unused for a million publishes, and every
small allocation after it on the publish path reused such cold blocks. Here nothing is
rebuilt while the window turns over, no object is kept a key, and the cold memory a
publish touches is one table slot for the new key and one for the evicted one (fetched
a publish ahead: ``add`` asks for the next eviction's):

* the **table**: open addressing over one flat array of 64-bit words, linear probing,
  ``2 * capacity`` slots (at most half full; 16 MB at a million keys): each word the high
  bits of the key's tag (its hash) and its ring slot (0 is an empty slot; a ring holds at
  most 2**32 places). A deletion shifts the entries after it back (no tombstones, so no
  rebuild as keys come and go). A tag match is confirmed against the key itself before it
  counts as the key: never a false duplicate, and the key's bytes are read only on a match.
* the **ring**: ``capacity`` places in FIFO order (a ring number grows by one per add; its
  slot is the number modulo the capacity): each place's tag (to find the evicted key's
  table slot without touching the key), its place in the window (``order``, what the store
  knows it by), where its key's bytes are and, once some key expires, its expiry. Read and
  written in order, so they stay cached. A key added again, or discarded, leaves its old
  place behind (tag 0), skipped by eviction; when the ring is full of live and left-behind
  places, it is laid out again, twice as large if more than half of it is live (amortised,
  as a list's growth).
* the **arena**: the keys' bytes, back to back in ring order in one ``bytearray`` used as a
  circular buffer (a key never wraps: one that would is put at the next lap's start). What
  is in use runs from the oldest place's key to the newest, so eviction frees bytes by
  moving on; when a key does not fit, the ring and the arena are laid out again with only
  the live keys, the arena twice as large if they would fill more than half of it.

Eviction is exact FIFO at ``size``; TTL expiry is judged on lookup (an expired key is absent
whether or not it was evicted). It is a pure structure (times passed in, wall-clock ms),
tested against a naive model; what is durable is ``broker/dedupe.py``'s. ``floor``: every
place below it was evicted (a lower bound: a key taken out of the middle may leave it below
the oldest place held), moved past each evicted key's place as it goes.

Compiled (``dedupe_window.pxd``) the arrays are typed memoryviews read as C arrays, keys are
copied and compared byte by byte through pointers, and the evicted slot's fetch is a CPU
prefetch; pure, the same lines index ``array.array``s (or memoryviews) and slice the arena.
The per-publish methods index ``self._slots`` rather than a local alias: compiled, each
typed-memoryview local costs a locked increment and decrement of the view's count, and a
locked instruction waits for the cache misses before it. Arrays of 2 MB and more are
anonymous mappings advised to use huge pages (``_zeros``): the table is read at random,
and with 4 KB pages each such read also walks the page tables.
"""

from __future__ import annotations

import mmap
from array import array
from collections.abc import Iterable

try:  # Compiled, ``cython.compiled`` is true at compile time; pure, Cython's shadow says False.
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

_MIN_CAPACITY = 8  # places in a new window's ring (it grows as keys come)
_MIN_ARENA = 256  # bytes in a new window's arena
# A table slot is one 64-bit word: the key's tag with its low bits replaced by the key's
# ring slot (a ring of at most 2**32 places). Its home slot is read from bits 32 and up,
# which the ring slot never reaches, so the word alone says where it belongs; bit 62 is
# set in every tag, so no word is 0 (an empty slot).
_HOME_SHIFT = 32
_TOP = 1 << 62
# A ring place's key: its first byte's offset in the arena (counted from the window's
# first key, never reset but by a new layout) shifted past its length.
_LENGTH_BITS = 16
_LENGTH_MASK = (1 << _LENGTH_BITS) - 1
# Offsets count every byte written since the last layout, so they only grow: past this one
# (2**46 bytes, years of publishing at a million keys a second) the next key lays the window
# out again, which starts them from 0, before ``offset << 16`` could leave 63 bits.
_MAX_OFFSET = 1 << 46


# Arrays this large (the table from a ring of 128k places, each ring array from 256k) get
# their own mapping, which the kernel is asked to back with huge pages.
_HUGE = 2 << 20


def _zeros(n: int) -> array[int] | memoryview:
    """``n`` zeroed 64-bit words. A large one is an anonymous private mapping advised
    ``MADV_HUGEPAGE`` (a no-op where transparent huge pages are off or unsupported; private:
    a shared one would follow the shmem setting, most often off): a million keys' table is
    16 MB read at random, two slots a publish, and with 4 KB pages each of those reads also
    walks the page tables (``bench/dedupe_misses.py`` counts the cache misses, not the walks)."""
    size = 8 * n
    if size >= _HUGE and hasattr(mmap, "MAP_PRIVATE"):
        mem = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            mem.madvise(mmap.MADV_HUGEPAGE)
        return memoryview(mem).cast("q")  # (the view keeps the mapping; freed with it)
    return array("q", bytes(size))


class Window:
    """Keys seen, each with its place in the window (``order``, increasing) and, if it
    has one, its expiry (wall-clock ms). ``timed``: some key was added with an expiry, so
    ``seen`` needs the time (until then, callers may pass 0). ``tag_bits`` narrows the
    tags (tests: to make keys share them). Keys are at most 65,535 bytes."""

    __slots__ = ("_ahead", "_amask", "_arena", "_hint", "_hint_at", "_hint_tag", "_live",
                 "_next", "_rexp", "_rkey", "_rmask", "_rorder", "_rtag", "_slots", "_tagmask",
                 "_tail", "_tmask", "floor", "size", "timed")

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
        arena = _MIN_ARENA
        if isinstance(entries, (list, tuple)):  # a recovered window: laid out once
            while capacity <= len(entries):
                capacity *= 2
            held = sum(len(key) for key, _, _ in entries[-size:]) if size > 0 else 0
            while arena < 2 * held:
                arena *= 2
        self._lay_out(capacity, arena)
        first = True
        for key, order, expires in entries:
            if first:
                self.floor = order
                first = False
            self.add(key, order, expires)

    def _lay_out(self, capacity: int, arena: int) -> None:
        """Empty arrays for a ring of ``capacity`` places and an arena of ``arena`` bytes
        (powers of two)."""
        self._rmask = capacity - 1
        self._tmask = 2 * capacity - 1
        self._slots = _zeros(2 * capacity)  # per slot: the tag's high bits | the ring slot
        self._rtag = _zeros(capacity)
        self._rorder = _zeros(capacity)
        self._rkey = _zeros(capacity)  # per place: its key's offset << 16 | its length
        self._rexp = _zeros(capacity if self.timed else 1)
        self._arena = bytearray(arena)
        self._amask = arena - 1
        self._ahead = 0  # the arena offset of the next key's first byte
        self._tail = 0  # the oldest ring number not yet taken
        self._next = 0  # the next key's ring number
        # The key ``seen`` last found absent, its tag and the empty slot its probe ended
        # at: ``add`` of that key right after (a publish's check, then its admit) puts it
        # there without hashing and probing again. Any change to the table forgets it.
        self._hint: bytes | None = None
        self._hint_at = 0
        self._hint_tag = 0

    def __len__(self) -> int:
        return self._live

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self._find(key, self._tag(key)) >= 0

    def _tag(self, key: bytes) -> int:
        return (hash(key) & self._tagmask) | _TOP

    def _is(self, at: int, key: bytes) -> bool:
        """Ring slot ``at`` holds ``key`` (its bytes, compared in the arena)."""
        word = self._rkey[at]
        n = word & _LENGTH_MASK
        if n != len(key):
            return False
        pos = (word >> _LENGTH_BITS) & self._amask
        if COMPILED:  # through the pointers (libc, cimported by the .pxd): no slice object
            a = self._arena
            k = key
            same = memcmp(a + pos, k, n) == 0  # type: ignore[name-defined,operator]  # noqa: F821
            return bool(same)
        return self._arena.startswith(key, pos)  # the same length: the same bytes, no slice

    def _probe(self, key: bytes, tag: int) -> int:
        """The table slot holding ``key``, else the empty slot that ends its probe run
        (where it would go)."""
        mask = self._tmask
        rmask = self._rmask
        high = tag & ~rmask
        i = (tag >> _HOME_SHIFT) & mask
        while True:
            held = self._slots[i]
            if held == 0:
                return i
            if held & ~rmask == high and self._is(held & rmask, key):
                return i
            i = (i + 1) & mask

    def _find(self, key: bytes, tag: int) -> int:
        """The table slot holding ``key``, or -1."""
        i = self._probe(key, tag)
        return i if self._slots[i] != 0 else -1

    def expect(self, key: bytes) -> None:
        """``seen(key)`` comes soon (the message is routed in between): compiled, the CPU
        fetches the key's home slot meanwhile, and ``key`` keeps its hash for ``seen``.
        Pure, nothing to gain."""
        if COMPILED:
            _prefetch(  # type: ignore[name-defined]  # noqa: F821
                cython.address(self._slots[(self._tag(key) >> _HOME_SHIFT) & self._tmask]))

    def seen(self, key: bytes, now: int) -> bool:
        """``key`` is in the window and not expired at ``now``."""
        tag = self._tag(key)
        i = self._probe(key, tag)
        held = self._slots[i]
        if held == 0:  # absent: where ``add`` will put it
            self._hint = key
            self._hint_at = i
            self._hint_tag = tag
            return False
        if not self.timed:
            return True
        expires = self._rexp[held & self._rmask]
        return expires == 0 or now < expires

    def add(self, key: bytes, order: int, expires: int) -> None:
        """Remember ``key`` at place ``order`` (above every other) until ``expires``,
        evicting the oldest key if the window is then over its size."""
        n = len(key)
        if n > _LENGTH_MASK:
            raise ValueError(f"a window's key is at most {_LENGTH_MASK} bytes, not {n}")
        if self._next - self._tail > self._rmask:  # the ring is full: lay it out again
            self._grow()
        start = self._room(n)
        rmask = self._rmask
        if key is self._hint:  # just found absent by ``seen``, the table unchanged since
            tag = self._hint_tag
            i = self._hint_at
        else:
            tag = self._tag(key)
            i = self._probe(key, tag)
        self._hint = None
        high = tag & ~rmask
        held = self._slots[i]
        ring = self._next
        self._next = ring + 1
        at = ring & rmask
        if held == 0:
            self._live += 1
        else:  # added again: its old place is left behind
            self._rtag[held & rmask] = 0
        self._slots[i] = high | at
        self._rtag[at] = tag
        self._rorder[at] = order
        self._rkey[at] = (start << _LENGTH_BITS) | n
        pos = start & self._amask
        if COMPILED:  # through the pointers (libc, cimported by the .pxd)
            a = self._arena
            k = key
            memcpy(a + pos, k, n)  # type: ignore[name-defined,operator]  # noqa: F821
        else:
            self._arena[pos:pos + n] = key
        if expires and not self.timed:
            self.timed = True
            self._rexp = _zeros(rmask + 1)
        if self.timed:
            self._rexp[at] = expires
        if self._live > self.size:
            self._evict()
        # Compiled, a full window has the CPU fetch the table slot the next add's eviction
        # will empty: a whole publish later, it is in cache (asked for in ``seen``, right
        # before this add, it was still on its way).
        if COMPILED and self._live >= self.size:
            tag = self._rtag[self._tail & self._rmask]
            if tag != 0:
                # (a C extern of dedupe_window.pxd: the pure build never gets here)
                _prefetch(  # type: ignore[name-defined]  # noqa: F821
                    cython.address(self._slots[(tag >> _HOME_SHIFT) & self._tmask]))

    def _room(self, n: int) -> int:
        """The arena offset for the next key, of ``n`` bytes (after the newest key, or at
        the next lap's start if it would wrap), the arena laid out again first if it is
        full."""
        start = self._ahead
        size = self._amask + 1
        pos = start & self._amask
        if pos + n > size:  # it would wrap: the rest of this lap is left unused
            start += size - pos
        oldest = (self._rkey[self._tail & self._rmask] >> _LENGTH_BITS
                  if self._tail < self._next else start)
        if start + n - oldest > size or start >= _MAX_OFFSET:
            # Laid out again from offset 0 with room for twice the live keys and this one,
            # so it goes right after them, whole.
            held = self._live_bytes() + n
            while 2 * held > size:
                size *= 2
            self._lay_out_again(self._rmask + 1, size)
            start = self._ahead
        self._ahead = start + n
        return start

    def _live_bytes(self) -> int:
        total = 0
        rmask = self._rmask
        for ring in range(self._tail, self._next):
            at = ring & rmask
            if self._rtag[at] != 0:
                total += self._rkey[at] & _LENGTH_MASK
        return total

    def _evict(self) -> None:
        """Take out the oldest key held, skipping places left behind (its bytes stay in
        the arena until the next key's lap reaches them)."""
        rmask = self._rmask
        while True:
            ring = self._tail
            self._tail = ring + 1
            at = ring & rmask
            tag = self._rtag[at]
            if tag != 0:
                break
        mask = self._tmask
        held = (tag & ~rmask) | at
        i = (tag >> _HOME_SHIFT) & mask
        while self._slots[i] != held:
            i = (i + 1) & mask
        self._delete(i)
        self.floor = self._rorder[at] + 1
        self._rtag[at] = 0
        self._live -= 1

    def _delete(self, i: int) -> None:
        """Empty table slot ``i``, shifting back the entries after it that may move."""
        self._hint = None
        mask = self._tmask
        j = i
        while True:
            j = (j + 1) & mask
            held = self._slots[j]
            if held == 0:
                break
            home = (held >> _HOME_SHIFT) & mask
            # The entry at j stays if its home is cyclically in (i, j]; else it moves to i.
            if (home <= i or home > j) if j > i else (home <= i and home > j):
                self._slots[i] = held
                i = j
        self._slots[i] = 0

    def _grow(self) -> None:
        """A full ring laid out again with only its live places: the same size if at
        least half of it was left behind, else twice as large."""
        capacity = self._rmask + 1
        self._lay_out_again(2 * capacity if 2 * self._live > capacity else capacity,
                            self._amask + 1)

    def _lay_out_again(self, capacity: int, arena: int) -> None:
        """The live places, oldest first, into new arrays for ``capacity`` places and an
        arena of ``arena`` bytes (room for the live keys), copied from the old ones as they
        go (no list of them all: a window turns over millions)."""
        rtag, rorder, rexp, rkey = self._rtag, self._rorder, self._rexp, self._rkey
        old_arena, old_amask = self._arena, self._amask
        old_mask = self._rmask
        first, end = self._tail, self._next
        self._lay_out(capacity, arena)
        slots = self._slots
        mask = self._tmask
        rmask = self._rmask
        timed = self.timed
        ring = 0
        ahead = 0
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
            word = rkey[at]
            n = word & _LENGTH_MASK
            pos = (word >> _LENGTH_BITS) & old_amask
            self._arena[ahead:ahead + n] = old_arena[pos:pos + n]
            self._rkey[ring] = (ahead << _LENGTH_BITS) | n
            ahead += n
            if timed:
                self._rexp[ring] = rexp[at]
            ring += 1
        self._next = ring
        self._ahead = ahead

    def _key(self, at: int) -> bytes:
        word = self._rkey[at]
        pos = (word >> _LENGTH_BITS) & self._amask
        return bytes(self._arena[pos:pos + (word & _LENGTH_MASK)])

    def _held(self) -> list[tuple[int, int, bytes, int]]:
        """(tag, order, key, expires) of each live place, oldest first."""
        rmask = self._rmask
        timed = self.timed
        held = []
        for ring in range(self._tail, self._next):
            at = ring & rmask
            tag = self._rtag[at]
            if tag != 0:
                held.append((tag, self._rorder[at], self._key(at),
                             self._rexp[at] if timed else 0))
        return held

    def discard(self, key: bytes) -> bool:
        i = self._find(key, self._tag(key))
        if i < 0:
            return False
        self._rtag[self._slots[i] & self._rmask] = 0
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
