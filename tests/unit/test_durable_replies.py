"""Replies about durable definitions wait for the group commit that records them, and
nothing the channel says afterwards overtakes them (sans-IO core, a store whose writes
the test releases by hand); so do the management API's answers to its writes."""

from __future__ import annotations

import asyncio
import base64
import threading

from aiohttp.test_utils import TestClient, TestServer
from pamqp import commands

from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.management_ui import api
from leveret.management_ui.router import COMMIT_FAILED
from leveret.management_ui.service import State
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import StoreError

from .wire import Client


class GatedStore(MemoryStore):
    """Each write waits until the test opens the gate (or fails it)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.fail = False

    def write_batch(self, batch):
        assert self.gate.wait(10)
        if self.fail:
            raise StoreError("disk full (simulated)")
        super().write_batch(batch)


async def settle() -> None:
    """Let the loop run a while: with the gate closed nothing can be written, however long
    this takes, so "no reply yet" holds on any machine."""
    for _ in range(20):
        await asyncio.sleep(0.005)


async def written(c: Client) -> None:
    """Once the gate is open: wait until every batch is written (not for a guessed time),
    then let the loop deliver the replies that waited for them."""
    await c.broker.log.drain()
    await settle()


async def client() -> tuple[Client, GatedStore]:
    store = GatedStore()
    broker = Broker(Config(), store, asyncio.get_running_loop())
    c = Client(broker)
    c.handshake()
    c.open_channel(1)
    return c, store


def names(frames) -> list[str]:
    return [type(f).__name__ for _, f in frames]


async def test_durable_declare_ok_waits_and_later_replies_queue_behind_it():
    c, store = await client()
    c.feed(c.method(1, commands.Queue.Declare(queue="durable-q", durable=True))
           + c.method(1, commands.Queue.Declare(queue="transient-q"))
           + c.method(1, commands.Basic.Get(queue="transient-q")))
    await settle()
    assert c.drain() == []  # not durable yet: no reply, and nothing after it either
    store.gate.set()
    await written(c)
    assert names(c.drain()) == ["DeclareOk", "DeclareOk", "GetEmpty"]
    assert [q.name for q in store.load_definitions().queues] == ["durable-q"]
    c.broker.log.close()


async def test_deliveries_do_not_overtake_a_held_reply():
    c, store = await client()
    store.gate.set()
    c.call(1, commands.Queue.Declare(queue="work"))
    c.call(1, commands.Basic.Consume(queue="work", consumer_tag="ct", no_ack=True))
    await settle()
    c.drain()
    store.gate.clear()
    c.feed(c.method(1, commands.Exchange.Declare(exchange="dx", exchange_type="direct",
                                                 durable=True))
           + c.publish_bytes(1, b"hello", routing_key="work"))
    await settle()
    assert c.drain() == []
    store.gate.set()
    await written(c)
    assert names(c.drain()) == ["DeclareOk", "Deliver", "ContentHeader", "ContentBody"]
    c.broker.log.close()


async def test_transient_objects_do_not_wait():
    c, store = await client()
    c.call(1, commands.Queue.Declare(queue="d", durable=True))  # a commit is now pending
    frames = c.call(1, commands.Exchange.Declare(exchange="tx", exchange_type="fanout"))
    assert frames == []  # same channel: behind the held declare-ok
    c.open_channel(2)
    frames = c.call(2, commands.Queue.Declare(queue="t", auto_delete=True))
    assert names(frames) == ["DeclareOk"]  # another channel, a transient queue: at once
    store.gate.set()
    await written(c)
    assert names(c.drain()) == ["DeclareOk", "DeclareOk"]
    c.broker.log.close()


async def test_failed_commit_closes_the_channel_instead_of_replying():
    c, store = await client()
    store.fail = True
    c.feed(c.method(1, commands.Queue.Declare(queue="q", durable=True))
           + c.method(1, commands.Queue.Declare(queue="later")))
    store.gate.set()
    await written(c)
    frames = c.drain()
    assert names(frames) == ["Close"]
    close = frames[0][1]
    assert close.reply_code == 541 and (close.class_id, close.method_id) == (50, 10)
    assert "queue.declare failed" in close.reply_text
    c.broker.log.close()


async def test_channel_close_ok_follows_the_held_reply():
    c, store = await client()
    c.feed(c.method(1, commands.Queue.Delete(queue="nothing-here"))
           + c.method(1, commands.Queue.Declare(queue="q", durable=True))
           + c.method(1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)))
    await settle()
    early = c.drain()
    store.gate.set()
    await written(c)
    assert names(early + c.drain()) == ["DeleteOk", "DeclareOk", "CloseOk"]
    c.broker.log.close()


# -- the management API's writes ------------------------------------------------------------

GUEST = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


async def http_client() -> tuple[TestClient, GatedStore, Broker]:
    store = GatedStore()
    config = Config()
    broker = Broker(config, store, asyncio.get_running_loop())
    broker.accounts.recover([])  # a fresh node: guest and "/"
    store.gate.set()
    assert await broker.log.committed()
    store.gate.clear()
    c = TestClient(TestServer(api.build_app(State(broker, config))))
    await c.start_server()
    return c, store, broker


async def test_http_write_answers_after_its_commit():
    c, store, broker = await http_client()
    put = asyncio.ensure_future(c.put("/api/queues/%2F/q", json={"durable": True},
                                      headers=GUEST))
    await settle()
    assert not put.done()  # declared, not yet durable: no answer
    store.gate.set()
    assert (await put).status == 201
    assert [q.name for q in store.load_definitions().queues] == ["q"]
    await c.close()
    broker.log.close()


async def test_http_write_that_records_nothing_answers_at_once():
    c, store, broker = await http_client()
    resp = await c.delete("/api/queues/%2F/nothing-here", headers=GUEST)
    assert resp.status == 404
    resp = await c.put("/api/queues/%2F/t", json={"durable": False, "auto_delete": True},
                       headers=GUEST)
    assert resp.status == 201  # a transient queue: nothing to commit
    store.gate.set()
    await c.close()
    broker.log.close()


async def test_http_write_whose_commit_fails_is_a_500():
    c, store, broker = await http_client()
    store.fail = True
    store.gate.set()
    resp = await c.put("/api/exchanges/%2F/x", json={"type": "fanout", "durable": True},
                       headers=GUEST)
    assert resp.status == 500
    assert await resp.json() == {"error": "internal_server_error", "reason": COMMIT_FAILED}
    await c.close()
    broker.log.close()
