"""Fakes for queue-feature unit tests: a clock, a scheduler, a vhost, a recording consumer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leveret.broker.publishing import basic_publish
from leveret.model.message import Message
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.memory import MemoryStore
from leveret.queues.paging import Paging
from leveret.queues.queue import Queue
from leveret.queues.ttl import Timekeeping


class FakeClock:
    """Monotonic and wall time in one, advanced by hand; runs due timers when advanced."""

    def __init__(self, wall: float = 1_700_000_000.0) -> None:
        self.now = 0.0
        self.wall0 = wall
        self.timers: list[list[Any]] = []  # [due, seq, callback, cancelled]
        self._seq = 0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall0 + self.now

    def call_later(self, delay: float, callback: Any) -> Any:
        self._seq += 1
        timer = [self.now + delay, self._seq, callback, False]
        self.timers.append(timer)

        class Handle:
            def cancel(self_inner) -> None:  # noqa: N805 - self is the fake clock
                timer[3] = True

        return Handle()

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while True:
            due = sorted((t for t in self.timers if not t[3] and t[0] <= end), key=lambda t: t[:2])
            if not due:
                break
            timer = due[0]
            self.timers.remove(timer)
            self.now = max(self.now, timer[0])
            timer[2]()
        self.now = end

    @property
    def pending(self) -> int:
        return sum(1 for t in self.timers if not t[3])


class FakeVhost:
    def __init__(self, clock: FakeClock, paging: Paging | None = None) -> None:
        self.name = "/"
        # As a broker over its paging threshold: durable queues page at PAGE_HIGH, which
        # the tests of the paged tail set small (queues/paging.py; its tests choose).
        self.paging = paging if paging is not None else Paging(pressed=True)
        self.exchanges: dict[str, Any] = {}
        self.queues: dict[str, Queue] = {}
        self.time = Timekeeping(clock.monotonic, clock.wall, clock)
        self.log = GroupCommit(MemoryStore())
        self.deleted: list[str] = []
        self.tracer = None
        self.dedupe: dict[str, Any] = {}  # exchanges' deduplication windows: none here

    def queue(self, name: str, **arguments: Any) -> Queue:
        q = Queue(self, name, arguments=arguments)
        self.queues[name] = q
        return q

    def publish_routed(self, message: Message, queues: Sequence[Queue]) -> None:
        basic_publish(self, message, (), False, None, None, queues)  # type: ignore[arg-type]

    def delete_queue(self, queue: Queue) -> int:
        self.deleted.append(queue.name)
        self.queues.pop(queue.name, None)
        queue.deleted = True
        return queue.purge()


class FakeChannel:
    active = True

    class connection:  # noqa: N801 - stands in for the channel.connection attribute
        writable = True

    def has_room(self) -> bool:
        return True

    def deliver(self, consumer: Any, entry: Any) -> None:
        consumer.got.append(entry)
        entry.delivery_count += 1
        consumer.unacked += 1

    def deliver_shared(self, consumer: Any, entry: Any, shared: Any) -> None:
        self.deliver(consumer, entry)


class FakeConsumer:
    def __init__(self, prefetch: int = 0, priority: int = 0) -> None:
        self.channel = FakeChannel()
        self.no_ack = False
        self.exclusive = False
        self.priority = priority
        self.prefetch = prefetch
        self.unacked = 0
        self.got: list[Any] = []

    def can_take(self) -> bool:
        return not self.prefetch or self.unacked < self.prefetch

    def deliver(self, entry: Any) -> None:
        self.channel.deliver(self, entry)

    def deliver_shared(self, entry: Any, shared: Any) -> None:
        self.channel.deliver_shared(self, entry, shared)

    def bodies(self) -> list[bytes]:
        return [e.message.body for e in self.got]


def props(expiration: str | None = None, priority: int | None = None,
          headers: dict[str, Any] | None = None, persistent: bool = False) -> bytes:
    from pamqp import commands

    from leveret.model.properties import encode_properties

    return encode_properties(commands.Basic.Properties(
        expiration=expiration, priority=priority, headers=headers,
        delivery_mode=2 if persistent else None))


def msg(body: bytes, **kw: Any) -> Message:
    return Message("", "rk", props(**kw), body)


def drain(q: Queue) -> list[bytes]:
    out = []
    while (entry := q.take()) is not None:
        q.settle(entry)
        out.append(entry.message.body)
    return out
