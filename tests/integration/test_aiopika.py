"""Core flows through aio-pika, as an unmodified asyncio application uses it.

aio-pika opens channels with publisher confirms on, so every ``publish``
below waits for the broker's basic.ack (or its basic.return).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import aio_pika
import aiormq
import pytest
from aio_pika import DeliveryMode, ExchangeType, Message
from aio_pika.abc import AbstractIncomingMessage

TIMEOUT = 60  # a bound for what is due, not a budget: waits end when it comes


@pytest.fixture
async def connection(broker) -> AsyncIterator[aio_pika.abc.AbstractRobustConnection]:
    conn = await aio_pika.connect_robust(broker.url)
    try:
        yield conn
    finally:
        await conn.close()


async def test_declare_bind_publish_consume_ack(connection, qname):
    channel = await connection.channel()
    exchange = await channel.declare_exchange(f"{qname}.x", ExchangeType.DIRECT, auto_delete=True)
    queue = await channel.declare_queue(qname, auto_delete=True)
    await queue.bind(exchange, routing_key="rk")
    for i in range(3):
        confirmation = await exchange.publish(
            Message(f"m{i}".encode(), delivery_mode=DeliveryMode.PERSISTENT,
                    headers={"n": i}, content_type="text/plain"),
            routing_key="rk")
        assert isinstance(confirmation, aiormq.spec.Basic.Ack)

    received = []
    async with queue.iterator() as it:
        async for message in it:
            assert message.routing_key == "rk" and message.exchange == exchange.name
            assert message.content_type == "text/plain"
            assert message.delivery_mode == DeliveryMode.PERSISTENT
            received.append((message.body, message.headers["n"]))
            await message.ack()
            if len(received) == 3:
                break
    assert received == [(b"m0", 0), (b"m1", 1), (b"m2", 2)]
    declared = await channel.declare_queue(qname, passive=True)
    assert declared.declaration_result.message_count == 0


async def test_message_process_context_acks(connection, qname):
    channel = await connection.channel()
    queue = await channel.declare_queue(qname, auto_delete=True)
    await channel.default_exchange.publish(Message(b"work"), routing_key=qname)
    async with queue.iterator() as it:
        async for message in it:
            async with message.process():
                assert message.body == b"work"
            break
    assert (await channel.declare_queue(qname, passive=True)).declaration_result.message_count == 0


async def test_qos_limits_unacked_deliveries(connection, qname):
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=2)
    queue = await channel.declare_queue(qname, auto_delete=True)
    for i in range(5):
        await channel.default_exchange.publish(Message(str(i).encode()), routing_key=qname)

    inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
    await queue.consume(inbox.put)
    first = [await asyncio.wait_for(inbox.get(), TIMEOUT) for _ in range(2)]
    await asyncio.sleep(0.2)
    assert inbox.empty(), "a third message arrived with prefetch_count=2"
    await first[0].ack()
    third = await asyncio.wait_for(inbox.get(), TIMEOUT)
    assert [m.body for m in [*first, third]] == [b"0", b"1", b"2"]
    await asyncio.sleep(0.1)
    assert inbox.empty()


async def test_rpc_with_exclusive_reply_queue(connection, qname):
    server_channel = await connection.channel()
    requests = await server_channel.declare_queue(qname, auto_delete=True)

    async def serve(message: AbstractIncomingMessage) -> None:
        async with message.process():
            await server_channel.default_exchange.publish(
                Message(message.body.upper(), correlation_id=message.correlation_id),
                routing_key=message.reply_to)

    await requests.consume(serve)

    client_channel = await connection.channel()
    replies = await client_channel.declare_queue(exclusive=True)  # aio-pika names it
    pending: dict[str, asyncio.Future[bytes]] = {}

    async def on_reply(message: AbstractIncomingMessage) -> None:
        pending.pop(message.correlation_id).set_result(message.body)

    await replies.consume(on_reply, no_ack=True)

    async def call(body: bytes) -> bytes:
        correlation_id = str(uuid.uuid4())
        future = pending[correlation_id] = asyncio.get_running_loop().create_future()
        await client_channel.default_exchange.publish(
            Message(body, correlation_id=correlation_id, reply_to=replies.name),
            routing_key=qname)
        return await asyncio.wait_for(future, TIMEOUT)

    results = await asyncio.gather(*(call(f"req{i}".encode()) for i in range(10)))
    assert results == [f"REQ{i}".encode() for i in range(10)]


async def test_mandatory_unroutable_is_returned(connection, qname):
    channel = await connection.channel()
    returned: list[AbstractIncomingMessage] = []
    channel.return_callbacks.add(lambda _ch, message: returned.append(message))
    exchange = await channel.declare_exchange(f"{qname}.x", ExchangeType.DIRECT, auto_delete=True)
    queue = await channel.declare_queue(qname, auto_delete=True)
    await queue.bind(exchange, "bound")

    result = await exchange.publish(Message(b"lost", message_id="m-1"), routing_key="nowhere",
                                    mandatory=True)
    # aio-pika hands back the returned message instead of the ack frame.
    assert isinstance(result, aiormq.abc.DeliveredMessage)
    assert result.body == b"lost"
    assert isinstance(result.delivery, aiormq.spec.Basic.Return)
    assert (result.delivery.reply_code, result.delivery.reply_text) == (312, "NO_ROUTE")
    assert [m.body for m in returned] == [b"lost"]

    # Routable mandatory and unroutable non-mandatory publishes are simply acked.
    assert isinstance(await exchange.publish(Message(b"ok"), "bound", mandatory=True),
                      aiormq.spec.Basic.Ack)
    assert isinstance(await exchange.publish(Message(b"dropped"), "nowhere", mandatory=False),
                      aiormq.spec.Basic.Ack)
    assert len(returned) == 1


async def test_mandatory_return_raises_when_asked(connection, qname):
    channel = await connection.channel(on_return_raises=True)
    with pytest.raises(aio_pika.exceptions.PublishError):
        await channel.default_exchange.publish(Message(b"x"), routing_key=qname, mandatory=True)
    # The channel is still usable afterwards.
    queue = await channel.declare_queue(qname, auto_delete=True)
    assert isinstance(await channel.default_exchange.publish(Message(b"y"), routing_key=qname),
                      aiormq.spec.Basic.Ack)
    assert (await queue.get(timeout=TIMEOUT)).body == b"y"


async def test_404_closes_channel_connection_survives(broker, qname):
    conn = await aio_pika.connect(broker.url)  # not robust: the closed channel stays closed
    try:
        channel = await conn.channel()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
            await channel.declare_queue(f"{qname}-missing", passive=True)
        assert f"NOT_FOUND - no queue '{qname}-missing' in vhost '/'" in str(info.value)
        assert channel.is_closed
        assert not conn.is_closed

        other = await conn.channel()
        queue = await other.declare_queue(qname, auto_delete=True)
        await other.default_exchange.publish(Message(b"still here"), routing_key=qname)
        assert (await queue.get(timeout=TIMEOUT)).body == b"still here"
    finally:
        await conn.close()


async def test_robust_channel_reopens_after_404(connection, qname):
    channel = await connection.channel()
    with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
        await channel.get_exchange(f"{qname}-missing", ensure=True)
    queue = None
    for _ in range(50):  # the robust channel reopens itself in the background
        try:
            queue = await channel.declare_queue(qname, auto_delete=True)
            break
        except aiormq.exceptions.ChannelInvalidStateError:
            await asyncio.sleep(0.05)
    assert queue is not None
    await channel.default_exchange.publish(Message(b"again"), routing_key=qname)
    assert (await queue.get(timeout=TIMEOUT)).body == b"again"


async def test_nack_and_reject_requeue(connection, qname):
    channel = await connection.channel()
    queue = await channel.declare_queue(qname, auto_delete=True)
    for body in (b"a", b"b"):
        await channel.default_exchange.publish(Message(body), routing_key=qname)

    first = await queue.get(timeout=TIMEOUT)
    assert (first.body, first.redelivered) == (b"a", False)
    await first.nack(requeue=True)
    again = await queue.get(timeout=TIMEOUT)
    # Requeued messages keep their position: "a" comes back before "b".
    assert (again.body, again.redelivered) == (b"a", True)
    await again.reject(requeue=True)
    third = await queue.get(timeout=TIMEOUT)
    assert (third.body, third.redelivered) == (b"a", True)
    await third.reject(requeue=False)
    b = await queue.get(timeout=TIMEOUT)
    assert (b.body, b.redelivered) == (b"b", False)
    await b.nack(requeue=False)
    assert await queue.get(fail=False, timeout=TIMEOUT) is None


async def test_unacked_messages_requeued_when_channel_closes(connection, qname):
    channel = await connection.channel()
    queue = await channel.declare_queue(qname)
    await channel.default_exchange.publish(Message(b"keep"), routing_key=qname)
    message = await queue.get(timeout=TIMEOUT)
    assert message.body == b"keep"
    await channel.close()

    channel = await connection.channel()
    queue = await channel.declare_queue(qname)
    message = await queue.get(timeout=TIMEOUT)
    assert (message.body, message.redelivered) == (b"keep", True)
    await message.ack()
    await queue.delete()
