"""Memory-driven paging (queues/paging.py): what a durable queue keeps in memory.

A queue keeps at most the broker's bound (``queue_messages_in_memory``) in memory; with no
bound (0) it keeps its backlog in memory while the broker is under its paging threshold,
as RabbitMQ 3.10's classic queues do. A lazy queue, and every queue while the broker is
pressed, keeps at most PAGE_HIGH (8 here) and pages the rest out, including what it
already held. Whatever the paging, the queue delivers everything once, in order.
"""

from __future__ import annotations

from typing import Any

import pytest

from leveret.broker.alarms import MemoryMonitor
from leveret.broker.broker import Broker
from leveret.cli import build_parser
from leveret.config import Config, ConfigError, load_config
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import QueueDef
from leveret.queues import plain_store
from leveret.queues.featured_store import FeaturedStore
from leveret.queues.paging import UNBOUNDED, Paging
from leveret.queues.plain_store import PlainStore
from leveret.queues.queue import Queue

from .queue_fakes import FakeClock, FakeVhost, drain, msg

PAGE_HIGH = 8


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_store, "PAGE_HIGH", PAGE_HIGH)
    monkeypatch.setattr(plain_store, "PAGE_BATCH", 3)


def _durable(vhost: FakeVhost, name: str = "q", **arguments: Any) -> Queue:
    q = Queue(vhost, name, durable=True, arguments=arguments)
    q.qid = vhost.log.put_queue(QueueDef("/", name, True, False, arguments))
    q.log = vhost.log
    vhost.queues[name] = q
    return q


def _publish(q: Queue, n: int, start: int = 0, persistent: bool = True, **kw: Any) -> None:
    for i in range(start, start + n):
        q.publish(msg(b"%03d" % i, persistent=persistent, **kw))


def _in_memory(q: Queue) -> int:
    return len(q.ready.fresh) + len(q.ready.returned)


def _bodies(start: int, end: int) -> list[bytes]:
    return [b"%03d" % i for i in range(start, end)]


def test_a_queue_pages_beyond_the_bound_a_lazy_one_beyond_page_high() -> None:
    vhost = FakeVhost(FakeClock(), Paging(20))
    default, lazy = _durable(vhost, "default"), _durable(vhost, "lazy", **{"x-queue-mode": "lazy"})
    assert (default.page_high, lazy.page_high) == (20, PAGE_HIGH)
    _publish(default, 50)
    _publish(lazy, 50)
    assert (default.paged_out, _in_memory(default)) == (30, 20)
    assert (lazy.paged_out, _in_memory(lazy)) == (50 - PAGE_HIGH, PAGE_HIGH)
    assert drain(default) == drain(lazy) == _bodies(0, 50)


def test_without_a_bound_a_queue_keeps_its_backlog_in_memory_a_lazy_one_pages() -> None:
    vhost = FakeVhost(FakeClock(), Paging(0))
    default, lazy = _durable(vhost, "default"), _durable(vhost, "lazy", **{"x-queue-mode": "lazy"})
    assert (default.page_high, lazy.page_high) == (UNBOUNDED, PAGE_HIGH)
    _publish(default, 50)
    _publish(lazy, 50)
    assert (default.paged_out, _in_memory(default)) == (0, 50)
    assert (lazy.paged_out, _in_memory(lazy)) == (50 - PAGE_HIGH, PAGE_HIGH)
    assert drain(default) == drain(lazy) == _bodies(0, 50)


@pytest.mark.parametrize("arguments", [{}, {"x-message-ttl": 3_600_000},
                                       {"x-max-length": 1_000, "x-max-length-bytes": 1_000}])
def test_pressure_pages_out_what_a_queue_holds_and_it_still_delivers_in_order(
        arguments: dict[str, Any]) -> None:
    paging = Paging(0)
    vhost = FakeVhost(FakeClock(), paging)
    q = _durable(vhost, **arguments)
    _publish(q, 40)
    first = q.take()  # one delivered, unacked: not ready, not paged
    assert first is not None and first.message.body == b"000"
    q.requeue(first)  # back in memory, in front (the requeued heap)
    assert (q.paged_out, _in_memory(q)) == (0, 40)
    store = q.ready
    assert isinstance(store, FeaturedStore if arguments else PlainStore)
    bytes_before = store.memory_bytes()

    paging.pressed = True
    q.repage()
    assert q.page_high == PAGE_HIGH
    # The requeued entry stays; the fresh ones beyond PAGE_HIGH go to the tail.
    assert len(store.fresh) == PAGE_HIGH and len(store.returned) == 1
    assert q.paged_out == 40 - 1 - PAGE_HIGH and q.message_count == 40
    assert store.paged_out_bytes == 3 * q.paged_out
    assert store.memory_bytes() == bytes_before - store.paged_out_bytes
    _publish(q, 5, start=40)  # pressed: new ones page too
    assert _in_memory(q) == PAGE_HIGH + 1 and q.paged_out == 44 - PAGE_HIGH

    paging.pressed = False
    q.repage()  # relieved: in memory again once the tail is read back (order)
    assert q.page_high == UNBOUNDED
    got = drain(q)
    assert got == _bodies(0, 45)
    _publish(q, 20, start=45)
    assert (q.paged_out, _in_memory(q)) == (0, 20)
    assert drain(q) == _bodies(45, 65)


