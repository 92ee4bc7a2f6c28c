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
``unpark_all`` (credit may have changed anywhere), ``unpark_those`` and
``park_behind`` (a channel's room is back: qos, channel flow, its socket writable
again, an ack under its global prefetch), ``members`` and ``remove`` (a cancel)
walk them.

Consumer utilisation (RabbitMQ's ``consumer_utilisation``, "consumer capacity"):
the share of time the queue could hand a message to a consumer at once, as a
moving average with a half-life of ``USE_HALF_LIFE``. The queue is *blocked*
from the moment ``take_turn`` finds every active consumer without credit while a
message waits, until a consumer is unparked or added. Only those transitions
read the clock, so consumers that keep up cost nothing; a consumer at prefetch
1 behind a backlog costs two clock reads per message, as in RabbitMQ.

Compiled, the ring is an extension type (``consumer_ring.pxd``) that the dispatcher and
the queue call as C. Cython refuses a ``Generic`` base for one, so the ring is typed for
the queue's ``Consumer`` by name (``Member`` says what it uses of one; the unit tests
give it plain values).

Single active consumer: when ``add`` is told so and a consumer is already
active, the newcomer waits in ``standby`` (arrival order); when the last
active consumer is removed the longest-waiting one becomes active (when the
queue then delivers to it is the queue's business: ``Queue.remove_consumer``).
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.queues.consumer import Consumer

# Seconds over which consumer utilisation's average halves the weight of the past.
USE_HALF_LIFE = 1.0


class Member(Protocol):
    @property
    def priority(self) -> int: ...

    def can_take(self) -> bool: ...



class Utilisation:
    """A time-weighted moving average of "could deliver at once" (1) vs "blocked" (0)."""

    __slots__ = ("average", "blocked", "clock", "since")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.average = 1.0
        self.blocked = False
        self.since = clock()

    def _averaged(self, now: float) -> float:
        """The average with the current state folded in up to ``now``."""
        weight: float = 0.5 ** (max(now - self.since, 0.0) / USE_HALF_LIFE)
        return (0.0 if self.blocked else 1.0) * (1.0 - weight) + self.average * weight

    def set_blocked(self, blocked: bool) -> None:
        if blocked is not self.blocked:
            now = self.clock()
            self.average = self._averaged(now)
            self.since = now
            self.blocked = blocked

    def value(self) -> float:
        return self._averaged(self.clock())


class ConsumerRing:
    __slots__ = ("_by_priority", "_keys", "_levels", "_members", "active", "parked", "standby",
                 "use")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._levels: list[deque[Consumer]] = []  # ready consumers, highest priority first
        self._keys: list[int] = []  # -priority of each level (ascending, for bisect)
        self._by_priority: dict[int, deque[Consumer]] = {}
        self._members: dict[int, int] = {}  # priority -> active consumers (ready + parked)
        self.parked: dict[Consumer, None] = {}  # read-only outside
        self.standby: list[Consumer] = []
        self.active = 0  # ready + parked
        self.use = Utilisation(clock)

    def __len__(self) -> int:
        return self.active

    # -- membership ----------------------------------------------------------------

    def add(self, consumer: Consumer, single_active: bool = False) -> bool:
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
        if not self.active:  # the first consumer: a fresh average
            self.use = Utilisation(self.use.clock)
        self.active += 1
        self.use.set_blocked(False)
        return True

    def remove(self, consumer: Consumer) -> Consumer | None:
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

    def members(self) -> list[Consumer]:
        """Active consumers in priority order (ready before parked within a level)."""
        out: list[Consumer] = []
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

    def front(self) -> Consumer | None:
        """The consumer ``take_turn`` would try first (highest level, first in turn)."""
        for level in self._levels:
            if level:
                return level[0]
        return None

    def take_turn(self) -> Consumer | None:
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
        if self.active:  # a message waits and every consumer is out of credit
            self.use.set_blocked(True)
        return None

    def unpark(self, consumer: Consumer) -> bool:
        """``consumer`` may have credit again: back at the end of its level. True if parked."""
        if consumer not in self.parked:
            return False
        del self.parked[consumer]
        self._by_priority[consumer.priority].append(consumer)
        self.use.set_blocked(False)
        return True

    def unpark_those(self, consumers: Collection[Consumer]) -> bool:
        """Those of ``consumers`` that are parked and ``can_take()`` rejoin the rotation in
        the order they were parked (a channel's room is back: rabbit_queue_consumers'
        ``unblock`` of the channel's blocked consumers). True if any did."""
        back = [c for c in self.parked if c in consumers and c.can_take()]
        for consumer in back:
            del self.parked[consumer]
            self._by_priority[consumer.priority].append(consumer)
        if back:
            self.use.set_blocked(False)
        return bool(back)

    def park_behind(self, consumers: Collection[Consumer]) -> None:
        """Those of ``consumers`` that are parked move behind the other parked ones, in their
        order: unblocked while their channel is still suspended, RabbitMQ blocks them again
        at once, at the end of the channel's blocked list."""
        moved = [c for c in self.parked if c in consumers]
        for consumer in moved:
            del self.parked[consumer]
            self.parked[consumer] = None

    def unpark_all(self) -> bool:
        """Credit may have changed anywhere: every parked consumer is ready again."""
        if not self.parked:
            return False
        parked, self.parked = self.parked, {}
        for consumer in parked:
            self._by_priority[consumer.priority].append(consumer)
        self.use.set_blocked(False)
        return True
