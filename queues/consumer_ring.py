"""The consumers of one queue: priority order, round-robin, credit, single-active standby.

Theory of operation
-------------------
A pure data structure over anything with a ``priority`` and a ``can_take()``
(the queue's consumers; plain values in the unit tests). It decides *who is
next*; what a delivery is, is the queue's business.

Active consumers are either *ready* (believed to have credit) or *parked*
(found without credit). Ready consumers sit in one deque per priority
level, levels highest first (``x-priority``); ``front()`` is the first
consumer of the highest non-empty level. ``take_turn()`` returns the front
consumer that can take a message and moves it behind its equal-priority peers,
which is RabbitMQ's round-robin; a consumer found without credit on the way is
parked and leaves the rotation; ``unpark(c)`` puts it back at the
end of its level when its credit returns (an ack of one of its deliveries).
That is rabbit_queue_consumers' ``block_consumer`` / ``unblock``: unblocked
consumers rejoin behind the others (``priority_queue:join``).

Every operation the dispatch loop uses is O(1) (plus the number of priority
levels, normally one), whatever the number of consumers: delivering a message
to a queue with 1,000 consumers costs what it costs with one. Only
``unpark_all`` (credit may have changed anywhere: qos, channel flow, the
socket writable again), ``members`` and ``remove`` (a cancel) walk them.

Single active consumer: when ``add`` is told so and a consumer is already
active, the newcomer waits in ``standby`` (arrival order); when the last
active consumer is removed the longest-waiting one becomes active.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Generic, Protocol, TypeVar


class Member(Protocol):
    @property
    def priority(self) -> int: ...

    def can_take(self) -> bool: ...


C = TypeVar("C", bound=Member)


class ConsumerRing(Generic[C]):
    __slots__ = ("_levels", "_keys", "_by_priority", "_members", "parked", "standby", "active")

    def __init__(self) -> None:
        self._levels: list[deque[C]] = []  # ready consumers, highest priority first
        self._keys: list[int] = []  # -priority of each level (ascending, for bisect)
        self._by_priority: dict[int, deque[C]] = {}
        self._members: dict[int, int] = {}  # priority -> active consumers (ready + parked)
        self.parked: dict[C, None] = {}  # read-only outside
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
            level = self._by_priority[p] = deque()
            i = bisect.bisect_left(self._keys, -p)
            self._keys.insert(i, -p)
            self._levels.insert(i, level)
            self._members[p] = 0
        level.append(consumer)
        self._members[p] += 1
        self.active += 1
        return True

    def remove(self, consumer: C) -> C | None:
        """Forget ``consumer``; returns a standby consumer promoted in its place, if any."""
        p = consumer.priority
        level = self._by_priority.get(p)
        if consumer in self.parked:
            del self.parked[consumer]
        elif level is not None and consumer in level:
            level.remove(consumer)
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
        return consumer in self.parked or any(consumer in lv for lv in self._levels)

    def members(self) -> list[C]:
        """Active consumers in priority order (ready before parked within a level)."""
        out: list[C] = []
        for level in self._levels:
            out.extend(level)
            if self.parked:
                p = next(iter(level)).priority if level else None
                out.extend(c for c in self.parked if c.priority == p)
        if self.parked:  # levels whose consumers are all parked
            listed = set(map(id, out))
            rest = [c for c in self.parked if id(c) not in listed]
            rest.sort(key=lambda c: -c.priority)
            out.extend(rest)
            out.sort(key=lambda c: -c.priority)  # stable: keeps the order within a level
        return out

    # -- the dispatch loop's operations (O(1)) --------------------------------------

    def front(self) -> C | None:
        """The consumer ``take_turn`` would try first (highest level, first in turn)."""
        for level in self._levels:
            if level:
                return level[0]
        return None

    def take_turn(self) -> C | None:
        """The next consumer that can take a message, moved behind its peers; None if none.

        Consumers found without credit on the way are parked.
        """
        for level in self._levels:
            while level:
                consumer = level[0]
                if consumer.can_take():
                    if len(level) > 1:
                        level.rotate(-1)
                    return consumer
                level.popleft()
                self.parked[consumer] = None
        return None

    def unpark(self, consumer: C) -> bool:
        """``consumer`` may have credit again: back at the end of its level. True if parked."""
        if consumer not in self.parked:
            return False
        del self.parked[consumer]
        self._by_priority[consumer.priority].append(consumer)
        return True

    def unpark_all(self) -> bool:
        """Credit may have changed anywhere: every parked consumer is ready again."""
        if not self.parked:
            return False
        parked, self.parked = self.parked, {}
        for consumer in parked:
            self._by_priority[consumer.priority].append(consumer)
        return True