def test_a_transient_message_keeps_itself_and_what_precedes_it_in_memory() -> None:
    """Only stored entries can leave memory, and the tail is every stored entry from its
    first on: the push-out stops at the newest transient message."""
    paging = Paging(0)
    vhost = FakeVhost(FakeClock(), paging)
    q = _durable(vhost)
    _publish(q, 20)
    _publish(q, 1, start=20, persistent=False)
    _publish(q, 10, start=21)
    paging.pressed = True
    q.repage()
    assert q.paged_out == 10 and _in_memory(q) == 21
    assert drain(q) == _bodies(0, 31)


def test_a_transient_queue_never_pages() -> None:
    paging = Paging(pressed=True)
    vhost = FakeVhost(FakeClock(), paging)
    q = vhost.queue("t")
    _publish(q, 30)
    q.repage()
    assert (q.paged_out, _in_memory(q)) == (0, 30)


def test_a_priority_queue_pages_at_page_high_whatever_the_memory() -> None:
    vhost = FakeVhost(FakeClock(), Paging())
    q = _durable(vhost, **{"x-max-priority": 3})
    _publish(q, 30)
    assert q.paged_out == 30 - PAGE_HIGH
    q.repage()
    assert drain(q) == _bodies(0, 30)


def test_the_broker_pages_by_its_setting() -> None:
    assert Paging().bound == Config().queue_messages_in_memory == 10_000
    broker = Broker(Config(queue_messages_in_memory=12), MemoryStore())
    q, _ = broker.vhosts["/"].declare_queue("q", durable=True, exclusive=False,
                                            auto_delete=False, arguments={})
    _publish(q, 30)
    assert (q.paged_out, _in_memory(q)) == (18, 12)
    assert drain(q) == _bodies(0, 30)


def test_the_broker_tells_every_queue_and_new_ones_start_pressed() -> None:
    broker = Broker(Config(queue_messages_in_memory=0), MemoryStore())
    vhost = broker.vhosts["/"]
    q, _ = vhost.declare_queue("q", durable=True, exclusive=False, auto_delete=False,
                               arguments={})
    _publish(q, 30)
    assert q.paged_out == 0
    broker.set_memory_pressure(True)
    assert q.paged_out == 30 - PAGE_HIGH
    later, _ = vhost.declare_queue("later", durable=True, exclusive=False, auto_delete=False,
                                   arguments={})
    assert later.page_high == PAGE_HIGH
    broker.set_memory_pressure(False)
    assert q.page_high == later.page_high == UNBOUNDED
    assert drain(q) == _bodies(0, 30)


def test_the_paging_threshold_is_a_fraction_of_the_memory_limit() -> None:
    monitor = MemoryMonitor(0.5, total=1 << 50, paging_ratio=0.5)
    assert (monitor.limit, monitor.paging_limit) == (1 << 49, 1 << 48)
    assert monitor.check() == (False, False)  # this process is far under a petabyte
    assert MemoryMonitor(0.5, total=1 << 50, paging_ratio=0).check() == (False, True)
    assert MemoryMonitor(0.5, total=0).check() == (False, False)  # RAM not known


def test_the_paging_ratio_is_configured_like_rabbitmqs(tmp_path: Any) -> None:
    assert Config().memory_high_watermark_paging_ratio == 0.5
    path = tmp_path / "leveret.toml"
    path.write_text("memory_high_watermark_paging_ratio = 0.75\n")
    assert load_config({}, {}, path).memory_high_watermark_paging_ratio == 0.75
    env = {"LEVERET_MEMORY_HIGH_WATERMARK_PAGING_RATIO": "0"}
    assert load_config({}, env, None).memory_high_watermark_paging_ratio == 0
    path.write_text("memory_high_watermark_paging_ratio = -1.0\n")
    with pytest.raises(ConfigError, match="must be 0 or greater"):
        load_config({}, {}, path)


def test_the_bound_is_configured_like_the_other_settings(tmp_path: Any) -> None:
    path = tmp_path / "leveret.toml"
    path.write_text("queue_messages_in_memory = 0\n")
    assert load_config({}, {}, path).queue_messages_in_memory == 0
    env = {"LEVERET_QUEUE_MESSAGES_IN_MEMORY": "50000"}
    assert load_config({}, env, None).queue_messages_in_memory == 50_000
    args = build_parser().parse_args(["serve", "--queue-messages-in-memory", "7"])
    flags = {"queue_messages_in_memory": args.queue_messages_in_memory}
    assert load_config(flags, env, path).queue_messages_in_memory == 7  # the flag wins
    path.write_text("queue_messages_in_memory = -1\n")
    with pytest.raises(ConfigError, match="between 0 and"):
        load_config({}, {}, path)
