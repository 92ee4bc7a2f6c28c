"""Core flows through aiormq directly: the low-level asyncio client (and aio-pika's engine)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiormq
import aiormq.abc
import pytest
from pamqp import commands as spec

TIMEOUT = 60  # a bound for what is due, not a budget: waits end when it comes


@pytest.fixture
async def connection(broker) -> AsyncIterator[aiormq.Connection]:
    conn = await aiormq.connect(broker.url)
    try:
        yield conn
    finally:
        await conn.close()


async def test_publish_with_confirms_and_consume(connection, qname):
    channel = await connection.channel()  # publisher confirms on by default
    declare_ok = await channel.queue_declare(qname)
    assert (declare_ok.queue, declare_ok.message_count, declare_ok.consumer_count) == (qname, 0, 0)

    confirms = await asyncio.gather(*(
        channel.basic_publish(f"m{i}".encode(), routing_key=qname,
                              properties=spec.Basic.Properties(message_id=str(i)))
        for i in range(20)))
    assert all(isinstance(c, spec.Basic.Ack) for c in confirms)

    inbox: asyncio.Queue[aiormq.abc.DeliveredMessage] = asyncio.Queue()
    consume_ok = await channel.basic_consume(qname, inbox.put, no_ack=False)
    received = []
    for _ in range(20):
        message = await asyncio.wait_for(inbox.get(), TIMEOUT)
        assert message.delivery.consumer_tag == consume_ok.consumer_tag
        received.append(message.body)
        await channel.basic_ack(message.delivery.delivery_tag)
    assert received == [f"m{i}".encode() for i in range(20)]
    declare_ok = await channel.queue_declare(qname, passive=True)
    assert (declare_ok.message_count, declare_ok.consumer_count) == (0, 1)
    await channel.basic_cancel(consume_ok.consumer_tag)
    assert (await channel.queue_delete(qname)).message_count == 0


async def test_basic_get_and_get_empty(connection, qname):
    channel = await connection.channel()
    await channel.queue_declare(qname, auto_delete=True)
    for body in (b"one", b"two"):
        await channel.basic_publish(body, routing_key=qname)

    message = await channel.basic_get(qname)
    assert isinstance(message.delivery, spec.Basic.GetOk)
    assert (message.body, message.delivery.message_count, message.delivery.redelivered) == (
        b"one", 1, False)
    await channel.basic_ack(message.delivery.delivery_tag)
    message = await channel.basic_get(qname, no_ack=True)
    assert (message.body, message.delivery.message_count) == (b"two", 0)
    empty = await channel.basic_get(qname)
    assert isinstance(empty.delivery, spec.Basic.GetEmpty)


async def test_nack_requeue_and_multiple(connection, qname):
    channel = await connection.channel()
    await channel.queue_declare(qname, auto_delete=True)
    for i in range(3):
        await channel.basic_publish(str(i).encode(), routing_key=qname)
    tags = [(await channel.basic_get(qname)).delivery.delivery_tag for _ in range(3)]
    assert tags == sorted(tags)
    # nack(multiple) up to the second tag requeues the first two, in order.
    await channel.basic_nack(tags[1], multiple=True, requeue=True)
    await channel.basic_reject(tags[2], requeue=False)
    got = [await channel.basic_get(qname) for _ in range(2)]
    assert [(m.body, m.delivery.redelivered) for m in got] == [(b"0", True), (b"1", True)]
    await channel.basic_ack(got[1].delivery.delivery_tag, multiple=True)
    assert isinstance((await channel.basic_get(qname)).delivery, spec.Basic.GetEmpty)


async def test_unknown_delivery_tag_closes_channel_406(connection, qname):
    channel = await connection.channel()
    await channel.basic_ack(12345)
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await channel.queue_declare(qname, auto_delete=True)  # the close arrives first
    assert "PRECONDITION_FAILED - unknown delivery tag 12345" in str(info.value)
    assert not connection.is_closed
    assert (await (await connection.channel()).queue_declare(qname, auto_delete=True)).queue


async def test_exchange_bind_routes_through_exchanges(connection, qname):
    channel = await connection.channel()
    source, dest = f"{qname}.src", f"{qname}.dst"
    # Not auto-delete: unbinding its only binding would delete it.
    await channel.exchange_declare(source, exchange_type="topic")
    await channel.exchange_declare(dest, exchange_type="direct", auto_delete=True)
    await channel.queue_declare(qname, auto_delete=True)
    await channel.queue_bind(qname, dest, routing_key="a.b")
    assert isinstance(await channel.exchange_bind(dest, source, routing_key="a.*"),
                      spec.Exchange.BindOk)

    await channel.basic_publish(b"via-e2e", exchange=source, routing_key="a.b")
    await channel.basic_publish(b"filtered", exchange=source, routing_key="x.b")
    message = await channel.basic_get(qname, no_ack=True)
    assert (message.body, message.delivery.exchange, message.delivery.routing_key) == (
        b"via-e2e", source, "a.b")
    assert isinstance((await channel.basic_get(qname)).delivery, spec.Basic.GetEmpty)

    assert isinstance(await channel.exchange_unbind(dest, source, routing_key="a.*"),
                      spec.Exchange.UnbindOk)
    await channel.basic_publish(b"after-unbind", exchange=source, routing_key="a.b")
    assert isinstance((await channel.basic_get(qname)).delivery, spec.Basic.GetEmpty)
    await channel.exchange_delete(source)


async def test_mandatory_return_raises_publish_error(connection, qname):
    """aiormq's channels default to on_return_raises=True: the return becomes PublishError."""
    channel = await connection.channel()
    with pytest.raises(aiormq.exceptions.PublishError) as info:
        await channel.basic_publish(b"nobody", routing_key=qname, mandatory=True,
                                    properties=spec.Basic.Properties(message_id="ret-1"))
    returned, frame = info.value.message, info.value.frame
    assert returned.body == b"nobody" and returned.header.properties.message_id == "ret-1"
    assert (frame.reply_code, frame.reply_text, frame.exchange, frame.routing_key) == (
        312, "NO_ROUTE", "", qname)
    # The channel is fine, and the ack that followed the return was absorbed.
    await channel.queue_declare(qname, auto_delete=True)
    assert isinstance(await channel.basic_publish(b"x", routing_key=qname), spec.Basic.Ack)


