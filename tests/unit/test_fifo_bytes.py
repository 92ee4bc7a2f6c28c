"""``FifoBytes`` (queues/fifo_bytes.py) against a plain sum, whatever mix of appends, pops
from the left, counts and invalidated changes (hypothesis), and what a count walks."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.model.message import Message
from leveret.queues import fifo_bytes
from leveret.queues.entry import QueueEntry
from leveret.queues.fifo_bytes import FifoBytes

STEP = 4


@pytest.fixture(autouse=True)
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fifo_bytes, "STEP", STEP)


def _entry(seq: int, size: int) -> QueueEntry:
    return QueueEntry(seq, Message("", "q", b"", b"x" * size))


def _sum(fresh: deque[QueueEntry]) -> int:
    return sum(len(e.message.body) for e in fresh)


class _Counted(deque[QueueEntry]):
    """A deque that counts the entries iterated (from either end)."""

    walked = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for entry in super().__iter__():
            _Counted.walked += 1
            yield entry

    def __reversed__(self):  # type: ignore[no-untyped-def]
        for entry in super().__reversed__():
            _Counted.walked += 1
            yield entry


OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 12), st.integers(0, 30)),
    st.tuples(st.just("pop"), st.integers(1, 15), st.just(0)),
    st.tuples(st.just("count"), st.just(0), st.just(0)),
    st.tuples(st.just("take"), st.integers(0, 40), st.just(0)),  # from the middle: new deque
    st.tuples(st.just("purge"), st.just(0), st.just(0)),  # clears the same deque
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_counts_equal_a_plain_sum(ops: list[tuple[str, int, int]]) -> None:
    """Exact always; and after appends and pops only, a count walks the appended entries
    and at most STEP from the head (plus one at each end), however deep the deque."""
    fresh = _Counted()
    sized = FifoBytes()
    seq = appended = 0
    invalidated = True
    for op, n, size in ops:
        if op == "append":
            for i in range(n):
                fresh.append(_entry(seq, (size * (i + 1)) % 37))
                seq += 1
            appended += n
        elif op == "pop":
            for _ in range(min(n, len(fresh))):
                fresh.popleft()
        elif op == "take" and fresh:
            victim = fresh[n % len(fresh)].seq
            fresh = _Counted(e for e in fresh if e.seq != victim)  # as plain_store.take
            sized.invalidate()
            invalidated = True
        elif op == "purge":
            fresh.clear()
            sized.invalidate()
            invalidated = True
        expected = _sum(fresh)
        _Counted.walked = 0
        assert sized.count(fresh) == expected
        if not invalidated:
            assert _Counted.walked <= appended + STEP + 2
        invalidated, appended = False, 0


def test_a_repeated_count_walks_what_changed_not_the_depth(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fifo_bytes, "STEP", 64)
    fresh = _Counted(_entry(seq, seq % 100) for seq in range(10_000))
    sized = FifoBytes()
    assert sized.count(fresh) == _sum(fresh)
    _Counted.walked = 0
    for seq in range(10_000, 10_050):
        fresh.append(_entry(seq, 7))
    for _ in range(30):
        fresh.popleft()
    expected = _sum(fresh)
    _Counted.walked = 0
    assert sized.count(fresh) == expected
    assert _Counted.walked <= 50 + 1 + 64 + 1  # the appended ones, and the head to a mark
