"""What a deleted queue's store keeps in place of the queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.model.message import Message
    from leveret.queues.entry import QueueEntry
    from leveret.queues.host import QueueLog
    from leveret.queues.ready import Owner


class DeletedOwner:
    """What a deleted queue's store and tails keep instead of the queue (``ReadyStore.close``).

    A store refers to its queue and the queue to its store: a cycle that only the cycle
    collector frees, and the serving broker runs its older generations rarely
    (``server.GC_THRESHOLD``), so churned queues (RPC reply queues) would pile up in memory
    until then. A deleted queue's store is empty and only late calls reach it (an ack of a
    delivery taken from it, a timer); this stand-in has the queue's settings and clock, no
    disk log, and nothing to wake, dead-letter or record, so those calls change nothing.
    """

    __slots__ = ("qid", "settings", "time")
    log: QueueLog | None = None
    page_high = 0
    deleted = True

    def __init__(self, queue: Owner) -> None:
        self.qid = queue.qid
        self.settings = queue.settings
        self.time = queue.time

    def drop(self, entry: QueueEntry, reason: str) -> None:
        pass

    def refuse(self, message: Message) -> None:
        pass

    def written(self, seq: int) -> None:
        pass

    def needs_expiry(self) -> None:
        pass

    def wake(self) -> None:
        pass
