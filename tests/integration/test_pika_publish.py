"""Publishing through pika: mandatory and basic.return, publisher confirms
(ack, multiple, return-before-ack), transactions, and the confirm/tx mutual
exclusion, as RabbitMQ 3.10 shows them.

Where the *order* of what the broker sends matters (return before ack,
return before commit-ok) the test uses SelectConnection and records events
as pika's callbacks fire, which is the order of the frames on the wire.
"""

from __future__ import annotations

from collections.abc import Callable

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError


def run_select(amqp, scenario: Callable, timeout: float = 60.0) -> list:
    """Open a SelectConnection and a channel, call ``scenario(channel, events, done)``;
    ``done()`` ends the run. Returns the events list."""
    events: list = []
    state: dict = {}

    def done() -> None:
        state["done"] = True
        conn.close()

    def on_open(connection) -> None:
        connection.channel(on_open_callback=lambda ch: scenario(ch, events, done))

    conn = pika.SelectConnection(amqp.params(), on_open_callback=on_open,
                                 on_close_callback=lambda *a: conn.ioloop.stop())
    conn.ioloop.call_later(timeout, conn.ioloop.stop)
    conn.ioloop.start()
    if conn.is_open:
        conn.close()
        conn.ioloop.start()
    assert state.get("done"), f"scenario did not finish; events so far: {events}"
    return events


# -- mandatory ---------------------------------------------------------------------------


def test_mandatory_unroutable_is_returned_312(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.exchange_declare(qname, "direct", auto_delete=True)
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname, "known")
    returned = []
    ch.add_on_return_callback(lambda _ch, method, props, body: returned.append(
        (method.reply_code, method.reply_text, method.exchange, method.routing_key,
         props.message_id, props.headers, body)))
    props = pika.BasicProperties(message_id="m-1", headers={"h": "v"})
    ch.basic_publish(qname, "unknown", b"back", props, mandatory=True)
    ch.basic_publish("", qname + "-no-such-queue", b"default", mandatory=True)
    ch.basic_publish(qname, "unknown", b"dropped silently")  # not mandatory
    ch.basic_publish(qname, "known", b"routed", mandatory=True)
    assert helpers.poll(conn, lambda: len(returned) >= 2)
    helpers.settle(conn)
    assert returned == [
        (312, "NO_ROUTE", qname, "unknown", "m-1", {"h": "v"}, b"back"),
        (312, "NO_ROUTE", "", qname + "-no-such-queue", None, None, b"default"),
    ]
    assert helpers.get_all(ch, qname) == [b"routed"]


