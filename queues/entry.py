"""A message's place in one queue, and the outcome of offering a message to a queue.

``QueueEntry`` is what the ready stores hold and what a channel keeps while a
delivery is unacked: the message (shared by every queue it was routed to, never
copied), the queue-local sequence number that fixes its order, its delivery
count (> 0 means redelivered), whether the store holds a copy that must be
removed when it is settled, its expiry (``ttl.py``) and the consumer holding it
(so that settling it can give that consumer its credit back in O(1)).

``PublishResult`` is LavinMQ's enum of the same name: what ``Queue.publish``
tells the channel about the publisher's confirm.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from leveret.queues import priority

if TYPE_CHECKING:
    from leveret.model.message import Message


class PublishResult(enum.Enum):
    ACCEPTED = 0  # in memory only: the confirm may go at once
    HELD = 1  # a durable write was recorded: the confirm waits for its commit
    REFUSED = 2  # reject-publish overflow (limits.py): the publisher gets a nack


class QueueEntry:
    """A message's place in one queue; ``delivery_count`` > 0 means redelivered."""

    __slots__ = ("delivered_at", "delivery_count", "expires_at", "holder", "message", "seq",
                 "stored")
    # Set by the channel when delivered for a manual ack (the clock of its connection, in
    # seconds): how long a delivery has been held. Unset until then (read with getattr).
    delivered_at: float

    def __init__(self, seq: int, message: Message) -> None:
        self.seq = seq
        self.message = message
        self.delivery_count = 0
        self.stored = False  # has an entry in the store that must be removed when settled
        self.expires_at: int | None = None  # wall-clock ms (ttl.py)
        self.holder: Any = None  # the consumer it was last delivered to

    def __lt__(self, other: QueueEntry) -> bool:
        return self.seq < other.seq


class PriorityEntry(QueueEntry):
    """An entry of a priority queue: heap order is priority first (``priority.py``)."""

    __slots__ = ("priority",)

    def __init__(self, seq: int, message: Message, max_priority: int) -> None:
        super().__init__(seq, message)
        self.priority = priority.effective_priority(message.priority, max_priority)

    __lt__ = priority.higher_first  # type: ignore[assignment]
