"""Message deduplication through real clients: the plugin's contract, LavinMQ's argument,
the queue mode, a duplicate confirmed with an ack, and the window across kill -9.

The shared broker serves the contract tests (unique names each); the kill -9 tests start
their own.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from base64 import b64encode

import aio_pika
import aiormq
import pika
import pytest

from tests.integration.conftest import WAIT as DEADLINE
from tests.integration.conftest import dedupe_props as props
from tests.integration.conftest import wait_for


def connect(b) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(b.url))


def count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def api(b, path: str) -> dict:
    request = urllib.request.Request(b.api_url + "/api" + path)
    request.add_header("Authorization", "Basic " + b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=DEADLINE) as response:
        return json.loads(response.read())


def confirmed_publishes(ch, exchange: str, routing_key: str, bodies_props) -> list[bool]:
    """Publish each (body, properties) under confirms; True per ack (pika raises on nack)."""
    out = []
    for body, p in bodies_props:
        try:
            ch.basic_publish(exchange, routing_key, body, p)
            out.append(True)
        except pika.exceptions.NackError:
            out.append(False)
    return out


# -- the plugin's exchange type ------------------------------------------------------------

@pytest.mark.parametrize("arguments, text", [
    ({}, "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": 0},
     "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": "ten"},
     "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
    ({"x-cache-size": 10, "x-cache-ttl": -1},
     "Invalid argument, 'x-cache-ttl' must be an integer greater than 0"),
    ({"x-cache-size": 10, "x-cache-persistence": "bogus"},
     "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'"),
])
def test_bad_window_arguments_are_refused_with_the_plugins_texts(broker, qname, arguments,
                                                                  text):
    conn = connect(broker)
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.exchange_declare(f"{qname}.x", "x-message-deduplication", arguments=arguments)
    assert err.value.reply_code == 406
    assert err.value.reply_text == f"PRECONDITION_FAILED - {text}"
    conn.close()


def test_duplicates_are_acked_and_enqueued_once(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication",
                        arguments={"x-cache-size": 1000, "x-cache-ttl": 60000})
    for q in (f"{qname}.a", f"{qname}.b"):
        ch.queue_declare(q)
        ch.queue_bind(q, f"{qname}.x", "ignored")  # the type routes as fanout
    ch.confirm_delivery()
    acks = confirmed_publishes(ch, f"{qname}.x", "any",
                               [(b"copy %d" % i, props("k1")) for i in range(6)])
    assert acks == [True] * 6
    assert count(ch, f"{qname}.a") == count(ch, f"{qname}.b") == 1
    _, _, body = ch.basic_get(f"{qname}.a", auto_ack=True)
    assert body == b"copy 0"
    # mandatory: a duplicate is not returned (its first copy was routed)
    returned = []
    ch.add_on_return_callback(lambda *args: returned.append(args))
    ch.basic_publish(f"{qname}.x", "any", b"again", props("k1"), mandatory=True)
    conn.process_data_events(0)
    assert returned == []
    conn.close()


def test_messages_without_the_header_are_never_deduplicated(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication", arguments={"x-cache-size": 5})
    ch.queue_declare(qname)
    ch.queue_bind(qname, f"{qname}.x")
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish(f"{qname}.x", "", b"same body", props(other="h"))
        ch.basic_publish(f"{qname}.x", "", b"same body")
    assert count(ch, qname) == 6
    conn.close()


def test_keys_are_typed_strings_integers_and_bytes_differ(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication", arguments={"x-cache-size": 50})
    ch.queue_declare(qname)
    ch.queue_bind(qname, f"{qname}.x")
    ch.confirm_delivery()
    for key in (1, "1", b"1", 1, "1", b"1", 2**40, 2**40):
        ch.basic_publish(f"{qname}.x", "", b"m", props(key))
    assert count(ch, qname) == 4  # 1, "1", b"1" (pika sends bytes as a byte array), 2**40
    conn.close()


def test_the_window_is_fifo_at_its_size(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication", arguments={"x-cache-size": 3})
    ch.queue_declare(qname)
    ch.queue_bind(qname, f"{qname}.x")
    ch.confirm_delivery()
    for key in ("a", "b", "c", "d"):  # "a" is evicted by "d"
        ch.basic_publish(f"{qname}.x", "", key.encode(), props(key))
    for key in ("b", "c", "d"):
        ch.basic_publish(f"{qname}.x", "", b"dup", props(key))
    assert count(ch, qname) == 4
    ch.basic_publish(f"{qname}.x", "", b"a again", props("a"))  # evicted: admitted (evicts "b")
    assert count(ch, qname) == 5
    ch.basic_publish(f"{qname}.x", "", b"b again", props("b"))
    assert count(ch, qname) == 6
    conn.close()


def test_the_message_ttl_header_expires_its_key(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication",
                        arguments={"x-cache-size": 10, "x-cache-ttl": 600000})
    ch.queue_declare(qname)
    ch.queue_bind(qname, f"{qname}.x")
    ch.confirm_delivery()
    ch.basic_publish(f"{qname}.x", "", b"first", props("short", ttl=100))
    ch.basic_publish(f"{qname}.x", "", b"long", props("long"))
    time.sleep(0.3)  # past the 100 ms key TTL: what is tested is that it expired
    ch.basic_publish(f"{qname}.x", "", b"second", props("short"))
    ch.basic_publish(f"{qname}.x", "", b"long again", props("long"))
    assert count(ch, qname) == 3
    conn.close()


def test_lavinmq_argument_on_any_exchange_and_a_named_header(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "direct",
                        arguments={"x-message-deduplication": True,
                                   "x-deduplication-header": "msg-id"})
    ch.queue_declare(qname)
    ch.queue_bind(qname, f"{qname}.x", "rk")
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish(f"{qname}.x", "rk", b"m", pika.BasicProperties(headers={"msg-id": 7}))
    # the plugin's header is not the key on this exchange
    ch.basic_publish(f"{qname}.x", "rk", b"m", props("k"))
    ch.basic_publish(f"{qname}.x", "rk", b"m", props("k"))
    assert count(ch, qname) == 3
    conn.close()


def test_duplicates_are_counted_in_the_api_and_prometheus(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication", arguments={"x-cache-size": 10})
    ch.queue_declare(qname, arguments={"x-message-deduplication": True})
    ch.queue_bind(qname, f"{qname}.x")
    ch.confirm_delivery()
    for _ in range(4):
        ch.basic_publish(f"{qname}.x", "", b"m", props("k"))  # 3 duplicates at the exchange
    for _ in range(3):
        ch.basic_publish("", qname, b"m", props("q"))  # 2 duplicates at the queue
    exchange = api(broker, f"/exchanges/%2F/{qname}.x")
    assert exchange["deduplication"] == {"duplicates": 3, "entries": 1, "size": 10}
    queue = api(broker, f"/queues/%2F/{qname}")
    assert queue["deduplication"] == {"duplicates": 2, "entries": 2}
    with urllib.request.urlopen(broker.metrics_url + "/metrics/per-object",
                                timeout=DEADLINE) as response:
        text = response.read().decode()
    assert (f'leveret_exchange_messages_deduplicated_total{{vhost="/",exchange="{qname}.x"}} 3'
            in text)
    assert (f'leveret_queue_messages_deduplicated_total{{vhost="/",queue="{qname}"}} 2'
            in text)
    conn.close()


# -- the race: many publishers of the same keys, with confirms and pipelining ---------------

def test_concurrent_publishers_of_the_same_keys_enqueue_one_copy_each(broker, qname):
    setup = connect(broker)
    ch = setup.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication",
                        arguments={"x-cache-size": 10000}, durable=True)
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, f"{qname}.x")
    keys = [f"key-{i}" for i in range(200)]
    nacks: list[int] = []
    acks: list[int] = []
    start = threading.Barrier(6)

    def publisher(n: int) -> None:
        conn = connect(broker)
        pch = conn.channel()
        pch.confirm_delivery()
        start.wait()
        mine = keys[n * 31 % len(keys):] + keys[:n * 31 % len(keys)]  # each from elsewhere
        ok = confirmed_publishes(pch, f"{qname}.x", "",
                                 [(f"{n}:{k}".encode(), props(k, persistent=True))
                                  for k in mine])
        acks.append(ok.count(True))
        nacks.append(ok.count(False))
        conn.close()

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert sum(nacks) == 0 and len(acks) == 6
    assert count(ch, qname) == len(keys)
    seen = set()
    while True:
        method, properties, _ = ch.basic_get(qname, auto_ack=True)
        if method is None:
            break
        seen.add(properties.headers["x-deduplication-header"])
    assert seen == set(keys)
    setup.close()


# -- the queue mode: a key is held while its message is in the queue --------------------------

def test_queue_mode_holds_a_key_until_ack_or_reject(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.queue_declare(qname, arguments={"x-message-deduplication": True})
    ch.confirm_delivery()
    assert confirmed_publishes(ch, "", qname, [(b"m", props("k1"))] * 3) == [True] * 3
    assert count(ch, qname) == 1
    method, _, _ = ch.basic_get(qname)
    ch.basic_publish("", qname, b"while unacked", props("k1"))
    assert count(ch, qname) == 0  # still held by the unacked delivery
    ch.basic_ack(method.delivery_tag)
    ch.basic_publish("", qname, b"after ack", props("k1"))
    assert count(ch, qname) == 1
    method, _, body = ch.basic_get(qname)
    assert body == b"after ack"
    ch.basic_reject(method.delivery_tag, requeue=True)  # a requeue keeps the key
    ch.basic_publish("", qname, b"dup", props("k1"))
    assert count(ch, qname) == 1
    method, _, _ = ch.basic_get(qname)
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.basic_publish("", qname, b"after reject", props("k1"))
    assert count(ch, qname) == 1
    conn.close()


def test_queue_mode_frees_keys_on_expiry_dead_lettering_and_purge(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.queue_declare(f"{qname}.dlq")
    ch.queue_declare(qname, arguments={"x-message-deduplication": True, "x-message-ttl": 100,
                                       "x-dead-letter-exchange": "",
                                       "x-dead-letter-routing-key": f"{qname}.dlq"})
    ch.queue_declare(f"{qname}.p", arguments={"x-message-deduplication": True})
    ch.confirm_delivery()
    ch.basic_publish("", qname, b"expires", props("e"))
    wait_for(lambda: count(ch, f"{qname}.dlq") == 1, "the expired message dead-lettered")
    ch.basic_publish("", qname, b"again", props("e"))  # its key left with it
    wait_for(lambda: count(ch, f"{qname}.dlq") == 2, "the second copy dead-lettered")
    ch.basic_publish("", f"{qname}.p", b"p", props("p"))
    ch.basic_publish("", f"{qname}.p", b"p", props("p"))
    assert count(ch, f"{qname}.p") == 1
    ch.queue_purge(f"{qname}.p")
    ch.basic_publish("", f"{qname}.p", b"p", props("p"))
    assert count(ch, f"{qname}.p") == 1
    conn.close()


def test_dead_letters_are_checked_by_their_dead_letter_exchanges_window(broker, qname):
    """RabbitMQ's dead-lettering routes through the exchange type, where the plugin checks
    the key: a dead letter whose key the window holds is dropped and counted."""
    conn = connect(broker)
    ch = conn.channel()
    dlx, dead = f"{qname}.dlx", f"{qname}.dead"
    ch.exchange_declare(dlx, "x-message-deduplication", arguments={"x-cache-size": 10})
    ch.queue_declare(dead)
    ch.queue_bind(dead, dlx)
    ch.queue_declare(qname, arguments={"x-dead-letter-exchange": dlx})
    for body, key in ((b"one", "k"), (b"two", "k"), (b"three", "other")):
        ch.basic_publish("", qname, body, props(key))
    for _ in range(3):
        method, _, _ = ch.basic_get(qname)
        ch.basic_reject(method.delivery_tag, requeue=False)
    wait_for(lambda: api(broker, f"/exchanges/%2F/{dlx}")["deduplication"]["duplicates"] == 1,
             "the second dead letter of key k counted as a duplicate")
    assert [ch.basic_get(dead, auto_ack=True)[2] for _ in range(3)] == [b"one", b"three", None]
    conn.close()


def test_queue_mode_frees_a_key_dropped_by_max_length(broker, qname):
    conn = connect(broker)
    ch = conn.channel()
    ch.queue_declare(qname, arguments={"x-message-deduplication": True, "x-max-length": 1})
    ch.confirm_delivery()
    ch.basic_publish("", qname, b"a", props("a"))
    ch.basic_publish("", qname, b"b", props("b"))  # drops "a" from the head
    ch.basic_publish("", qname, b"a again", props("a"))  # drops "b"
    _, _, body = ch.basic_get(qname, auto_ack=True)
    assert body == b"a again"
    conn.close()


# -- across kill -9 -------------------------------------------------------------------------

def test_the_window_survives_kill_9(make_broker, qname):
    b = make_broker()
    conn = connect(b)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication", durable=True,
                        arguments={"x-cache-size": 5000})
    ch.queue_declare(qname, durable=True)
    ch.queue_bind(qname, f"{qname}.x")
    ch.queue_declare(f"{qname}.q", durable=True, arguments={"x-message-deduplication": True})
    for i in range(1000):  # pipelined: no confirm channel waits for each
        ch.basic_publish(f"{qname}.x", "", b"m", props(f"k{i}", persistent=True))
    for i in range(20):
        ch.basic_publish("", f"{qname}.q", b"m", props(i, persistent=True))
    # One confirmed persistent publish after them, on the same connection: its confirm
    # comes after the commit of everything the broker read before it.
    marker = conn.channel()
    marker.confirm_delivery()
    marker.basic_publish("", qname, b"marker", props(persistent=True))
    b.stop(kill=True)
    b.start()

    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    acks = confirmed_publishes(ch, f"{qname}.x", "",
                               [(b"m", props(f"k{i}", persistent=True)) for i in range(1000)])
    assert acks == [True] * 1000
    assert count(ch, qname) == 1001  # and the marker
    acks = confirmed_publishes(ch, "", f"{qname}.q",
                               [(b"m", props(i, persistent=True)) for i in range(20)])
    assert acks == [True] * 20
    assert count(ch, f"{qname}.q") == 20
    ch.basic_publish(f"{qname}.x", "", b"m", props("new", persistent=True))
    assert count(ch, qname) == 1002
    conn.close()


# -- aio-pika: pipelined confirms from several connections ----------------------------------

async def test_pipelined_confirmed_publishers_enqueue_one_copy_per_key(broker, qname):
    """Four connections each publish every key (persistent, confirmed) without waiting for
    one confirm before the next publish: every publish is acked, one copy per key lands."""
    keys = [f"key-{i}" for i in range(300)]
    conns = [await aio_pika.connect(broker.url) for _ in range(4)]
    try:
        setup = await conns[0].channel()
        exchange = await setup.declare_exchange(
            f"{qname}.x", "x-message-deduplication", durable=True,
            arguments={"x-cache-size": 10000})
        queue = await setup.declare_queue(qname, durable=True)
        await queue.bind(exchange)

        async def publish_all(conn: aio_pika.abc.AbstractConnection, n: int) -> list[object]:
            channel = await conn.channel(publisher_confirms=True)
            target = await channel.get_exchange(f"{qname}.x")
            order = keys[n::] + keys[:n]
            return await asyncio.gather(*(
                target.publish(aio_pika.Message(b"m", headers={"x-deduplication-header": k},
                                                delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                               routing_key="")
                for k in order))

        results = await asyncio.wait_for(
            asyncio.gather(*(publish_all(c, n * 75) for n, c in enumerate(conns))), DEADLINE)
        confirms = [r for batch in results for r in batch]
        assert len(confirms) == 4 * len(keys)
        assert all(isinstance(r, aiormq.spec.Basic.Ack) for r in confirms)
        declared = await setup.declare_queue(qname, passive=True)
        assert declared.declaration_result.message_count == len(keys)
    finally:
        for conn in conns:
            await conn.close()


# -- the management API: declare, import and publish over HTTP --------------------------------

def test_http_declare_import_and_publish(broker, api, qname):
    bad = {"type": "x-message-deduplication", "arguments": {"x-cache-ttl": 5}}
    status, _, body = api.put(f"/exchanges/%2F/{qname}.bad", bad)
    assert status == 400 and "'x-cache-size' must be an integer greater than 0" in body["reason"]
    status, _, body = api.post("/definitions", {"exchanges": [
        {"name": f"{qname}.bad", "vhost": "/", **bad}]})
    assert status == 400 and "'x-cache-size'" in body["reason"]
    assert api.get(f"/exchanges/%2F/{qname}.bad")[0] == 404
    good = {"type": "x-message-deduplication", "durable": True,
            "arguments": {"x-cache-size": 10}}
    assert api.put(f"/exchanges/%2F/{qname}.x", good)[0] == 201
    assert api.put(f"/queues/%2F/{qname}", {"durable": True})[0] == 201
    assert api.post(f"/bindings/%2F/e/{qname}.x/q/{qname}", {})[0] == 201
    message = {"routing_key": "", "payload": "x", "payload_encoding": "string",
               "properties": {"headers": {"x-deduplication-header": "h1"}, "delivery_mode": 2}}
    for _ in range(2):  # a duplicate over HTTP is "routed": its first copy was
        assert api.post(f"/exchanges/%2F/{qname}.x/publish", message)[::2] == (
            200, {"routed": True})
    assert api.get(f"/queues/%2F/{qname}")[2]["messages"] == 1
    assert api.get(f"/exchanges/%2F/{qname}.x")[2]["deduplication"]["duplicates"] == 1


def test_a_copy_every_queue_refuses_leaves_no_key(broker, qname):
    """reject-publish: the refused copy is nacked and holds no key, so its retry, once the
    queue has room, is taken (at the exchange and in the queue mode alike)."""
    conn = connect(broker)
    ch = conn.channel()
    ch.exchange_declare(f"{qname}.x", "x-message-deduplication", arguments={"x-cache-size": 10})
    ch.queue_declare(qname, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.queue_bind(qname, f"{qname}.x")
    ch.queue_declare(f"{qname}.q", arguments={"x-max-length": 1, "x-overflow": "reject-publish",
                                              "x-message-deduplication": True})
    ch.confirm_delivery()
    for exchange, queue in ((f"{qname}.x", qname), ("", f"{qname}.q")):
        rk = "" if exchange else queue
        assert confirmed_publishes(ch, exchange, rk, [(b"a", props("a")), (b"b", props("b"))]
                                   ) == [True, False]
        ch.basic_get(queue, auto_ack=True)
        assert confirmed_publishes(ch, exchange, rk, [(b"b", props("b"))]) == [True]
        assert count(ch, queue) == 1
    conn.close()


async def test_aiopika_plugin_contract_and_queue_mode_acks(broker, qname):
    """aio-pika: a bad window is 406 with the plugin's text; a queue-mode duplicate is
    confirmed with basic.ack (the plugin nacks it)."""
    conn = await aio_pika.connect(broker.url)
    try:
        channel = await conn.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as err:
            await channel.declare_exchange(f"{qname}.x", "x-message-deduplication",
                                           arguments={"x-cache-size": 10,
                                                      "x-cache-persistence": "bogus"})
        assert "'x-cache-persistence' must be either 'disk' or 'memory'" in str(err.value)
        channel = await conn.channel(publisher_confirms=True)
        queue = await channel.declare_queue(qname, arguments={"x-message-deduplication": True})
        confirms = [await channel.default_exchange.publish(
            aio_pika.Message(b"m", headers={"x-deduplication-header": 42}),
            routing_key=qname) for _ in range(3)]
        assert all(isinstance(c, aiormq.spec.Basic.Ack) for c in confirms)
        declared = await channel.declare_queue(qname, passive=True)
        assert declared.declaration_result.message_count == 1
        message = await queue.get(timeout=DEADLINE)
        assert message.headers["x-deduplication-header"] == 42
        await message.ack()
        confirm = await channel.default_exchange.publish(
            aio_pika.Message(b"m", headers={"x-deduplication-header": 42}),
            routing_key=qname)
        assert isinstance(confirm, aiormq.spec.Basic.Ack)
        declared = await channel.declare_queue(qname, passive=True)
        assert declared.declaration_result.message_count == 1  # acked: the key was freed
    finally:
        await conn.close()
