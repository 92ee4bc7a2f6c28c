"""Queues through pika: declare (server-named, passive, exclusive, auto-delete,
equivalence), declare-ok counts, bind/unbind, purge, delete and the consumer
cancel notification a deleted queue sends, as RabbitMQ 3.10 shows them.
"""

from __future__ import annotations

import re

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

LOCKED = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'. "
          "It could be originally declared on another connection or the exclusive property "
          "value does not match that of the original declaration.")


def test_server_named_queue(amqp, helpers):
    ch = amqp.channel()
    name = ch.queue_declare("", exclusive=True).method.queue
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", name), name
    other = ch.queue_declare("", exclusive=True).method.queue
    assert other != name
    ch.basic_publish("", name, b"to the generated name")
    assert helpers.get_all(ch, name) == [b"to the generated name"]


def test_empty_name_means_last_declared_queue(amqp, helpers, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.exchange_declare(qname, "fanout", auto_delete=True)
    ch.queue_bind("", qname)  # "" = the channel's last declared queue
    ch.basic_publish(qname, "", b"x")
    assert helpers.get_all(ch, qname) == [b"x"]
    # ... but not for a passive declare, which looks for a queue named "".
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("", passive=True)
    assert (err.value.reply_code, err.value.reply_text) == (
        404, "NOT_FOUND - no queue '' in vhost '/'")


def test_amq_prefix_queue_is_403(amqp, qname):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare("amq." + qname)
    assert err.value.reply_code == 403
    assert err.value.reply_text == (
        f"ACCESS_REFUSED - queue name 'amq.{qname}' contains reserved prefix 'amq.*'")


def test_passive_declare(amqp, qname):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare(qname, passive=True)
    assert err.value.reply_code == 404
    assert err.value.reply_text == f"NOT_FOUND - no queue '{qname}' in vhost '/'"
    ch = amqp.channel()
    ch.queue_declare(qname, auto_delete=True)
    # A passive declare ignores the other flags entirely.
    ok = ch.queue_declare(qname, passive=True, durable=True, exclusive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (qname, 0, 0)
    ch.queue_delete(qname)


def test_declare_ok_counts_ready_messages_and_all_consumers(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    for i in range(5):
        ch.basic_publish("", qname, b"%d" % i)
    method, _, _ = ch.basic_get(qname)  # one unacked: not counted as ready
    assert method.message_count == 4
    ok = ch.queue_declare(qname, exclusive=True).method
    assert (ok.message_count, ok.consumer_count) == (4, 0)
    ch2 = conn.channel()
    ch2.basic_qos(prefetch_count=1)
    got = []
    ch2.basic_consume(qname, lambda *a: got.append(a))
    ch.basic_consume(qname, lambda *a: None, auto_ack=False)  # ch has no prefetch limit
    helpers.settle(conn)
    ok = ch.queue_declare(qname, passive=True).method
    assert ok.consumer_count == 2  # all consumers, busy or not
    assert ok.message_count == 0


def test_exclusive_queue_is_locked_for_other_connections(amqp, helpers, qname):
    owner = amqp.channel()
    owner.queue_declare(qname, exclusive=True)
    owner.basic_publish("", qname, b"mine")
    for attempt in (
        lambda ch: ch.queue_declare(qname, exclusive=True),
        lambda ch: ch.queue_declare(qname),
        lambda ch: ch.queue_declare(qname, passive=True),
        lambda ch: ch.basic_consume(qname, lambda *a: None),
        lambda ch: ch.basic_get(qname),
        lambda ch: ch.queue_purge(qname),
        lambda ch: ch.queue_delete(qname),
        lambda ch: ch.queue_bind(qname, "amq.fanout"),
    ):
        other = amqp.channel()
        with pytest.raises(ChannelClosedByBroker) as err:
            attempt(other)
        assert (err.value.reply_code, err.value.reply_text) == (405, LOCKED.format(qname))
    # Other channels of the owning connection may use it.
    ch2 = owner.connection.channel()
    assert helpers.get_all(ch2, qname) == [b"mine"]


def test_exclusive_queue_vanishes_with_its_connection(amqp, qname):
    owner = amqp.connect()
    ch = owner.channel()
    ch.queue_declare(qname, exclusive=True, durable=True)
    ch.basic_publish("", qname, b"x")
    observer = amqp.channel()
    with pytest.raises(ChannelClosedByBroker):
        observer.queue_declare(qname, passive=True)  # locked while the owner lives
    owner.close()
    observer = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        observer.queue_declare(qname, passive=True)
    assert err.value.reply_code == 404


def test_exclusive_queue_survives_its_channel(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    ch.close()
    assert conn.channel().queue_declare(qname, passive=True).method.queue == qname


def test_auto_delete_queue_goes_when_last_consumer_cancels(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, auto_delete=True)
    ch.queue_declare(qname, passive=True)  # never consumed: stays
    tag1 = ch.basic_consume(qname, lambda *a: None)
    tag2 = ch.basic_consume(qname, lambda *a: None)
    ch.basic_cancel(tag1)
    assert ch.queue_declare(qname, passive=True).method.consumer_count == 1
    ch.basic_cancel(tag2)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare(qname, passive=True)
    assert err.value.reply_code == 404


def test_auto_delete_queue_goes_when_consumer_channel_closes(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, auto_delete=True)
    ch.basic_consume(qname, lambda *a: None)
    ch.close()
    with pytest.raises(ChannelClosedByBroker) as err:
        conn.channel().queue_declare(qname, passive=True)
    assert err.value.reply_code == 404


def test_redeclare_with_different_properties_is_406(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, auto_delete=True, arguments={"x-message-ttl": 60000})
    # Same properties, and arguments RabbitMQ does not compare, are fine.
    ch.queue_declare(qname, auto_delete=True,
                     arguments={"x-message-ttl": 60000, "x-whatever": 1})
    where = f"for queue '{qname}' in vhost '/'"
    cases = [
        ({"durable": True, "auto_delete": True, "arguments": {"x-message-ttl": 60000}},
         f"inequivalent arg 'durable' {where}: received 'true' but current is 'false'"),
        ({"auto_delete": False, "arguments": {"x-message-ttl": 60000}},
         f"inequivalent arg 'auto_delete' {where}: received 'false' but current is 'true'"),
        ({"auto_delete": True, "arguments": {"x-message-ttl": 1000}},
         f"inequivalent arg 'x-message-ttl' {where}: received '1000' but current is '60000'"),
        ({"auto_delete": True},
         (f"inequivalent arg 'x-message-ttl' {where}: received none but current is the value "
          "'60000' of type 'signedint'")),
    ]
    for kwargs, text in cases:
        ch = amqp.channel()
        with pytest.raises(ChannelClosedByBroker) as err:
            ch.queue_declare(qname, **kwargs)
        assert (err.value.reply_code, err.value.reply_text) == (406, "PRECONDITION_FAILED - " + text)
    ch = amqp.channel()
    ch.queue_delete(qname)


def test_exclusive_redeclare_by_owner_with_different_flags_is_406(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare(qname, exclusive=True, auto_delete=True)
    assert err.value.reply_code == 406


# -- bind / unbind -------------------------------------------------------------------


def test_bind_and_unbind(amqp, helpers, qname):
    ch = amqp.channel()
    ch.exchange_declare(qname, "direct")
    ch.queue_declare(qname, exclusive=True)
    ch.queue_bind(qname, qname, "k1")
    ch.queue_bind(qname, qname, "k2")
    ch.basic_publish(qname, "k1", b"1")
    ch.basic_publish(qname, "k2", b"2")
    ch.queue_unbind(qname, qname, "k1")
    ch.queue_unbind(qname, qname, "never-bound")  # unbinding nothing is fine
    ch.basic_publish(qname, "k1", b"3")
    ch.basic_publish(qname, "k2", b"4")
    assert helpers.get_all(ch, qname) == [b"1", b"2", b"4"]
    ch.exchange_delete(qname)


def test_bind_to_missing_exchange_or_queue_is_404(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, exclusive=True)
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_bind(qname, qname + "-nx", "k")
    assert (err.value.reply_code, err.value.reply_text) == (
        404, f"NOT_FOUND - no exchange '{qname}-nx' in vhost '/'")
    ch = ch.connection.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_bind(qname + "-nq", "amq.direct", "k")
    assert (err.value.reply_code, err.value.reply_text) == (
        404, f"NOT_FOUND - no queue '{qname}-nq' in vhost '/'")


# -- purge / delete ------------------------------------------------------------------


def test_purge_drops_ready_but_not_unacked(amqp, helpers, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname, exclusive=True)
    for i in range(4):
        ch.basic_publish("", qname, b"%d" % i)
    method, _, _ = ch.basic_get(qname)  # m0 unacked
    assert ch.queue_purge(qname).method.message_count == 3
    assert helpers.ready_count(ch, qname) == 0
    assert ch.queue_purge(qname).method.message_count == 0
    ch.basic_nack(method.delivery_tag, requeue=True)
    assert helpers.get_all(ch, qname) == [b"0"]


def test_delete_returns_message_count_and_is_idempotent(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname)
    for i in range(3):
        ch.basic_publish("", qname, b"%d" % i)
    assert ch.queue_delete(qname).method.message_count == 3
    assert ch.queue_delete(qname).method.message_count == 0
    with pytest.raises(ChannelClosedByBroker):
        ch.queue_declare(qname, passive=True)


def test_delete_if_unused_and_if_empty(amqp, qname):
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname)
    tag = ch.basic_consume(qname, lambda *a: None)
    with pytest.raises(ChannelClosedByBroker) as err:
        conn.channel().queue_delete(qname, if_unused=True)
    assert (err.value.reply_code, err.value.reply_text) == (
        406, f"PRECONDITION_FAILED - queue '{qname}' in vhost '/' in use")
    ch.basic_cancel(tag)
    ch.basic_publish("", qname, b"x")
    with pytest.raises(ChannelClosedByBroker) as err:
        conn.channel().queue_delete(qname, if_empty=True)
    assert (err.value.reply_code, err.value.reply_text) == (
        406, f"PRECONDITION_FAILED - queue '{qname}' in vhost '/' not empty")
    ch = conn.channel()
    assert ch.queue_declare(qname, passive=True).method.message_count == 1
    assert ch.queue_delete(qname, if_unused=True).method.message_count == 1


def test_deleted_queue_cancels_its_consumers(amqp, helpers, qname):
    """consumer_cancel_notify: the broker sends basic.cancel to each consumer."""
    conn = amqp.connect()
    ch = conn.channel()
    ch.queue_declare(qname)
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag_a = ch.basic_consume(qname, lambda *a: None)
    tag_b = ch.basic_consume(qname, lambda *a: None, auto_ack=True)
    other = amqp.channel()
    other.queue_delete(qname)
    assert helpers.poll(conn, lambda: len(cancelled) == 2)
    assert sorted(cancelled) == sorted([tag_a, tag_b])
    assert ch.is_open  # a notification, not an error
    assert ch.consumer_tags == []
    ch.queue_declare(qname, exclusive=True)  # the channel is still usable


def test_deleted_queue_cancel_with_select_connection(amqp, qname):
    """The same with SelectConnection, watching the raw Basic.Cancel method frame."""
    events: list[str] = []
    params = amqp.params()
    state: dict = {}

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        state["ch"] = ch
        ch.add_on_cancel_callback(on_cancel)
        ch.queue_declare(qname, callback=on_declared)

    def on_declared(_frame):
        ch = state["ch"]
        ch.basic_consume(qname, lambda *a: None, callback=on_consume_ok)

    def on_consume_ok(frame):
        events.append("consume-ok")
        state["tag"] = frame.method.consumer_tag
        state["ch"].queue_delete(qname, callback=lambda f: events.append(
            f"delete-ok {f.method.message_count}"))

    def on_cancel(frame):
        assert isinstance(frame.method, pika.spec.Basic.Cancel)
        events.append("cancel " + ("ours" if frame.method.consumer_tag == state["tag"] else "?"))

    conn = pika.SelectConnection(params, on_open_callback=on_open)
    conn.ioloop.call_later(3, conn.ioloop.stop)

    def check():
        if len(events) >= 3:
            conn.ioloop.stop()
        else:
            conn.ioloop.call_later(0.01, check)

    conn.ioloop.call_later(0.01, check)
    conn.ioloop.start()
    conn.close()
    conn.ioloop.start()
    assert sorted(events) == sorted(["consume-ok", "cancel ours", "delete-ok 0"])
