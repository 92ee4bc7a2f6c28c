"""The consumers of one queue: priority order, round-robin, credit, single-active standby.

Theory of operation
-------------------
A pure data structure over anything with a ``priority`` (the queue's
consumers; plain values in the unit tests). It decides *who is next*, never
whether a consumer can take a message: the queue asks the consumer and tells
the ring what it found.

Active consumers are either *ready* (believed to have credit) or *parked*
(found without credit). Ready consumers sit in one ``OrderedDict`` per
priority level, levels highest first (``x-priority``); ``front()`` is the first
consumer of the highest non-empty level. After a delivery the queue calls
``rotate_front()``: the consumer moves behind its equal-priority peers, which
is RabbitMQ's round-robin. A consumer found without credit is parked
(``park_front()``) and leaves the rotation; ``unpark(c)`` puts it back at the
end of its level when its credit returns (an ack of one of its deliveries).
That is rabbit_queue_consumers' ``block_consumer`` / ``unblock``: unblocked
consumers rejoin behind the others (``priority_queue:join``).

Every operation the dispatch loop uses is O(1) (plus the number of priority
levels, normally one), whatever the number of consumers: delivering a message
to a queue with 1,000 consumers costs what it costs with one. Only
``unpark_all`` (credit may have changed anywhere: qos, channel flow, the
socket writable again) and ``members`` walk all of them.

Single active consumer: when ``add`` is told so and a consumer is already
active, the newcomer waits in ``standby`` (arrival order); when the last
active consumer is removed the longest-waiting one becomes active.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class HasPriority(Protocol):
    @property
    def priority(self) -> int: ...


C = TypeVar("C", bound=HasPriority)


class ConsumerRing(Generic[C]):
    __slots__ = ("_levels", "_keys", "_by_priority", "_members", "_parked", "_front_level",
                 "standby", "active")

    def __init__(self) -> None:
        self._levels: list[OrderedDict[C, None]] = []  # ready consumers, highest priority first
        self._keys: list[int] = []  # -priority of each level (ascending, for bisect)
        self._by_priority: dict[int, OrderedDict[C, None]] = {}
        self._members: dict[int, int] = {}  # priority -> active consumers (ready + parked)
        self._parked: dict[C, None] = {}
        self._front_level: OrderedDict[C, None] | None = None
        self.standby: list[C] = []
        self.active = 0  # ready + parked

    def __len__(self) -> int:
        return self.active

    # -- membership ----------------------------------------------------------------

    def add(self, consumer: C, single_active: bool = False) -> bool:
        """Register ``consumer``; False if it waits in standby (single active consumer)."""
        if single_active and self.active:
            self.standby.append(consumer)
            return False
        p = consumer.priority
        level = self._by_priority.get(p)
        if level is None:
            level = self._by_priority[p] = OrderedDict()
            i = bisect.bisect_left(self._keys, -p)
            self._keys.insert(i, -p)
            self._levels.insert(i, level)
            self._members[p] = 0
        level[consumer] = None
        self._members[p] += 1
        self.active += 1
        return True

    def remove(self, consumer: C) -> C | None:
        """Forget ``consumer``; returns a standby consumer promoted in its place, if any."""
        p = consumer.priority
        level = self._by_priority.get(p)
        if consumer in self._parked:
            del self._parked[consumer]
        elif level is not None and consumer in level:
            del level[consumer]
        else:
            if consumer in self.standby:
                self.standby.remove(consumer)
            return None
        self.active -= 1
        self._members[p] -= 1
        if not self._members[p]:
            del self._members[p], self._by_priority[p]
            i = self._keys.index(-p)
            del self._keys[i], self._levels[i]
        if not self.active and self.standby:
            promoted = self.standby.pop(0)
            self.add(promoted)
            return promoted
        return None

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._parked or any(consumer in lv for lv in self._levels)

    def members(self) -> list[C]:
        """Active consumers in priority order (ready before parked within a level)."""
        out: list[C] = []
        for level in self._levels:
            out.extend(level)
            if self._parked:
                p = next(iter(level)).priority if level else None
                out.extend(c for c in self._parked if c.priority == p)
        if self._parked:  # levels whose consumers are all parked
            listed = set(map(id, out))
            rest = [c for c in self._parked if id(c) not in listed]
            rest.sort(key=lambda c: -c.priority)
            out.extend(rest)
            out.sort(key=lambda c: -c.priority)  # stable: keeps the order within a level
        return out

    # -- the dispatch loop's operations (O(1)) --------------------------------------

    def front(self) -> C | None:
        """The next consumer to try: first of the highest level with a ready consumer."""
        for level in self._levels:
            if level:
                self._front_level = level
                return next(iter(level))
        return None

    def rotate_front(self, consumer: C) -> None:
        """``consumer`` (just returned by ``front``) got a message: behind its peers."""
        self._front_level.move_to_end(consumer)  # type: ignore[union-attr]

    def park_front(self, consumer: C) -> None:
        """``consumer`` (just returned by ``front``) has no credit: out of the rotation."""
        del self._front_level[consumer]  # type: ignore[index]
        self._parked[consumer] = None

    def unpark(self, consumer: C) -> bool:
        """``consumer`` may have credit again: back at the end of its level. True if parked."""
        if consumer not in self._parked:
            return False
        del self._parked[consumer]
        self._by_priority[consumer.priority][consumer] = None
        return True

    def unpark_all(self) -> bool:
        """Credit may have changed anywhere: every parked consumer is ready again."""
        if not self._parked:
            return False
        parked, self._parked = self._parked, {}
        for consumer in parked:
            self._by_priority[consumer.priority][consumer] = None
        return True

    @property
    def parked(self) -> int:
        return len(self._parked)
