"""A persistent message whose store write failed is nacked and leaves no trace in its
queue: neither counted nor ready, in memory or in its paged-out tail."""

from __future__ import annotations

import asyncio

from leveret.model.message import Message
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import QueueDef, StoreError
from leveret.queues import plain_store
from leveret.queues.queue import PublishResult, Queue


class FailingStore(MemoryStore):
    """Fails the writes whose numbers (1-based) are in ``failing``."""

    def __init__(self, failing: set[int]) -> None:
        super().__init__()
        self.failing = failing
        self.writes = 0

    def write_batch(self, batch):
        self.writes += 1
        if self.writes in self.failing:
            raise StoreError("disk full (simulated)")
        super().write_batch(batch)


def persistent(n: int) -> Message:
    return Message("", "q", b"\x10\x00\x02", b"p%d" % n)  # delivery_mode=2


def transient(n: int) -> Message:
    return Message("", "q", b"\x00\x00", b"t%d" % n)


def durable_queue(store: MemoryStore) -> tuple[Queue, GroupCommit]:
    log = GroupCommit(store, asyncio.get_running_loop())
    # Lazy: pages at PAGE_HIGH whatever the memory (queues/paging.py).
    q = Queue(None, "q", durable=True, arguments={"x-queue-mode": "lazy"})
    q.qid = log.put_queue(QueueDef("/", "q", True, False, {}))
    q.log = log
    return q, log


def bodies(q: Queue) -> list[bytes]:
    out = []
    while (entry := q.take()) is not None:
        q.settle(entry)
        out.append(entry.message.body)
    return out


async def test_a_failed_write_removes_its_messages_and_only_those() -> None:
    store = FailingStore({2})  # write 1 is the queue definition
    q, log = durable_queue(store)
    await log.drain()
    assert q.publish(persistent(1)) is PublishResult.HELD
    assert q.publish(transient(2)) is PublishResult.ACCEPTED  # in memory only: unaffected
    await log.drain()  # the failing batch
    assert log.failures == 1
    assert q.publish(persistent(3)) is PublishResult.HELD
    await log.drain()
    assert q.message_count == 2 and q.dropped == 1
    assert bodies(q) == [b"t2", b"p3"]
    await log.drain()
    assert store.read_queue(q.qid, 0, 10) == []
    log.close()


async def test_batches_recorded_during_a_failing_write_are_kept() -> None:
    store = FailingStore({2})
    q, log = durable_queue(store)
    await log.drain()
    q.publish(persistent(1))
    await asyncio.sleep(0)  # the first batch is taken and is being written
    q.publish(persistent(2))  # recorded for the next batch
    await log.drain()
    assert log.failures == 1
    assert q.message_count == 1
    assert bodies(q) == [b"p2"]
    log.close()


async def test_a_failed_write_forgets_the_paged_out_tail(monkeypatch) -> None:
    monkeypatch.setattr(plain_store, "PAGE_HIGH", 3)
    store = FailingStore({3})
    q, log = durable_queue(store)
    await log.drain()
    for n in range(4):  # 3 in memory, 1 paged out: committed
        q.publish(persistent(n))
    await log.drain()
    for n in range(4, 8):  # paged out, persistent or not: all in the failing batch
        q.publish(persistent(n) if n % 2 else transient(n))
    await log.drain()
    assert log.failures == 1
    assert q.message_count == 4 and q.dropped == 4
    assert bodies(q) == [b"p0", b"p1", b"p2", b"p3"]
    log.close()


async def test_a_failed_write_forgets_a_priority_queues_paged_levels(monkeypatch) -> None:
    """A priority queue's sequence numbers carry their level: a failed write still finds
    exactly its entries, in memory and in every level's tail."""
    from pamqp import commands

    from leveret.model.properties import encode_properties

    def prioritised(n: int) -> Message:
        props = encode_properties(commands.Basic.Properties(delivery_mode=2, priority=n % 3))
        return Message("", "q", props, b"p%d" % n)

    monkeypatch.setattr(plain_store, "PAGE_HIGH", 3)
    store = FailingStore({3})
    log = GroupCommit(store, asyncio.get_running_loop())
    args = {"x-max-priority": 2}
    q = Queue(None, "q", durable=True, arguments=args)
    q.qid = log.put_queue(QueueDef("/", "q", True, False, args))
    q.log = log
    await log.drain()
    for n in range(6):  # 3 in memory, 3 paged out (levels 0, 1, 2): committed
        q.publish(prioritised(n))
    await log.drain()
    for n in range(6, 12):  # all paged out, all in the failing batch
        q.publish(prioritised(n))
    await log.drain()
    assert log.failures == 1
    assert q.message_count == 6 and q.dropped == 6
    assert bodies(q) == [b"p2", b"p5", b"p1", b"p4", b"p0", b"p3"]
    log.close()
