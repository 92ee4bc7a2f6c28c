"""The ready store of a priority queue (``x-max-priority``): featured, ordered by priority.

Theory of operation
-------------------
A ``FeaturedStore`` (TTL and limits apply to priority queues too) whose
entries all live in one heap ordered by (priority descending, sequence
ascending), see ``priority.py``: the fresh deque stays empty. A requeued entry
keeps its sequence number and priority, hence its place. As LavinMQ's
``PriorityQueue``, it is chosen once, when the queue is created (the maximum
priority is an argument, policies cannot change it).
"""

from __future__ import annotations

import heapq

from leveret.model.message import Message
from leveret.queues.entry import PriorityEntry, QueueEntry
from leveret.queues.featured_store import FeaturedStore


class PriorityStore(FeaturedStore):
    __slots__ = ()
    paged = False  # priority order is not the tail's sequence order: all in memory

    def _new_entry(self, seq: int, message: Message) -> QueueEntry:
        return PriorityEntry(seq, message, self._owner.settings.max_priority or 0)

    def _push(self, entry: QueueEntry, requeued: bool) -> None:
        self.bytes += len(entry.message.body)
        heapq.heappush(self.returned, entry)
