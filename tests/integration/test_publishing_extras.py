"""Sender-selected distribution (CC/BCC), direct reply-to and x-queue-type, through clients.

The pika tests use the ``amqp`` target, so they also run against a real
RabbitMQ 3.10 (``LEVERET_PIKA_TARGET=rabbitmq``), which is how the expected
texts and behaviours here were checked.
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

REPLY_TO = "amq.rabbitmq.reply-to"


def _closed_with(excinfo: pytest.ExceptionInfo, code: int) -> str:
    assert excinfo.value.reply_code == code, excinfo.value
    return excinfo.value.reply_text


# -- CC / BCC ------------------------------------------------------------------------------

def test_cc_and_bcc_route_as_extra_keys_and_bcc_is_stripped(amqp, qname, helpers):
    ch = amqp.channel()
    x = f"{qname}.x"
    ch.exchange_declare(x, "direct", auto_delete=True)
    names = [f"{qname}.{n}" for n in ("main", "cc", "bcc", "other")]
    for name in names:
        ch.queue_declare(name, auto_delete=False)
    try:
        for name, key in zip(names, ("rk", "k-cc", "k-bcc", "unrelated")):
            ch.queue_bind(name, x, key)
        props = pika.BasicProperties(headers={"CC": ["k-cc"], "BCC": ["k-bcc"], "keep": "me"})
        # Twice: the second finds its property list already checked, and is routed alike.
        ch.basic_publish(x, "rk", b"hello", props)
        ch.basic_publish(x, "rk", b"again", props)
        received = []
        for name in names[:3]:
            assert helpers.poll(ch.connection, lambda n=name: helpers.ready_count(ch, n) == 2)
            for expected in (b"hello", b"again"):
                method, got_props, body = ch.basic_get(name, auto_ack=True)
                assert body == expected and method.routing_key == "rk"
                received.append(got_props.headers)
        assert helpers.ready_count(ch, names[3]) == 0
        for headers in received:  # BCC removed for every recipient, CC kept
            assert headers == {"CC": ["k-cc"], "keep": "me"}
    finally:
        for name in names:
            ch.queue_delete(name)


def test_cc_on_the_default_exchange_and_each_queue_gets_one_copy(amqp, qname, helpers):
    ch = amqp.channel()
    a, b = f"{qname}.a", f"{qname}.b"
    ch.queue_declare(a, auto_delete=True)
    ch.queue_declare(b, auto_delete=True)
    ch.confirm_delivery()
    ch.basic_publish("", a, b"m", pika.BasicProperties(headers={"CC": [b, a], "BCC": [b]}),
                     mandatory=True)
    assert helpers.poll(ch.connection, lambda: helpers.ready_count(ch, b) == 1)
    assert helpers.ready_count(ch, a) == 1
    # Routed only through BCC still counts as routed; no return.
    ch.basic_publish("", "nowhere", b"n", pika.BasicProperties(headers={"BCC": [a]}),
                     mandatory=True)
    assert helpers.get_all(ch, a) == [b"m", b"n"]
    _method, props, _body = ch.basic_get(b, auto_ack=True)
    assert props.headers == {"CC": [b, a]}


def test_non_string_cc_elements_are_ignored(amqp, qname, helpers):
    ch = amqp.channel()
    ch.queue_declare(qname, auto_delete=True)
    ch.basic_publish("", "nowhere", b"m", pika.BasicProperties(headers={"CC": [qname, 5]}))
    assert helpers.poll(ch.connection, lambda: helpers.ready_count(ch, qname) == 1)
    _m, props, _b = ch.basic_get(qname, auto_ack=True)
    assert props.headers == {"CC": [qname, 5]}


@pytest.mark.parametrize("header", ["CC", "BCC"])
def test_cc_that_is_not_an_array_closes_the_channel(amqp, header):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as excinfo:
        ch.basic_publish("", "nowhere", b"m", pika.BasicProperties(headers={header: "q"}))
        ch.queue_declare("", exclusive=True)  # a round trip to receive the close
    text = _closed_with(excinfo, 406)
    assert text == f'PRECONDITION_FAILED - invalid message: {{unacceptable_type_in_header,"{header}",longstr}}'


def test_messages_without_cc_keep_their_exact_property_bytes(amqp, qname, helpers):
    ch = amqp.channel()
    ch.queue_declare(qname, auto_delete=True)
    headers = {"a": 1, "CCx": ["not routing"], "t": "x"}
    ch.basic_publish("", qname, b"m", pika.BasicProperties(headers=headers, reply_to="somewhere"))
    assert helpers.poll(ch.connection, lambda: helpers.ready_count(ch, qname) == 1)
    _m, props, _b = ch.basic_get(qname, auto_ack=True)
    assert props.headers == headers and props.reply_to == "somewhere"


# -- direct reply-to ---------------------------------------------------------------------

def test_direct_reply_to_round_trip_with_pika(amqp, qname, helpers):
    client = amqp.channel()
    server = amqp.channel()
    server.queue_declare(qname, auto_delete=True)
    replies = []
    client.basic_consume(REPLY_TO, lambda c, m, p, b: replies.append((m, p, b)), auto_ack=True)
    client.basic_publish("", qname, b"ping", pika.BasicProperties(reply_to=REPLY_TO,
                                                                  correlation_id="c1"))
    assert helpers.poll(server.connection, lambda: helpers.ready_count(server, qname) == 1)
    _m, props, body = server.basic_get(qname, auto_ack=True)
    reply_name = props.reply_to
    assert body == b"ping" and props.correlation_id == "c1"
    assert reply_name.startswith(REPLY_TO + ".") and len(reply_name) > len(REPLY_TO) + 8
    # The requester is alive: a passive (or active) declare of the name succeeds, creating nothing.
    ok = server.queue_declare(reply_name, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (reply_name, 0, 1)
    server.basic_publish("", reply_name, b"pong", pika.BasicProperties(correlation_id="c1"))
    assert helpers.poll(client.connection, lambda: len(replies) == 1)
    method, rprops, rbody = replies[0]
    assert rbody == b"pong" and rprops.correlation_id == "c1"
    assert method.routing_key == reply_name and method.exchange == "" and not method.redelivered
    # The requester goes away: the name is gone (404) and replies vanish.
    client.close()
    with pytest.raises(ChannelClosedByBroker) as excinfo:
        amqp.channel().queue_declare(reply_name, passive=True)
    assert _closed_with(excinfo, 404) == f"NOT_FOUND - no queue '{reply_name}' in vhost '/'"
    server.basic_publish("", reply_name, b"late")  # dropped, no error


def test_mandatory_reply_is_delivered_and_returned_as_in_rabbitmq_3_10(amqp, qname, helpers):
    client = amqp.channel()
    replies = []
    client.basic_consume(REPLY_TO, lambda c, m, p, b: replies.append(b), auto_ack=True)
    client.queue_declare(qname, auto_delete=True)
    client.basic_publish("", qname, b"req", pika.BasicProperties(reply_to=REPLY_TO))
    assert helpers.poll(client.connection, lambda: helpers.ready_count(client, qname) == 1)
    _m, props, _b = client.basic_get(qname, auto_ack=True)
    server = amqp.channel()
    server.confirm_delivery()
    # 3.10 treats the reply name as "not a queue" for mandatory (docs/direct-reply-to.md).
    with pytest.raises(UnroutableError):
        server.basic_publish("", props.reply_to, b"resp", mandatory=True)
    assert helpers.poll(client.connection, lambda: replies == [b"resp"])


def test_reply_consumer_rules(amqp):
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as excinfo:
        ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=False)
    assert _closed_with(excinfo, 406) == "PRECONDITION_FAILED - reply consumer cannot acknowledge"
    ch = amqp.channel()
    ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    with pytest.raises(ChannelClosedByBroker) as excinfo:
        ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    assert _closed_with(excinfo, 406) == "PRECONDITION_FAILED - reply consumer already set"
    ch = amqp.channel()
    with pytest.raises(ChannelClosedByBroker) as excinfo:
        ch.basic_publish("", "nowhere", b"x", pika.BasicProperties(reply_to=REPLY_TO))
        ch.queue_declare("", exclusive=True)
    assert _closed_with(excinfo, 406) == "PRECONDITION_FAILED - fast reply consumer does not exist"


def test_reply_consumer_can_be_cancelled_and_set_again(amqp):
    ch = amqp.channel()
    tag = ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    ch.basic_cancel(tag)
    ch.basic_consume(REPLY_TO, lambda *a: None, auto_ack=True)
    ok = ch.queue_declare(REPLY_TO, passive=True).method
    assert ok.queue == REPLY_TO


def test_unknown_reply_names_are_not_found(amqp):
    for passive in (True, False):
        name = f"{REPLY_TO}.{uuid.uuid4().hex}"
        with pytest.raises(ChannelClosedByBroker) as excinfo:
            amqp.channel().queue_declare(name, passive=passive)
        assert _closed_with(excinfo, 404) == f"NOT_FOUND - no queue '{name}' in vhost '/'"


async def test_direct_reply_to_rpc_with_aio_pika(amqp, qname):
    url = amqp.url
    server_conn = await aio_pika.connect(url)
    client_conn = await aio_pika.connect(url)
    try:
        server_ch = await server_conn.channel()
        queue = await server_ch.declare_queue(qname, auto_delete=True)

        async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                await server_ch.default_exchange.publish(
                    aio_pika.Message(message.body.upper(), correlation_id=message.correlation_id),
                    routing_key=message.reply_to)

        await queue.consume(serve)
        client_ch = await client_conn.channel()
        reply_queue = await client_ch.get_queue(REPLY_TO, ensure=False)
        futures: dict[str, asyncio.Future[bytes]] = {}

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            futures.pop(message.correlation_id).set_result(message.body)

        await reply_queue.consume(on_reply, no_ack=True)
        loop = asyncio.get_running_loop()
        for word in (b"one", b"two", b"three"):
            corr = uuid.uuid4().hex
            futures[corr] = loop.create_future()
            await client_ch.default_exchange.publish(
                aio_pika.Message(word, correlation_id=corr, reply_to=REPLY_TO), routing_key=qname)
            assert await asyncio.wait_for(futures[corr], 5) == word.upper()
    finally:
        await client_conn.close()
        await server_conn.close()


# -- x-queue-type ----------------------------------------------------------------------------

def _declare_fails(amqp, code: int, name: str, **kw) -> str:
    with pytest.raises(ChannelClosedByBroker) as excinfo:
        amqp.channel().queue_declare(name, **kw)
    return _closed_with(excinfo, code)


def test_quorum_queue_is_accepted_durable_and_usable(amqp, qname, helpers):
    ch = amqp.channel()
    ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum"})
    try:
        ch.basic_publish("", qname, b"q")
        assert helpers.poll(ch.connection, lambda: helpers.ready_count(ch, qname) == 1)
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum"})
        text = _declare_fails(amqp, 406, qname, durable=True)
        assert text == (f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue "
                        f"'{qname}' in vhost '/': received none but current is the value "
                        f"'quorum' of type 'longstr'")
        text = _declare_fails(amqp, 406, qname, durable=True, arguments={"x-queue-type": "classic"})
        assert text == (f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue "
                        f"'{qname}' in vhost '/': received 'classic' but current is 'quorum'")
    finally:
        amqp.channel().queue_delete(qname)


def test_classic_type_is_equivalent_to_no_type(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, auto_delete=True)
    ch.queue_declare(qname, auto_delete=True, arguments={"x-queue-type": "classic"})
    text = _declare_fails(amqp, 406, qname, auto_delete=True, arguments={"x-queue-type": "quorum"})
    assert text == (f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{qname}' "
                    f"in vhost '/': received the value 'quorum' of type 'longstr' but current is none")


@pytest.mark.parametrize(("kw", "expected"), [
    ({"durable": False}, "invalid property 'non-durable' for queue '{q}' in vhost '/'"),
    ({"durable": True, "exclusive": True},
     "invalid property 'exclusive-owner' for queue '{q}' in vhost '/'"),
    ({"durable": False, "auto_delete": True},
     "invalid property 'auto-delete' for queue '{q}' in vhost '/'"),
    ({"durable": True, "arguments": {"x-max-priority": 5}},
     "invalid arg 'x-max-priority' for queue '{q}' in vhost '/' of queue type rabbit_quorum_queue"),
    ({"durable": True, "arguments": {"x-queue-mode": "lazy"}},
     "invalid arg 'x-queue-mode' for queue '{q}' in vhost '/' of queue type rabbit_quorum_queue"),
])
def test_quorum_queue_refusals(amqp, qname, kw, expected):
    arguments = {"x-queue-type": "quorum", **kw.pop("arguments", {})}
    text = _declare_fails(amqp, 406, qname, arguments=arguments, **kw)
    assert text == "PRECONDITION_FAILED - " + expected.format(q=qname)


def test_server_named_quorum_queue_is_refused(amqp):
    text = _declare_fails(amqp, 406, "", durable=True, arguments={"x-queue-type": "quorum"})
    assert text == "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue"


def test_unknown_queue_type_is_refused(amqp, qname):
    text = _declare_fails(amqp, 406, qname, arguments={"x-queue-type": "bogus"})
    assert text == (f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue '{qname}' in "
                    f"vhost '/': \"unsupported queue type 'bogus'\"")


def test_lazy_mode_is_accepted_and_compared(amqp, qname):
    ch = amqp.channel()
    ch.queue_declare(qname, auto_delete=True, arguments={"x-queue-mode": "lazy"})
    ch.queue_declare(qname, auto_delete=True, arguments={"x-queue-mode": "lazy"})
    text = _declare_fails(amqp, 406, qname, auto_delete=True)
    assert text == (f"PRECONDITION_FAILED - inequivalent arg 'x-queue-mode' for queue '{qname}' "
                    f"in vhost '/': received none but current is the value 'lazy' of type 'longstr'")
    text = _declare_fails(amqp, 406, f"{qname}.b", arguments={"x-queue-mode": "bogus"})
    assert text == (f"PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue '{qname}.b' in "
                    f"vhost '/': \"unsupported queue mode 'bogus'\"")
