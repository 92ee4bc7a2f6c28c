"""Message and churn counters, counted where the work happens (model/stats.py)."""

from __future__ import annotations

from pamqp import commands

from leveret.model.stats import MessageStats
from leveret.tests.unit.wire import Client


def test_channel_counters_follow_what_the_client_did() -> None:
    c = Client()
    c.handshake()
    c.open_channel(1)
    c.call(1, commands.Confirm.Select())
    c.call(1, commands.Queue.Declare(queue="q"))
    for i in range(3):
        c.publish(1, f"m{i}".encode(), routing_key="q")
    c.publish(1, b"lost", routing_key="nowhere")                   # drop_unroutable
    c.publish(1, b"back", routing_key="nowhere", mandatory=True)   # return_unroutable
    c.call(1, commands.Basic.Get(queue="q"))                        # get (manual ack)
    c.call(1, commands.Basic.Get(queue="q", no_ack=True))           # get_no_ack
    c.call(1, commands.Basic.Consume(queue="q", consumer_tag="t"))  # deliver (the third)
    c.call(1, commands.Basic.Nack(delivery_tag=3, requeue=True))    # redelivered to "t"
    c.call(1, commands.Basic.Ack(delivery_tag=0, multiple=True))    # acks tags 1 and 4
    c.call(1, commands.Basic.Cancel(consumer_tag="t"))
    c.call(1, commands.Basic.Get(queue="q"))                        # get_empty
    stats = c.broker.message_stats().as_dict()
    assert stats == {
        "publish": 5, "confirm": 5, "return_unroutable": 1, "drop_unroutable": 1,
        "deliver": 2, "deliver_no_ack": 0, "get": 1, "get_no_ack": 1, "get_empty": 1,
        "redeliver": 1, "ack": 2, "deliver_get": 4,
    }
    # A closed channel's counts stay in its vhost's totals.
    c.call(1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    assert c.broker.message_stats("/").as_dict() == stats
    assert c.broker.message_stats("other").as_dict()["publish"] == 0


def test_churn_counts_connections_channels_and_queues() -> None:
    c = Client()
    c.handshake()
    c.open_channel(1)
    c.call(1, commands.Queue.Declare(queue="q"))
    c.call(1, commands.Queue.Declare(queue="q"))
    c.call(1, commands.Queue.Delete(queue="q"))
    c.call(1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    c.call(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
    assert c.broker.churn_totals().as_dict() == {
        "connection_created": 1, "connection_closed": 1, "channel_created": 1,
        "channel_closed": 1, "queue_declared": 2, "queue_created": 1, "queue_deleted": 1,
    }


def test_traffic_counters() -> None:
    c = Client()
    fed: list[bytes] = []
    feed = c.feed
    c.feed = lambda data: (fed.append(data), feed(data))[1]  # type: ignore[method-assign]
    c.handshake()
    assert c.conn.recv_oct == sum(map(len, fed)) and c.conn.recv_cnt == len(fed) == 4
    # Header → start, start-ok → tune, open → open-ok: tune-ok gets no reply.
    assert c.conn.send_oct == len(c.wire_out) and c.conn.send_cnt == 3


def test_message_stats_add() -> None:
    a, b = MessageStats(), MessageStats()
    a.publish, b.publish, b.ack = 2, 3, 1
    a.add(b)
    assert (a.publish, a.ack) == (5, 1)