def test_mandatory_large_message_is_returned_whole(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    body = bytes(range(256)) * 2048  # 512 KiB: several frames each way
    returned = []
    ch.add_on_return_callback(lambda _ch, _m, _p, b: returned.append(b))
    ch.basic_publish("amq.direct", qname, body, mandatory=True)
    assert helpers.poll(conn, lambda: returned)
    assert returned == [body]


# -- publisher confirms ------------------------------------------------------------------


def test_blocking_confirms(amqp, helpers, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.confirm_delivery()
    ch.confirm_delivery()  # confirm.select twice is fine
    for i in range(5):
        ch.basic_publish("", qname, b"%d" % i)  # raises unless acked
    ch.basic_publish("amq.direct", "nowhere", b"unroutable but acked")
    with pytest.raises(UnroutableError) as err:
        ch.basic_publish("amq.direct", "nowhere", b"mandatory", mandatory=True)
    (returned,) = err.value.messages
    assert (returned.method.reply_code, returned.body) == (312, b"mandatory")
    assert helpers.ready_count(ch, qname) == 5


def test_confirm_acks_cover_every_publish_once(amqp, qname):
    n = 50

    def scenario(ch, events, done):
        def on_confirm(frame):
            m = frame.method
            events.append((type(m).__name__, m.delivery_tag, m.multiple))
            covered = set()
            last = 0
            for _, tag, multiple in events:
                covered |= set(range(last + 1, tag + 1)) if multiple else {tag}
                last = max(last, tag)
            if covered >= set(range(1, n + 1)):
                done()

        def on_selected(_frame):
            for i in range(n):
                ch.basic_publish("", qname, b"%d" % i)

        ch.add_on_return_callback(lambda *a: events.append(("return",)))
        ch.queue_declare(qname, exclusive=True, callback=lambda _f: ch.confirm_delivery(
            on_confirm, callback=on_selected))

    events = run_select(amqp, scenario)
    assert all(kind == "Ack" for kind, *_ in events)
    # Each tag confirmed exactly once: multiple acks never overlap earlier confirms.
    seen: list[int] = []
    last = 0
    for _, tag, multiple in events:
        new = list(range(last + 1, tag + 1)) if multiple else [tag]
        assert not set(new) & set(seen), events
        seen += new
        last = max(last, tag)
    assert sorted(seen) == list(range(1, n + 1))


def test_return_comes_before_ack_for_mandatory_unroutable(amqp, qname):
    def scenario(ch, events, done):
        def on_confirm(frame):
            events.append(("ack", frame.method.delivery_tag, frame.method.multiple))
            if frame.method.delivery_tag == 3:
                done()

        def on_return(_ch, method, _props, body):
            events.append(("return", method.reply_code, body))

        def on_selected(_frame):
            ch.basic_publish("", qname, b"routed", mandatory=True)
            ch.basic_publish("amq.direct", "nowhere", b"unroutable", mandatory=True)
            ch.basic_publish("", qname, b"routed again", mandatory=True)

        ch.add_on_return_callback(on_return)
        ch.queue_declare(qname, exclusive=True, callback=lambda _f: ch.confirm_delivery(
            on_confirm, callback=on_selected))

    events = run_select(amqp, scenario)
    returns = [e for e in events if e[0] == "return"]
    assert returns == [("return", 312, b"unroutable")]
    first_ack_covering_2 = next(i for i, e in enumerate(events)
                                if e[0] == "ack" and (e[1] == 2 or (e[2] and e[1] > 2)))
    assert events.index(returns[0]) < first_ack_covering_2


def test_publish_in_confirm_mode_to_missing_exchange_closes_channel(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.basic_publish(qname, "k", b"x")
    assert (err.value.reply_code, err.value.reply_text) == (
        404, f"NOT_FOUND - no exchange '{qname}' in vhost '/'")


# -- transactions ------------------------------------------------------------------------


def test_tx_commit_and_rollback_publishes(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    watcher = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.tx_select()
    ch.tx_select()  # idempotent
    ch.basic_publish("", qname, b"1")
    ch.basic_publish("", qname, b"2")
    assert helpers.ready_count(watcher, qname) == 0  # nothing until commit
    ch.tx_commit()
    assert helpers.ready_count(watcher, qname) == 2
    ch.basic_publish("", qname, b"3")
    ch.tx_rollback()
    ch.tx_commit()  # nothing left to commit: the rollback discarded "3"
    ch.basic_publish("", qname, b"4")
    ch.tx_commit()
    assert helpers.get_all(watcher, qname) == [b"1", b"2", b"4"]


def test_tx_acks_take_effect_at_commit(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    for body in (b"a", b"b", b"c"):
        ch.basic_publish("", qname, body)
    ch.tx_select()
    tags = [ch.basic_get(qname)[0].delivery_tag for _ in range(3)]  # gets are not transactional
    ch.basic_ack(tags[0])
    ch.basic_nack(tags[1], requeue=False)
    ch.basic_reject(tags[2], requeue=True)
    ch.tx_rollback()  # none of the three happened
    assert helpers.ready_count(ch, qname) == 0
    ch.basic_ack(tags[0])
    ch.tx_commit()
    ch.close()  # b and c were never settled: requeued with the channel
    ch = conn.channel()
    got = [ch.basic_get(qname, auto_ack=True) for _ in range(3)]
    assert [(b, m.redelivered) for m, _, b in got[:2]] == [(b"b", True), (b"c", True)]
    assert got[2] == (None, None, None)


def test_tx_nack_and_reject_take_effect_at_commit(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    for body in (b"a", b"b"):
        ch.basic_publish("", qname, body)
    ch.tx_select()
    first = ch.basic_get(qname)[0].delivery_tag
    second = ch.basic_get(qname)[0].delivery_tag
    ch.basic_reject(first, requeue=True)
    ch.basic_nack(second, requeue=False)
    assert helpers.ready_count(ch, qname) == 0
    ch.tx_commit()
    method, _, body = ch.basic_get(qname)
    assert (body, method.redelivered) == (b"a", True)
    assert helpers.ready_count(ch, qname) == 0  # "b" was dropped


def test_tx_unknown_tag_fails_at_ack_time(amqp, qname):
    ch = amqp.channel()
    ch.tx_select()
    ch.basic_ack(7)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.tx_commit()
    assert (err.value.reply_code, err.value.reply_text) == (
        406, "PRECONDITION_FAILED - unknown delivery tag 7")


def test_tx_return_comes_before_commit_ok(amqp, qname):
    def scenario(ch, events, done):
        def on_return(_ch, method, _props, body):
            events.append(("return", method.reply_code, body))

        def on_commit_ok(_frame):
            events.append(("commit-ok",))
            done()

        def on_selected(_frame):
            ch.basic_publish("amq.direct", "nowhere", b"unroutable", mandatory=True)
            ch.basic_publish("", qname, b"routed", mandatory=True)
            # Before commit nothing is routed, so nothing can be returned yet.
            ch.queue_declare(qname, passive=True, callback=on_checked)

        def on_checked(frame):
            events.append(("ready", frame.method.message_count))
            ch.tx_commit(callback=on_commit_ok)

        ch.add_on_return_callback(on_return)
        ch.queue_declare(qname, exclusive=True, callback=lambda _f: ch.tx_select(
            callback=on_selected))

    events = run_select(amqp, scenario)
    assert events == [("ready", 0), ("return", 312, b"unroutable"), ("commit-ok",)]


def test_tx_publish_to_missing_exchange_fails_at_publish(amqp, qname):
    ch = amqp.channel()
    ch.tx_select()
    ch.basic_publish(qname, "k", b"x")
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("", exclusive=True)
    assert (err.value.reply_code, err.value.reply_text) == (
        404, f"NOT_FOUND - no exchange '{qname}' in vhost '/'")


def test_tx_publishes_are_lost_if_the_channel_closes(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.tx_select()
    ch.basic_publish("", qname, b"never committed")
    ch.close()
    assert helpers.ready_count(conn.channel(), qname) == 0


@pytest.mark.parametrize("method", ["tx_commit", "tx_rollback"])
def test_commit_or_rollback_without_select_is_406(amqp, method):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        getattr(ch, method)()
    assert (err.value.reply_code, err.value.reply_text) == (
        406, "PRECONDITION_FAILED - channel is not transactional")


def test_confirm_after_tx_is_406(amqp):
    ch = amqp.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.confirm_delivery()
    assert (err.value.reply_code, err.value.reply_text) == (
        406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode")


def test_tx_after_confirm_is_406(amqp):
    ch = amqp.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.tx_select()
    assert (err.value.reply_code, err.value.reply_text) == (
        406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode")
