"""basic.* through pika: consume/cancel, round-robin, consumer priorities and
exclusivity, prefetch (per consumer, global, both), get, ack/nack/reject,
requeue order and the redelivered flag, recover, delivery-tag errors, large
bodies split by frame_max, and properties relayed unchanged.
"""

from __future__ import annotations

import datetime
import os
from decimal import Decimal

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker


class Collector:
    """A basic_consume callback that keeps (method, properties, body)."""

    def __init__(self) -> None:
        self.got: list = []

    def __call__(self, _ch, method, props, body) -> None:
        self.got.append((method, props, body))

    @property
    def bodies(self) -> list[bytes]:
        return [body for _, _, body in self.got]

    @property
    def tags(self) -> list[int]:
        return [method.delivery_tag for method, _, _ in self.got]

    def __len__(self) -> int:
        return len(self.got)


def fill(ch, queue: str, n: int, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(n)]
    for body in bodies:
        ch.basic_publish("", queue, body)
    return bodies


def expect_channel_error(ch) -> ChannelClosedByBroker:
    """The broker's answer to an asynchronous method shows at the next synchronous one."""
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_qos(prefetch_count=0)
    return err.value


# -- consume / cancel ----------------------------------------------------------------


def test_consume_in_order_then_cancel(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 5)
    c = Collector()
    tag = ch.basic_consume(qname, c)  # pika picks the tag itself ("ctag1.…")
    assert helpers.poll(conn, lambda: len(c) == 5)
    assert c.bodies == sent
    assert c.tags == [1, 2, 3, 4, 5]
    for method, _, _ in c.got:
        assert (method.consumer_tag, method.redelivered, method.exchange,
                method.routing_key) == (tag, False, "", qname)
    ch.basic_cancel(tag)
    fill(ch, qname, 1, prefix="after")
    helpers.settle(conn)
    assert len(c) == 5  # no deliveries after cancel-ok
    ok = ch.queue_declare(qname, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (1, 0)
    ch.basic_ack(5, multiple=True)  # acks still work after the consumer is gone
    ch.close()
    assert helpers.get_all(conn.channel(), qname) == [b"after0"]


def test_consume_with_explicit_tag(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    c = Collector()
    assert ch.basic_consume(qname, c, consumer_tag="my-tag") == "my-tag"
    fill(ch, qname, 1)
    assert helpers.poll(conn, lambda: len(c) == 1)
    assert c.got[0][0].consumer_tag == "my-tag"


def test_consume_from_missing_queue_is_404(amqp, qname):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_consume(qname, lambda *a: None)
    assert (err.value.reply_code, err.value.reply_text) == (
        404, f"NOT_FOUND - no queue '{qname}' in vhost '/'")


def test_round_robin_across_consumers(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    collectors = [Collector() for _ in range(3)]
    for c in collectors:
        conn.channel().basic_consume(qname, c, auto_ack=True)
    sent = fill(ch, qname, 12)
    assert helpers.poll(conn, lambda: sum(map(len, collectors)) == 12)
    # Each consumer gets every third message, in order.
    for c in collectors:
        assert len(c) == 4
        first = sent.index(c.bodies[0])
        assert c.bodies == sent[first::3]
    assert sorted(b for c in collectors for b in c.bodies) == sorted(sent)


def test_consumer_priorities(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_qos(prefetch_count=2)
    low, high, lowest = Collector(), Collector(), Collector()
    ch.basic_consume(qname, low)  # default priority 0
    ch.basic_consume(qname, high, arguments={"x-priority": 10})
    ch.basic_consume(qname, lowest, arguments={"x-priority": -5})
    sent = fill(ch, qname, 7)
    assert helpers.poll(conn, lambda: len(high) + len(low) + len(lowest) == 6)
    # The highest-priority consumer takes messages while it has room, then the next.
    assert high.bodies == sent[0:2]
    assert low.bodies == sent[2:4]
    assert lowest.bodies == sent[4:6]
    assert helpers.ready_count(ch, qname) == 1
    ch.basic_ack(high.tags[0])
    assert helpers.poll(conn, lambda: len(high) == 3)
    assert high.bodies[2] == sent[6]
    helpers.settle(conn, 0.05)
    assert (len(low), len(lowest)) == (2, 2)


def test_consumer_priority_must_be_an_integer(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_consume(qname, lambda *a: None, arguments={"x-priority": "high"})
    assert err.value.reply_code == 406


def test_exclusive_consumer(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname)
    text = f"ACCESS_REFUSED - queue '{qname}' in vhost '/' in exclusive use"
    tag = ch.basic_consume(qname, lambda *a: None, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        amqp.channel().basic_consume(qname, lambda *a: None)
    assert (err.value.reply_code, err.value.reply_text) == (403, text)
    ch.basic_cancel(tag)
    ch.basic_consume(qname, lambda *a: None)  # a normal consumer again
    with pytest.raises(ChannelClosedByBroker) as err:
        conn.channel().basic_consume(qname, lambda *a: None, exclusive=True)
    assert (err.value.reply_code, err.value.reply_text) == (403, text)
    ch.queue_delete(qname)


# -- prefetch ------------------------------------------------------------------------


def test_per_consumer_prefetch(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_qos(prefetch_count=2)
    a, b = Collector(), Collector()
    ch.basic_consume(qname, a)
    ch.basic_consume(qname, b)
    fill(ch, qname, 10)
    assert helpers.poll(conn, lambda: len(a) + len(b) == 4)
    helpers.settle(conn, 0.05)
    assert (len(a), len(b)) == (2, 2)  # per consumer, not per channel
    assert helpers.ready_count(ch, qname) == 6
    for tag in a.tags:  # not multiple: b's tags interleave with a's
        ch.basic_ack(tag)
    assert helpers.poll(conn, lambda: len(a) == 4)
    helpers.settle(conn, 0.05)
    assert len(b) == 2


def test_prefetch_applies_to_consumers_created_after_qos(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    unlimited, limited = Collector(), Collector()
    ch.basic_consume(qname, unlimited)
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(qname, limited)
    fill(ch, qname, 10)
    assert helpers.poll(conn, lambda: len(unlimited) + len(limited) == 10)
    assert (len(unlimited), len(limited)) == (9, 1)


def test_global_prefetch(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_qos(prefetch_count=3, global_qos=True)
    a, b = Collector(), Collector()
    ch.basic_consume(qname, a)
    ch.basic_consume(qname, b)
    fill(ch, qname, 10)
    assert helpers.poll(conn, lambda: len(a) + len(b) == 3)
    helpers.settle(conn, 0.05)
    assert len(a) + len(b) == 3  # shared by the channel
    ch.basic_ack(0, multiple=True)
    assert helpers.poll(conn, lambda: len(a) + len(b) == 6)
    helpers.settle(conn, 0.05)
    assert len(a) + len(b) == 6


def test_per_consumer_and_global_prefetch_together(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_qos(prefetch_count=2)
    ch.basic_qos(prefetch_count=3, global_qos=True)
    a, b = Collector(), Collector()
    ch.basic_consume(qname, a)
    ch.basic_consume(qname, b)
    fill(ch, qname, 10)
    assert helpers.poll(conn, lambda: len(a) + len(b) == 3)
    helpers.settle(conn, 0.05)
    assert sorted([len(a), len(b)]) == [1, 2]  # each ≤ 2, together ≤ 3
    full = a if len(a) == 2 else b
    other = b if full is a else a
    ch.basic_ack(full.tags[0])  # frees one of each limit: either may take the next
    assert helpers.poll(conn, lambda: len(a) + len(b) == 4)
    helpers.settle(conn, 0.05)
    assert len(a) + len(b) == 4 and len(a) <= 3 and len(b) <= 3
    assert len(full) - 1 <= 2 and len(other) <= 2


def test_global_prefetch_applies_to_existing_consumers(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    c = Collector()
    ch.basic_consume(qname, c)
    ch.basic_qos(prefetch_count=2, global_qos=True)
    fill(ch, qname, 5)
    assert helpers.poll(conn, lambda: len(c) == 2)
    helpers.settle(conn, 0.05)
    assert len(c) == 2
    assert helpers.ready_count(ch, qname) == 3


def test_no_ack_consumers_ignore_prefetch(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_qos(prefetch_count=1)
    ch.basic_qos(prefetch_count=1, global_qos=True)
    c = Collector()
    ch.basic_consume(qname, c, auto_ack=True)
    fill(ch, qname, 5)
    assert helpers.poll(conn, lambda: len(c) == 5)
    assert helpers.ready_count(ch, qname) == 0


def test_changing_prefetch_keeps_existing_consumers_limit(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_qos(prefetch_count=3)
    c = Collector()
    ch.basic_consume(qname, c)
    fill(ch, qname, 10)
    assert helpers.poll(conn, lambda: len(c) == 3)
    ch.basic_qos(prefetch_count=1)  # only for consumers created from now on
    ch.basic_ack(c.tags[0])
    assert helpers.poll(conn, lambda: len(c) == 4)
    helpers.settle(conn, 0.05)
    assert len(c) == 4


def test_requeued_message_goes_to_a_consumer_with_room(amqp, helpers, qname):
    conn = amqp.connect()
    ch_a, ch_b = conn.channel(), conn.channel()
    ch_a.queue_declare(qname, exclusive=True)
    ch_a.basic_qos(prefetch_count=1)
    ch_b.basic_qos(prefetch_count=1)
    a, b = Collector(), Collector()
    ch_a.basic_consume(qname, a)
    fill(ch_a, qname, 1)
    assert helpers.poll(conn, lambda: len(a) == 1)
    ch_b.basic_consume(qname, b)
    ch_a.basic_qos(prefetch_count=0, global_qos=True)  # sync point: b is registered
    fill(ch_a, qname, 1, prefix="n")
    assert helpers.poll(conn, lambda: len(b) == 1)
    assert b.bodies == [b"n0"]
    ch_b.basic_ack(b.tags[0])  # b has room again; a is still full
    ch_a.basic_nack(a.tags[0], requeue=True)  # frees a too: either may take it
    assert helpers.poll(conn, lambda: len(a) + len(b) == 3)
    redelivery = (a.got[1:] + b.got[1:])[0]
    assert (redelivery[2], redelivery[0].redelivered) == (b"m0", True)


def test_qos_prefetch_size_is_not_implemented(amqp):
    conn = amqp.connect()
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.basic_qos(prefetch_size=1000)
    assert err.value.reply_code == 540


# -- get -------------------------------------------------------------------------------


def test_get_and_get_empty(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    assert ch.basic_get(qname) == (None, None, None)
    sent = fill(ch, qname, 3)
    for i, body in enumerate(sent):
        method, _props, got = ch.basic_get(qname)
        assert got == body
        assert method.message_count == 2 - i  # messages left after this one
        assert method.delivery_tag == i + 1
        assert method.redelivered is False
        assert (method.exchange, method.routing_key) == ("", qname)
    assert ch.basic_get(qname) == (None, None, None)
    ch.basic_ack(3, multiple=True)
    assert ch.queue_declare(qname, passive=True).method.message_count == 0


def test_get_from_missing_queue_is_404(amqp, qname):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_get(qname)
    assert err.value.reply_code == 404


# -- ack / nack / reject -----------------------------------------------------------------


def get_n(ch, queue: str, n: int) -> list:
    out = [ch.basic_get(queue) for _ in range(n)]
    assert all(m is not None for m, _, _ in out)
    return out


def test_ack_multiple_then_close_requeues_the_rest(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 5)
    get_n(ch, qname, 5)
    ch.basic_ack(3, multiple=True)
    ch.close()
    ch = conn.channel()
    assert helpers.get_all(ch, qname) == sent[3:]


def test_ack_zero_multiple_acks_everything(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 4)
    get_n(ch, qname, 4)
    ch.basic_ack(0, multiple=True)
    ch.close()
    assert helpers.ready_count(conn.channel(), qname) == 0


def test_nack_multiple_requeue(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 5)
    get_n(ch, qname, 4)
    ch.basic_nack(3, multiple=True, requeue=True)  # m0..m2 back; m3 still unacked
    got = [ch.basic_get(qname, auto_ack=True) for _ in range(4)]
    assert [body for _, _, body in got] == [sent[0], sent[1], sent[2], sent[4]]
    assert [m.redelivered for m, _, _ in got] == [True, True, True, False]
    assert ch.basic_get(qname) == (None, None, None)
    ch.basic_nack(4, requeue=True)
    method, _, body = ch.basic_get(qname, auto_ack=True)
    assert (body, method.redelivered) == (sent[3], True)


def test_reject_and_nack_without_requeue_drop(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 4)
    get_n(ch, qname, 4)
    ch.basic_reject(1, requeue=False)
    ch.basic_nack(3, multiple=True, requeue=False)  # m1, m2
    ch.basic_reject(4, requeue=True)
    method, _, body = ch.basic_get(qname, auto_ack=True)
    assert (body, method.redelivered) == (b"m3", True)
    assert ch.basic_get(qname) == (None, None, None)


def test_requeued_messages_keep_their_original_position(amqp, helpers, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 6)
    get_n(ch, qname, 4)  # m0..m3 unacked, m4 m5 ready
    ch.basic_reject(3, requeue=True)  # m2
    ch.basic_reject(1, requeue=True)  # m0
    got = [ch.basic_get(qname, auto_ack=True) for _ in range(4)]
    assert [body for _, _, body in got] == [sent[0], sent[2], sent[4], sent[5]]
    assert [m.redelivered for m, _, _ in got] == [True, True, False, False]


def test_redelivered_flag_on_consumer_after_requeue(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 1)
    c = Collector()
    ch.basic_consume(qname, c)
    assert helpers.poll(conn, lambda: len(c) == 1)
    ch.basic_nack(c.tags[0], requeue=True)
    assert helpers.poll(conn, lambda: len(c) == 2)
    (m1, _, b1), (m2, _, b2) = c.got
    assert (b1, m1.redelivered, m1.delivery_tag) == (b"m0", False, 1)
    assert (b2, m2.redelivered, m2.delivery_tag) == (b"m0", True, 2)


def test_unacked_requeued_when_channel_closes(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 3)
    c = Collector()
    ch.basic_consume(qname, c)
    assert helpers.poll(conn, lambda: len(c) == 3)
    ch.basic_ack(c.tags[1])
    ch.close()
    got = [conn.channel().basic_get(qname, auto_ack=True) for _ in range(3)]
    assert [(b, m.redelivered) for m, _, b in got[:2]] == [(sent[0], True), (sent[2], True)]
    assert got[2] == (None, None, None)


def test_unacked_requeued_when_connection_closes(amqp, helpers, qname):
    watcher = amqp.channel()
    watcher.queue_declare(qname, auto_delete=False)
    sent = fill(watcher, qname, 4)
    conn = amqp.connect()
    ch = conn.channel()
    c = Collector()
    ch.basic_consume(qname, c)
    assert helpers.poll(conn, lambda: len(c) == 4)
    assert helpers.ready_count(watcher, qname) == 0
    conn.close()
    got = [watcher.basic_get(qname, auto_ack=True) for _ in range(4)]
    assert [b for _, _, b in got] == sent
    assert all(m.redelivered for m, _, _ in got)
    watcher.queue_delete(qname)


def test_unacked_requeued_when_broker_closes_the_channel(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 3)
    c = Collector()
    ch.basic_consume(qname, c)
    assert helpers.poll(conn, lambda: len(c) == 3)
    ch.basic_ack(99)  # a channel error: the broker closes the channel
    assert expect_channel_error(ch).reply_code == 406
    assert helpers.get_all(conn.channel(), qname) == sent


def test_ack_after_the_queue_was_deleted_is_fine(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 1)
    method, _, _ = ch.basic_get(qname)
    ch.queue_delete(qname)
    ch.basic_ack(method.delivery_tag)
    ch.basic_qos(prefetch_count=0)  # no channel error
    assert ch.is_open


def test_recover_requeue_redelivers_to_the_consumer(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    sent = fill(ch, qname, 3)
    c = Collector()
    ch.basic_consume(qname, c)
    assert helpers.poll(conn, lambda: len(c) == 3)
    ch.basic_ack(c.tags[0])
    ch.basic_recover(requeue=True)
    assert helpers.poll(conn, lambda: len(c) == 5)
    redelivered = c.got[3:]
    assert [b for _, _, b in redelivered] == sent[1:]
    assert [m.redelivered for m, _, _ in redelivered] == [True, True]
    assert [m.delivery_tag for m, _, _ in redelivered] == [4, 5]  # tags keep counting
    ch.basic_ack(5, multiple=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_ack(2)  # the pre-recover tag is gone
        ch.basic_qos(prefetch_count=0)
    assert err.value.reply_code == 406


def test_unknown_delivery_tag_is_406(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.basic_ack(42)
    err = expect_channel_error(ch)
    assert (err.reply_code, err.reply_text) == (406, "PRECONDITION_FAILED - unknown delivery tag 42")
    assert conn.is_open  # a channel error only


def test_double_ack_is_406(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 1)
    method, _, _ = ch.basic_get(qname)
    ch.basic_ack(method.delivery_tag)
    ch.basic_ack(method.delivery_tag)
    err = expect_channel_error(ch)
    assert (err.reply_code, err.reply_text) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


@pytest.mark.parametrize("settle", ["ack", "nack", "reject"])
def test_settling_an_auto_acked_delivery_is_406(amqp, qname, settle):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 1)
    method, _, _ = ch.basic_get(qname, auto_ack=True)
    getattr(ch, f"basic_{settle}")(method.delivery_tag)
    err = expect_channel_error(ch)
    assert (err.reply_code, err.reply_text) == (406, "PRECONDITION_FAILED - unknown delivery tag 1")


def test_ack_on_another_channel_is_406(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    fill(ch, qname, 1)
    method, _, _ = ch.basic_get(qname)
    other = conn.channel()
    other.basic_ack(method.delivery_tag)
    err = expect_channel_error(other)
    assert err.reply_code == 406
    ch.basic_ack(method.delivery_tag)  # still fine where it was delivered
    assert ch.queue_declare(qname, passive=True).method.message_count == 0


# -- content: large bodies and properties ------------------------------------------------

FRAME_MAX = 131072
SIZES = [0, 1, FRAME_MAX - 8, FRAME_MAX - 7, 2 * (FRAME_MAX - 8), 300 * 1024, 1024 * 1024]


@pytest.mark.parametrize("frame_max", [FRAME_MAX, 4096])
def test_large_bodies_are_split_and_reassembled(amqp, helpers, qname, frame_max):
    conn = amqp.connect(frame_max=frame_max)
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    bodies = [os.urandom(size) for size in SIZES]
    for i, body in enumerate(bodies):
        ch.basic_publish("", qname, body, pika.BasicProperties(message_id=str(i)))
    # Half through basic.get, half through a consumer: both split by frame_max.
    got = []
    for _ in range(3):
        _method, props, body = ch.basic_get(qname, auto_ack=True)
        got.append((props.message_id, body))
    c = Collector()
    ch.basic_consume(qname, c, auto_ack=True)
    assert helpers.poll(conn, lambda: len(c) == len(SIZES) - 3)
    got += [(props.message_id, body) for _, props, body in c.got]
    assert [mid for mid, _ in got] == [str(i) for i in range(len(SIZES))]
    for (_, body), sent in zip(got, bodies):
        assert len(body) == len(sent)
        assert body == sent


ALL_PROPERTIES = {
    "content_type": "application/json",
    "content_encoding": "gzip",
    "headers": {
        "str": "text ✓",
        "int": 7,
        "negative": -123456,
        "big": 2**40,
        "decimal": Decimal("3.14"),
        "true": True,
        "false": False,
        "none": None,
        "when": datetime.datetime(2024, 5, 17, 12, 30, 45, tzinfo=datetime.UTC),
        "table": {"nested": {"deeper": "yes"}, "n": 1},
        "list": ["a", 1, ["b"], {"k": "v"}],
        "bytes": b"\x00\x01\xff",
        "empty": "",
    },
    "delivery_mode": 2,
    "priority": 5,
    "correlation_id": "corr-1",
    "reply_to": "reply.queue",
    "expiration": "60000",
    "message_id": "msg-1",
    "timestamp": 1700000000,
    "type": "order.created",
    "user_id": "guest",
    "app_id": "leveret-tests",
    "cluster_id": "cluster-x",
}


def props_dict(props: pika.BasicProperties) -> dict:
    return {name: getattr(props, name) for name in ALL_PROPERTIES}


def test_all_properties_round_trip_unchanged(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_publish("", qname, b"full", pika.BasicProperties(**ALL_PROPERTIES))
    ch.basic_publish("", qname, b"bare", pika.BasicProperties())
    _, props, body = ch.basic_get(qname, auto_ack=True)
    assert body == b"full"
    assert props_dict(props) == ALL_PROPERTIES
    c = Collector()
    ch.basic_consume(qname, c, auto_ack=True)
    assert helpers.poll(conn, lambda: len(c) == 1)
    assert props_dict(c.got[0][1]) == {name: None for name in ALL_PROPERTIES}


def test_properties_survive_requeue_and_fanout(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.exchange_declare(qname, "fanout", auto_delete=True)
    for suffix in ("a", "b"):
        ch.queue_declare(qname + suffix, exclusive=True)
        ch.queue_bind(qname + suffix, qname)
    ch.basic_publish(qname, "rk", b"x", pika.BasicProperties(**ALL_PROPERTIES))
    method, props_a, _ = ch.basic_get(qname + "a")
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, props_a2, _ = ch.basic_get(qname + "a", auto_ack=True)
    assert method.redelivered and (method.exchange, method.routing_key) == (qname, "rk")
    _, props_b, _ = ch.basic_get(qname + "b", auto_ack=True)
    assert props_dict(props_a) == props_dict(props_a2) == props_dict(props_b) == ALL_PROPERTIES


def test_user_id_must_match_the_connection_user(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.basic_publish("", qname, b"x", pika.BasicProperties(user_id="mallory"))
    err = expect_channel_error(ch)
    assert (err.reply_code, err.reply_text) == (
        406, ("PRECONDITION_FAILED - user_id property set to 'mallory' but authenticated "
              "user was 'guest'"))


# -- SelectConnection: consume with manual acks and a prefetch window --------------------


def test_select_connection_consume_ack_flow(amqp, helpers, qname):
    ch = amqp.channel()
    ch.queue_declare(qname)
    sent = fill(ch, qname, 30)
    state = {"in_flight": 0, "max_in_flight": 0, "bodies": [], "tags": [], "error": None}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(channel):
        channel.basic_qos(prefetch_count=5, callback=lambda _f: channel.basic_consume(
            qname, on_message))

    def on_message(channel, method, _props, body):
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        state["bodies"].append(body)
        state["tags"].append(method.delivery_tag)
        # Ack a little later, so the window can fill up.
        def ack():
            state["in_flight"] -= 1
            channel.basic_ack(method.delivery_tag)
            if len(state["bodies"]) == len(sent) and state["in_flight"] == 0:
                channel.queue_declare(qname, passive=True, callback=on_checked)
        select.ioloop.call_later(0.002, ack)

    def on_checked(frame):
        state["final"] = (frame.method.message_count, frame.method.consumer_count)
        select.close()

    select = pika.SelectConnection(amqp.params(), on_open_callback=on_open,
                                   on_close_callback=lambda *a: select.ioloop.stop())
    select.ioloop.call_later(10, select.ioloop.stop)
    select.ioloop.start()
    assert state["bodies"] == sent
    assert state["tags"] == list(range(1, 31))
    assert state["max_in_flight"] == 5
    assert state["final"] == (0, 1)
    assert helpers.ready_count(ch, qname) == 0
    ch.queue_delete(qname)
