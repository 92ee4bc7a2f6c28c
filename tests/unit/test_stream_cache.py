"""The stream's shared pages alone: what a read costs, what eviction keeps."""

from __future__ import annotations

from leveret.model.message import Message
from leveret.persistence.store import StoredEntry
from leveret.queues.stream_cache import FRAMES_OVERHEAD, PAGE, PageCache

BODY = b"x" * 100
# Its body and properties (an x-stream-offset header, 31 bytes), and their encoded frames.
ENTRY = 2 * (len(BODY) + 31) + FRAMES_OVERHEAD


def log(end: int) -> tuple[list[tuple[int, int]], PageCache, list[int]]:
    """A log of ``end`` entries, the reads made of it, a cache over it and its readers."""
    reads: list[tuple[int, int]] = []
    readers: list[int] = []

    def read(position: int, limit: int) -> list[StoredEntry]:
        reads.append((position, limit))
        return [StoredEntry(seq, 0, Message("", "q", b"", BODY), 0)
                for seq in range(position, min(position + limit, end))]

    return reads, PageCache(read, lambda: readers, max_bytes=3 * PAGE * ENTRY), readers


def test_a_page_is_read_once_and_a_partly_written_one_extended_from_its_end() -> None:
    reads, cache, _ = log(1_000)
    got, after = cache.entries(5, 10, 100)  # ten committed: offsets 5..9
    assert ([e.seq for e in got], after) == (list(range(5, 10)), 10)
    got, after = cache.entries(10, 300, 3)
    assert ([e.seq for e in got], after) == ([10, 11, 12], 13)
    assert reads == [(0, 10), (10, PAGE - 10)]
    cache.entries(0, 300, 100)
    assert len(reads) == 2
    assert got[0].message.headers == {"x-stream-offset": 10}


def test_eviction_keeps_what_the_reader_behind_needs_next() -> None:
    reads, cache, readers = log(100 * PAGE)
    readers[:] = [PAGE, 2 * PAGE]  # a laggard at page 1, a leader at page 2
    for page in range(1, 8):  # the leader reads on; the cache holds three pages
        readers[1] = page * PAGE
        cache.entries(page * PAGE, 100 * PAGE, PAGE)
    assert cache.bytes <= cache.max_bytes
    before = len(reads)
    cache.entries(PAGE, 100 * PAGE, PAGE)  # the laggard's next page is still there
    cache.entries(2 * PAGE, 100 * PAGE, PAGE)
    assert len(reads) == before
    readers[0] = 8 * PAGE  # the laggard jumps ahead: pages 1 and 2 are nobody's to read
    cache.entries(8 * PAGE, 100 * PAGE, PAGE)
    cache.entries(9 * PAGE, 100 * PAGE, PAGE)
    before = len(reads)
    cache.entries(7 * PAGE, 100 * PAGE, PAGE)  # the leader's page went last
    assert len(reads) == before and cache.bytes <= cache.max_bytes
