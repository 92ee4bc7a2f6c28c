"""Server-side offset tracking for stream consumers (consumer argument
``x-stream-offset-tracking: true``).

RabbitMQ keeps no offset for 0-9-1 stream consumers (its stream protocol has
StoreOffset; 0-9-1 clients must keep their own): after a reconnect a consumer
starts wherever its ``x-stream-offset`` says. LavinMQ tracks one, but stores the
consumer's *read position*, so messages delivered and never acked before a
crash are skipped on resume. Leveret stores, per stream and consumer tag, the
**highest contiguously settled offset**: every delivery up to it was acked (or
rejected without requeue), so the consumer resumes right after it and gets
again whatever it had not settled. A nack with requeue, or a delivery still
unacked when its channel closes, does not settle: it comes again on resume.

A consumer with a stored offset resumes there whatever its ``x-stream-offset``
says; without one (its first run) ``x-stream-offset`` applies.

``AckWindow`` is the pure part; the record (``RECORD_KIND``, keyed by vhost,
stream and consumer tag) is written through the group commit as one of the
broker's access-style records, at most once per commit batch per consumer.
"""

from __future__ import annotations

from collections import deque

RECORD_KIND = "stream_offset"
ARGUMENT = "x-stream-offset-tracking"


class AckWindow:
    """Deliveries of one consumer in offset order, and the highest offset below which
    every delivery was settled (``floor``; -1 before any)."""

    __slots__ = ("_pending", "_settled", "floor")

    def __init__(self, floor: int = -1) -> None:
        self.floor = floor
        self._pending: deque[int] = deque()  # delivered, in increasing offset order
        self._settled: set[int] = set()  # settled ahead of an unsettled one

    def delivered(self, offset: int) -> None:
        self._pending.append(offset)

    def settled(self, offset: int) -> bool:
        """``offset`` was acked or rejected for good; True if ``floor`` moved."""
        pending = self._pending
        if not pending or offset < pending[0]:
            return False
        if offset != pending[0]:
            self._settled.add(offset)
            return False
        pending.popleft()
        self.floor = offset
        settled = self._settled
        while pending and pending[0] in settled:
            self.floor = pending.popleft()
            settled.discard(self.floor)
        return True

    def skipped(self, offset: int) -> None:
        """The reader stepped over ``offset`` (filtered out, or before a timestamp): with
        nothing delivered pending, it counts as settled."""
        if not self._pending and offset > self.floor:
            self.floor = offset


def record_key(vhost: str, stream: str, tag: str) -> tuple[str, ...]:
    return (vhost, stream, tag)
