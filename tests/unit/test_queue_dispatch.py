"""Queue dispatch with fake consumers: round-robin, priorities, requeue order, purge."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.model.message import Message
from leveret.queues.queue import Queue, QueueEntry


class FakeConsumer:
    """What Queue needs from a consumer; ``capacity`` None = unlimited prefetch."""

    def __init__(self, tag: str, priority: int = 0, capacity: int | None = None,
                 exclusive: bool = False, no_ack: bool = False) -> None:
        self.tag = tag
        self.priority = priority
        self.capacity = capacity
        self.exclusive = exclusive
        self.no_ack = no_ack
        self.held: list[QueueEntry] = []  # delivered, not yet settled or requeued
        self.log: list[int] = []  # seq of every delivery, in order

    def can_take(self) -> bool:
        return self.capacity is None or len(self.held) < self.capacity

    def deliver(self, entry: QueueEntry) -> None:
        self.held.append(entry)
        self.log.append(entry.seq)
        entry.delivery_count += 1


def message(i: int) -> Message:
    return Message("", "q", b"\x00\x00", b"m%d" % i)


def body(entry: QueueEntry) -> bytes:
    return entry.message.body


def drain_ready(queue: Queue) -> list[int]:
    out = []
    while (entry := queue.take()) is not None:
        out.append(entry.seq)
    return out


def test_round_robin_among_equal_priorities() -> None:
    q = Queue(None, "q")
    consumers = [FakeConsumer(f"c{i}") for i in range(3)]
    for c in consumers:
        q.add_consumer(c)
    for i in range(9):
        q.publish(message(i))
    assert [c.log for c in consumers] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert q.unacked == 9 and q.message_count == 0


def test_round_robin_skips_consumers_without_room() -> None:
    q = Queue(None, "q")
    a, b, c = FakeConsumer("a"), FakeConsumer("b", capacity=1), FakeConsumer("c")
    for x in (a, b, c):
        q.add_consumer(x)
    for i in range(6):
        q.publish(message(i))
    assert b.log == [1]
    assert sorted(a.log + c.log) == [0, 2, 3, 4, 5]
    assert abs(len(a.log) - len(c.log)) <= 1


def test_backlog_is_spread_when_consumers_arrive() -> None:
    q = Queue(None, "q")
    for i in range(4):
        q.publish(message(i))
    first = FakeConsumer("a", capacity=2)
    q.add_consumer(first)
    assert first.log == [0, 1] and q.message_count == 2
    second = FakeConsumer("b")
    q.add_consumer(second)
    assert second.log == [2, 3] and q.message_count == 0


def test_higher_priority_first() -> None:
    q = Queue(None, "q")
    low = FakeConsumer("low", priority=0)
    high1 = FakeConsumer("high1", priority=5, capacity=2)
    high2 = FakeConsumer("high2", priority=5, capacity=2)
    mid = FakeConsumer("mid", priority=1, capacity=1)
    for c in (low, high1, mid, high2):
        q.add_consumer(c)
    assert [c.tag for c in q.consumers][:2] in (["high1", "high2"], ["high2", "high1"])
    for i in range(8):
        q.publish(message(i))
    assert high1.log == [0, 2] and high2.log == [1, 3]
    assert mid.log == [4]
    assert low.log == [5, 6, 7]
    # When a high-priority consumer has room again it is served first.
    q.settle(high1.held.pop(0))
    q.publish(message(8))
    assert high1.log[-1] == 8


def test_no_consumer_with_room_keeps_messages_ready() -> None:
    q = Queue(None, "q")
    c = FakeConsumer("c", capacity=0)
    q.add_consumer(c)
    q.publish(message(0))
    assert c.log == [] and q.message_count == 1
    c.capacity = 1
    q.dispatch()
    assert c.log == [0] and q.message_count == 0


def test_requeue_returns_to_original_position() -> None:
    q = Queue(None, "q")
    for i in range(5):
        q.publish(message(i))
    c = FakeConsumer("c", capacity=3)
    q.add_consumer(c)
    assert c.log == [0, 1, 2]
    q.remove_consumer(c)
    e0, e1, e2 = c.held
    q.requeue(e2)
    q.requeue(e0)
    assert q.unacked == 1 and q.message_count == 4
    assert [body(q.take()) for _ in range(4)] == [b"m0", b"m2", b"m3", b"m4"]
    # Redelivered entries keep their delivery count (the redelivered flag).
    assert e0.delivery_count == 1


def test_requeue_after_new_publishes_still_goes_first() -> None:
    q = Queue(None, "q")
    c = FakeConsumer("c", capacity=1)
    q.add_consumer(c)
    q.publish(message(0))
    q.publish(message(1))
    q.publish(message(2))
    entry = c.held.pop()
    c.capacity = 0
    q.requeue(entry)
    q.publish(message(3))
    assert drain_ready(q) == [0, 1, 2, 3]


def test_requeue_into_deleted_queue_drops_the_message() -> None:
    q = Queue(None, "q")
    c = FakeConsumer("c")
    q.add_consumer(c)
    q.publish(message(0))
    q.deleted = True
    q.requeue(c.held.pop())
    assert q.message_count == 0 and q.unacked == 0


def test_purge_drops_ready_but_not_unacked() -> None:
    q = Queue(None, "q")
    c = FakeConsumer("c", capacity=2)
    q.add_consumer(c)
    for i in range(5):
        q.publish(message(i))
    q.remove_consumer(c)
    q.requeue(c.held.pop(0))  # ready again: purged too
    assert q.message_count == 4 and q.unacked == 1
    assert q.purge() == 4
    assert q.message_count == 0 and q.unacked == 1
    assert q.purge() == 0
    q.requeue(c.held.pop())  # an unacked message survives the purge
    assert drain_ready(q) == [1]


def test_exclusive_consumer_flag() -> None:
    q = Queue(None, "q")
    c = FakeConsumer("c", exclusive=True)
    q.add_consumer(c)
    assert q.exclusive_consumer and q.had_consumer
    q.remove_consumer(c)
    assert not q.exclusive_consumer and q.is_unused()
    q.remove_consumer(c)  # removing twice is harmless


def test_publish_during_delivery_is_not_reentrant() -> None:
    q = Queue(None, "q")

    class Republisher(FakeConsumer):
        def deliver(self, entry: QueueEntry) -> None:
            super().deliver(entry)
            if entry.seq < 3:
                q.publish(message(entry.seq + 10))

    c = Republisher("c")
    q.add_consumer(c)
    q.publish(message(0))
    assert c.log == [0, 1, 2, 3]
    assert q.message_count == 0


# -- model-based ------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 3)),
        st.tuples(st.just("capacity"), st.integers(0, 2), st.integers(0, 4)),
        st.tuples(st.just("requeue"), st.integers(0, 2), st.integers(0, 50)),
        st.tuples(st.just("settle"), st.integers(0, 2), st.integers(0, 50)),
        st.tuples(st.just("take")),
        st.tuples(st.just("purge")),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops, priorities=st.lists(st.integers(0, 2), min_size=3, max_size=3))
def test_random_deliver_requeue_keeps_publication_order(ops: list[tuple],
                                                        priorities: list[int]) -> None:
    q = Queue(None, "q")
    consumers = [FakeConsumer(f"c{i}", priority=p, capacity=0) for i, p in enumerate(priorities)]
    for c in consumers:
        q.add_consumer(c)
    published = 0
    ready: set[int] = set()  # the model: seqs that are ready
    settled: set[int] = set()
    taken: list[int] = []  # basic.get-style takes, settled at once

    def check_deliveries(before: list[int]) -> None:
        # Every delivery since ``before`` took the oldest ready messages at the time.
        delivered = [seq for c, n in zip(consumers, before) for seq in c.log[n:]]
        assert sorted(delivered) == sorted(ready)[: len(delivered)]
        ready.difference_update(delivered)
        # Priority: a lower-priority consumer got something only if no higher one had room.
        if delivered:
            for c, n in zip(consumers, before):
                if len(c.log) > n:
                    for other in consumers:
                        if other.priority > c.priority:
                            assert not other.can_take()

    for op in ops:
        before = [len(c.log) for c in consumers]
        if op[0] == "publish":
            for _ in range(op[1]):
                ready.add(published)
                published += 1
                q.publish(message(published - 1))
        elif op[0] == "capacity":
            consumers[op[1]].capacity = op[2]
            q.dispatch()
        elif op[0] in ("requeue", "settle"):
            c = consumers[op[1]]
            if not c.held:
                continue
            entry = c.held.pop(op[2] % len(c.held))
            if op[0] == "requeue":
                ready.add(entry.seq)
                q.requeue(entry)
                q.dispatch()
            else:
                settled.add(entry.seq)
                q.settle(entry)
                q.dispatch()
        elif op[0] == "take":
            entry = q.take()
            if entry is None:
                assert not ready
            else:
                assert entry.seq == min(ready)
                ready.discard(entry.seq)
                taken.append(entry.seq)
                q.settle(entry)  # a basic.get is counted unacked until settled
        else:
            assert q.purge() == len(ready)
            settled |= ready
            ready.clear()
        check_deliveries(before)
        held = [e.seq for c in consumers for e in c.held]
        assert q.message_count == len(ready)
        assert q.unacked == len(held)
        # Conservation: every message is ready, held, settled/purged or taken, once.
        everything = sorted(list(ready) + held + list(settled) + taken)
        assert everything == list(range(published))
    # What is left ready comes out oldest first.
    for c in consumers:
        c.capacity = 0
    assert drain_ready(q) == sorted(ready)
