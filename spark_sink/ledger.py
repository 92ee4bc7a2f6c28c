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

No I/O here: plain values in, plain values out, unit-tested without a broker.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

T = TypeVar("T")


class Ledger(Generic[T]):
    def __init__(self) -> None:
        self._held: OrderedDict[int, tuple[int, T]] = OrderedDict()  # seq -> (tag, message)
        self.next_seq: int | None = None  # None until the first offset is known

    def catch_up(self, seq: int) -> None:
        """Spark's offsets reached ``seq``: numbering resumes there at the earliest."""
        if self.next_seq is None or self.next_seq < seq:
            self.next_seq = seq

    def add(self, delivery_tag: int, message: T) -> int:
        assert self.next_seq is not None, "catch_up() before add()"
        seq = self.next_seq
        self._held[seq] = (delivery_tag, message)
        self.next_seq = seq + 1
        return seq

    def skip_to(self, seq: int) -> None:
        """Numbers below ``seq`` that no message filled stay empty (a short replayed batch)."""
        self.catch_up(seq)

    def between(self, start: int, end: int) -> list[tuple[int, T]]:
        """Held messages with start <= seq < end, in order."""
        return [(seq, msg) for seq, (_tag, msg) in self._held.items() if start <= seq < end]

    def release_below(self, seq: int) -> int | None:
        """Forget messages below ``seq``; returns the delivery tag to ack (multiple) or None."""
        tag = None
        while self._held:
            first = next(iter(self._held))
            if first >= seq:
                break
            tag = self._held.popitem(last=False)[1][0]
        return tag

    @property
    def held(self) -> int:
        return len(self._held)

    def available_from(self, start: int) -> int:
        """Messages held at or above ``start``."""
        if self.next_seq is None:
            return 0
        return max(0, self.next_seq - start)

    def first_seq(self) -> int | None:
        return next(iter(self._held), None)
