"""broker.publishing.basic_publish over plain queues: what the queues made of a publish
(``Published``), the counters, and flow control reaching the Origin."""

from __future__ import annotations

from typing import Any

from leveret.broker.publishing import ACCEPTED, UNROUTED, Published, basic_publish
from leveret.model.object_stats import ExchangeCounters
from leveret.queues import queue as queue_module
from leveret.queues.queue import Queue

from .queue_fakes import FakeClock, FakeConsumer, FakeVhost, msg

FULL = {"x-max-length": 0, "x-overflow": "reject-publish"}


class Recorder:
    """An Origin that records the queues it was told to wait for."""

    trace_user = "guest"
    trace_channel = 1
    trace_confirm = False

    def __init__(self) -> None:
        self.waiting: list[Queue] = []

    def flow_wait(self, queue: Queue) -> None:
        self.waiting.append(queue)


def _publish(vhost: Any, queues: list[Queue], counters: ExchangeCounters | None = None,
             origin: Recorder | None = None) -> Published:
    return basic_publish(vhost, msg(b"m"), (), False, counters, origin, queues)


def test_every_queue_taking_it_is_the_shared_accepted_outcome() -> None:
    vhost = FakeVhost(FakeClock())
    a, b = vhost.queue("a"), vhost.queue("b")
    counters = ExchangeCounters()
    assert _publish(vhost, [a, b], counters) is ACCEPTED
    assert (a.message_count, b.message_count) == (1, 1)
    assert counters.publish == 1 and counters.queues == {a: 1, b: 1}


def test_one_refusing_queue_refuses_the_publish_but_not_the_others_copy() -> None:
    vhost = FakeVhost(FakeClock())
    full, other = vhost.queue("full", **FULL), vhost.queue("other")
    assert _publish(vhost, [full, other]) == Published(routed=True, stored=True, held=False,
                                                       refused=True)
    assert (full.message_count, other.message_count) == (0, 1)
    assert _publish(vhost, [full]) == Published(True, False, False, True)


def test_no_queue_is_unrouted_and_counted_as_dropped() -> None:
    vhost = FakeVhost(FakeClock())
    counters = ExchangeCounters()
    assert _publish(vhost, [], counters) is UNROUTED
    assert (counters.publish, counters.drop_unroutable) == (1, 1)


def test_a_queue_behind_its_consumers_pauses_the_origin(monkeypatch: Any) -> None:
    monkeypatch.setattr(queue_module, "FLOW_HIGH", 1)
    vhost = FakeVhost(FakeClock())
    q = vhost.queue("q")
    consumer = FakeConsumer(prefetch=1)
    q.add_consumer(consumer)
    origin = Recorder()
    _publish(vhost, [q], origin=origin)  # delivered: nothing waits
    assert origin.waiting == []
    for _ in range(4):
        _publish(vhost, [q], origin=origin)
    assert set(origin.waiting) == {q}  # over the mark (the consumer holds one, no credit)


def test_a_queue_without_consumers_never_pauses(monkeypatch: Any) -> None:
    monkeypatch.setattr(queue_module, "FLOW_HIGH", 1)
    vhost = FakeVhost(FakeClock())
    q = vhost.queue("q")
    origin = Recorder()
    for _ in range(5):
        _publish(vhost, [q], origin=origin)
    assert origin.waiting == []