async def test_mandatory_return_to_callback(connection, qname):
    channel = await connection.channel(on_return_raises=False)
    returned: list[aiormq.abc.DeliveredMessage] = []
    channel.on_return_callbacks.add(returned.append)
    result = await channel.basic_publish(
        b"nobody", routing_key=qname, mandatory=True,
        properties=spec.Basic.Properties(message_id="ret-2"))
    assert isinstance(result, aiormq.abc.DeliveredMessage)
    assert isinstance(result.delivery, spec.Basic.Return)
    assert (result.delivery.reply_code, result.delivery.routing_key) == (312, qname)
    assert [m.body for m in returned] == [b"nobody"]


async def test_tx_commit_and_rollback(connection, qname):
    channel = await connection.channel(publisher_confirms=False)
    observer = await connection.channel()
    await channel.queue_declare(qname, auto_delete=True)
    assert isinstance(await channel.tx_select(), spec.Tx.SelectOk)

    await channel.basic_publish(b"tx-1", routing_key=qname)
    await channel.basic_publish(b"tx-2", routing_key=qname)
    await asyncio.sleep(0.05)
    assert (await observer.queue_declare(qname, passive=True)).message_count == 0
    assert isinstance(await channel.tx_commit(), spec.Tx.CommitOk)
    assert (await observer.queue_declare(qname, passive=True)).message_count == 2

    await channel.basic_publish(b"tx-3", routing_key=qname)
    assert isinstance(await channel.tx_rollback(), spec.Tx.RollbackOk)
    assert (await observer.queue_declare(qname, passive=True)).message_count == 2

    # Acks are transactional too.
    message = await channel.basic_get(qname)
    await channel.basic_ack(message.delivery.delivery_tag)
    await channel.tx_rollback()  # the ack is discarded; the message stays unacked
    await channel.tx_commit()
    await channel.close()  # unacked "tx-1" goes back
    bodies = [(await observer.basic_get(qname, no_ack=True)).body for _ in range(2)]
    assert sorted(bodies) == [b"tx-1", b"tx-2"]


async def test_tx_after_confirm_is_refused(connection):
    channel = await connection.channel()  # confirm mode
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await channel.tx_select()
    assert "PRECONDITION_FAILED" in str(info.value)
    assert not connection.is_closed


async def test_prefetch_per_consumer(connection, qname):
    channel = await connection.channel()
    await channel.basic_qos(prefetch_count=1)
    await channel.queue_declare(qname, auto_delete=True)
    for i in range(4):
        await channel.basic_publish(str(i).encode(), routing_key=qname)
    inbox: asyncio.Queue[aiormq.abc.DeliveredMessage] = asyncio.Queue()
    await channel.basic_consume(qname, inbox.put)
    await channel.basic_consume(qname, inbox.put)
    got = [await asyncio.wait_for(inbox.get(), TIMEOUT) for _ in range(2)]
    await asyncio.sleep(0.2)
    assert inbox.empty()  # one unacked each
    assert len({m.delivery.consumer_tag for m in got}) == 2  # one to each consumer
    for m in got:
        await channel.basic_ack(m.delivery.delivery_tag)
    more = [await asyncio.wait_for(inbox.get(), TIMEOUT) for _ in range(2)]
    assert sorted(m.body for m in got + more) == [b"0", b"1", b"2", b"3"]
