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

``AckWindow`` is the pure part; ``TrackedOffsets`` keeps one stream's floors
and writes each as a record (``RECORD_KIND``, keyed by vhost, stream and
consumer tag) through the group commit, one of the broker's access-style
records, at most once per commit batch per consumer: later settles in the same
batch update the pending record in place.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from leveret.persistence.store import AccessDef

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


class OffsetLog(Protocol):
    """The group commit, as offset tracking records through it."""

    @property
    def batch(self) -> int: ...

    def put_definition(self, definition: AccessDef) -> None: ...

    def delete_access(self, kind: str, key: tuple[str, ...]) -> None: ...


class TrackedOffsets:
    """One stream's tracked consumers: each tag's settled floor, stored."""

    __slots__ = ("_pending", "floors", "stream", "vhost")

    def __init__(self, vhost: str, stream: str) -> None:
        self.vhost = vhost
        self.stream = stream
        self.floors: dict[str, int] = {}
        # The record pending in the current commit batch, per tag: (batch, record).
        self._pending: dict[str, tuple[int, dict[str, int]]] = {}

    def get(self, tag: str) -> int | None:
        return self.floors.get(tag)

    def restore(self, tag: str, floor: int) -> None:
        """A floor read back from the store at startup."""
        self.floors[tag] = floor

    def moved(self, tag: str, floor: int, log: OffsetLog | None) -> None:
        """``tag``'s floor moved to ``floor``: keep it, and store it unless ``log`` is None."""
        self.floors[tag] = floor
        if log is None:
            return
        pending = self._pending.get(tag)
        if pending is not None and pending[0] == log.batch:
            pending[1]["offset"] = floor  # still in the batch being recorded
            return
        record = {"offset": floor}
        self._pending[tag] = (log.batch, record)
        log.put_definition(AccessDef(RECORD_KIND, self.key(tag), record))

    def forget_all(self, log: OffsetLog | None) -> None:
        """The stream is deleted: its records go with it."""
        if log is not None:
            for tag in self.floors:
                log.delete_access(RECORD_KIND, self.key(tag))
        self.floors.clear()
        self._pending.clear()

    def key(self, tag: str) -> tuple[str, ...]:
        return record_key(self.vhost, self.stream, tag)
