"""Which delivered messages belong to which offsets, and which may be acked.

Theory of operation
-------------------
The streaming source's offset is ``{"seq": n}``: "every message numbered
below n". The driver-side reader numbers deliveries in arrival order
(``seq``), so delivery tags rise with seq and "ack everything below seq n" is
one ``basic.ack(multiple=true)`` with the tag of the last message below n.

Numbering continues from the checkpoint: a reader started on an existing
checkpoint learns the committed position from the first offset Spark hands it
(``catch_up``). After a crash the broker requeues everything unacked and the
new reader numbers the redelivered messages from there, so a batch Spark
replays from its offset log is refilled with whatever the queue delivers first
(the requeued messages): at-least-once, never a gap in the numbers.

The driver is one Python process for the whole stream, so the ledger is
columns (seqs, tags, messages as lists) and works on ranges: a drain adds
its deliveries with one ``extend``, a batch is two slices, an ack one
``del`` of a prefix, all in C, where a dict of pairs cost a Python step per
message in each.

No I/O here: plain values in, plain values out, unit-tested without a broker.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection
from typing import Generic, TypeVar

T = TypeVar("T")


class Ledger(Generic[T]):
    def __init__(self) -> None:
        # Held messages by column, in seq order. Seqs ascend by one except where
        # ``skip_to`` left a gap, so positions are found by bisection.
        self._seqs: list[int] = []
        self._tags: list[int] = []
        self._messages: list[T] = []
        self.next_seq: int | None = None  # None until the first offset is known

    def catch_up(self, seq: int) -> None:
        """Spark's offsets reached ``seq``: numbering resumes there at the earliest."""
        if self.next_seq is None or self.next_seq < seq:
            self.next_seq = seq

    def add(self, delivery_tag: int, message: T) -> int:
        """Number one delivery; returns its seq."""
        return self.extend(((delivery_tag, message),))

    def extend(self, deliveries: Collection[tuple[int, T]]) -> int:
        """Number each (delivery tag, message) in order; returns the last seq given."""
        assert self.next_seq is not None, "catch_up() before add()"
        assert deliveries, "nothing to add"
        tags, messages = zip(*deliveries)
        seq = self.next_seq
        self.next_seq = end = seq + len(tags)
        self._seqs.extend(range(seq, end))
        self._tags.extend(tags)
        self._messages.extend(messages)
        return end - 1

    def skip_to(self, seq: int) -> None:
        """Numbers below ``seq`` that no message filled stay empty (a short replayed batch)."""
        self.catch_up(seq)

    def between(self, start: int, end: int) -> tuple[list[int], list[T]]:
        """The seqs and messages held with start <= seq < end, in order."""
        lo, hi = bisect_left(self._seqs, start), bisect_left(self._seqs, end)
        return self._seqs[lo:hi], self._messages[lo:hi]

    def release_below(self, seq: int) -> int | None:
        """Forget messages below ``seq``; returns the delivery tag to ack (multiple) or None."""
        n = bisect_left(self._seqs, seq)
        if not n:
            return None
        tag = self._tags[n - 1]
        del self._seqs[:n], self._tags[:n], self._messages[:n]
        return tag

    @property
    def held(self) -> int:
        return len(self._seqs)

    def available_from(self, start: int) -> int:
        """Messages held at or above ``start``."""
        if self.next_seq is None:
            return 0
        return max(0, self.next_seq - start)

    def first_seq(self) -> int | None:
        return self._seqs[0] if self._seqs else None
