"""A connection's life, and a queue's, leave no cyclic garbage in the broker.

The serving broker collects older generations rarely (``server.GC_THRESHOLD``), so a
cycle that outlives a young collection stays in memory until the next of those; a client
that connects for every request would make the broker grow by a connection's worth each
time until then. Here real sockets (aiormq, and raw frames for a client that vanishes) run
against the broker's asyncio adapter in a child process, and a collection with
``DEBUG_SAVEALL`` shows what only the cycle collector could have freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiormq
import pytest
from pamqp import body as pbody
from pamqp import commands, frame
from pamqp import header as pheader

from leveret.amqp.closing import OWNED_CHECK_MIN
from leveret.amqp.protocol import AMQPProtocol
from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.queues.queue import Queue


def leveret_garbage() -> Counter[str]:
    """Collect with every unreachable object saved; count the broker's among them."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return Counter(type(o).__qualname__ for o in gc.garbage
                       if type(o).__module__.startswith("leveret."))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def one_connection_life(url: str) -> None:
    """A client's session: confirms, publish, consume and ack, cancel, a channel error."""
    conn = await aiormq.connect(url)
    channel = await conn.channel(publisher_confirms=True)
    queue = await channel.queue_declare("gc-test", durable=False)
    await channel.basic_publish(b"x", routing_key=queue.queue)
    await channel.basic_qos(prefetch_count=5)
    got: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    tag = await channel.basic_consume(queue.queue, lambda m: got.done() or got.set_result(m))
    message = await asyncio.wait_for(got, 5)
    await channel.basic_ack(message.delivery_tag)
    await channel.basic_cancel(tag.consumer_tag)
    with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):
        await (await conn.channel()).queue_declare("no-such-queue", passive=True)
    await conn.close()


BASIC_DELIVER = bytes((0, 60, 0, 60))  # a method frame's class and method ids


async def one_dropped_connection(url: str) -> None:
    """A client that consumes, holds a delivery unacked and goes away without
    connection.close (its frames sent in one go, the replies never read)."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    methods = [
        commands.Connection.StartOk(client_properties={}, mechanism="PLAIN",
                                    response="\x00guest\x00guest", locale="en_US"),
        commands.Connection.TuneOk(channel_max=16, frame_max=131072, heartbeat=0),
        commands.Connection.Open(virtual_host="/"),
    ]
    data = b"AMQP\x00\x00\x09\x01" + b"".join(frame.marshal(m, 0) for m in methods)
    data += b"".join(frame.marshal(m, 1) for m in (
        commands.Channel.Open(), commands.Queue.Declare(queue="gc-test"),
        commands.Basic.Publish(routing_key="gc-test")))
    data += frame.marshal(pheader.ContentHeader(0, 1, commands.Basic.Properties()), 1)
    data += frame.marshal(pbody.ContentBody(b"x"), 1)
    data += frame.marshal(commands.Basic.Consume(queue="gc-test", consumer_tag="c"), 1)
    writer.write(data)
    received = b""
    while BASIC_DELIVER not in received:  # the delivery it will hold unacked
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        assert chunk, f"the broker closed the connection first: {received!r}"
        received += chunk
    writer.transport.abort()


async def queues_come_and_go(url: str) -> None:
    """Server-named queues of each store kind (plain, message TTL, priority) declared,
    used and deleted, one while a consumer holds a delivery from it and acks it after."""
    conn = await aiormq.connect(url)
    channel = await conn.channel(publisher_confirms=True)
    for arguments in ({}, {"x-message-ttl": 60000}, {"x-max-priority": 5}):
        queue = (await channel.queue_declare("", exclusive=True, arguments=arguments)).queue
        for body in (b"x", b"y"):
            await channel.basic_publish(body, routing_key=queue)
        got = await channel.basic_get(queue)
        await channel.basic_ack(got.delivery.delivery_tag)
        await channel.queue_delete(queue)
    other = await conn.channel()
    queue = (await other.queue_declare("", exclusive=True)).queue
    await other.basic_publish(b"z", routing_key=queue)
    held: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    await other.basic_consume(queue, lambda m: held.done() or held.set_result(m))
    message = await asyncio.wait_for(held, 5)
    await channel.queue_delete(queue)
    await other.basic_ack(message.delivery_tag)  # a late ack for a deleted queue
    await conn.close()


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[Broker, str]]:
    """A broker on a free port through its asyncio adapter: (broker, its AMQP URL)."""
    loop = asyncio.get_running_loop()
    config = Config()
    broker = Broker(config, loop=loop)
    server = await loop.create_server(lambda: AMQPProtocol(broker, config, loop),
                                      "127.0.0.1", 0)
    try:
        yield broker, f"amqp://guest:guest@127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    finally:
        server.close()
        await server.wait_closed()


async def garbage_after(life: Callable[[str], Awaitable[None]]) -> Counter[str]:
    """The broker's cyclic garbage from three runs of ``life`` (after one to warm up)."""
    async with serving() as (broker, url):

        async def settled() -> None:
            for _ in range(40):
                if not broker.connections and not broker.protocols:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the broker still holds a connection")

        await life(url)  # first-use caches, lazy imports
        await settled()
        leveret_garbage()
        for _ in range(3):
            await life(url)
        await settled()
        return leveret_garbage()


async def reply_queues_on_one_connection(url: str) -> int:
    """An RPC client's pattern: a server-named exclusive queue per call, deleted after it,
    all on one connection that stays open; returns how many queues the broker still has
    in memory before that connection closes."""
    conn = await aiormq.connect(url)
    channel = await conn.channel()
    for _ in range(500):
        queue = (await channel.queue_declare("", exclusive=True)).queue
        await channel.basic_publish(b"reply", routing_key=queue)
        await channel.basic_get(queue, no_ack=True)
        await channel.queue_delete(queue)
    gc.collect()
    alive = sum(1 for o in gc.get_objects() if type(o) is Queue)
    await conn.close()
    return alive


LIVES = {"closed": one_connection_life, "dropped": one_dropped_connection,
         "queues": queues_come_and_go}


def in_child(case: str) -> Any:
    """Run ``case`` in a child interpreter (other tests' brokers, freed by the collector
    whenever it runs, must not be counted) and return what it printed last, as JSON."""
    out = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("life", sorted(LIVES))
def test_a_connections_life_leaves_no_cyclic_garbage(life: str) -> None:
    assert in_child(life) == {}


def test_deleted_exclusive_queues_are_not_held_by_their_connection() -> None:
    """500 exclusive queues declared and deleted on one open connection: the connection
    keeps at most a check's worth of them (``closing.OwnedQueues``), not all 500."""
    assert in_child("held")["queues in memory"] <= OWNED_CHECK_MIN


async def queues_held() -> dict[str, int]:
    async with serving() as (_, url):
        return {"queues in memory": await reply_queues_on_one_connection(url)}


if __name__ == "__main__":
    case = sys.argv[1]
    result = queues_held() if case == "held" else garbage_after(LIVES[case])
    print(json.dumps(asyncio.run(result)))
