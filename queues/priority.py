"""Priority queues: ``x-max-priority`` (1-255).

Theory of operation
-------------------
A message's priority is its ``priority`` property (0 when absent) clamped to
the queue's maximum. RabbitMQ's classic priority queue keeps one sub-queue per
priority and always serves the highest non-empty one; within a priority,
publication order, and a requeued message goes back to its original place
among its priority's messages.

Leveret gets the same order from one heap of entries ordered by (priority
descending, sequence ascending): the queue's ``_returned`` heap, which then
holds every ready entry (the fresh-entry deque stays empty). A requeued entry
keeps its sequence number and priority, hence its place.

A durable priority queue pages its backlog one tail per level, as RabbitMQ's
keeps one backing queue per priority (``priority_store.py``).
"""

from __future__ import annotations

from typing import Any


def effective_priority(priority: int, max_priority: int) -> int:
    """The sub-queue a message goes to: its priority clamped to ``max_priority``."""
    return min(max_priority, priority)


def higher_first(self: Any, other: Any) -> bool:
    """``__lt__`` for heap entries: higher priority first, then older first."""
    if self.priority != other.priority:
        return bool(self.priority > other.priority)
    return bool(self.seq < other.seq)
