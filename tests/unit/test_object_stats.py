"""A channel's counters per exchange and per queue (model/object_stats.py), over the
in-memory wire: what rabbitmq_prometheus's channel_* detailed families read."""

from __future__ import annotations

from dataclasses import dataclass

from pamqp import commands

from leveret.model import object_stats
from leveret.model.object_stats import ExchangeCounters
from leveret.tests.unit.wire import Client


def _queue_counts(channel: object) -> dict[str, dict[str, int]]:
    return {q.name: {k: v for k, v in c.items() if v}
            for q, c in channel.queue_stats.items()}  # type: ignore[attr-defined]


def test_counts_by_exchange_and_queue_follow_what_the_client_did() -> None:
    c = Client()
    c.handshake()
    c.open_channel(1)
    c.call(1, commands.Confirm.Select())
    for q in ("q", "r"):
        c.call(1, commands.Queue.Declare(queue=q))
        c.call(1, commands.Queue.Bind(queue=q, exchange="amq.fanout"))
    c.publish(1, b"a", routing_key="q")                         # "" -> q
    c.publish(1, b"b", exchange="amq.fanout")                   # amq.fanout -> q, r
    c.publish(1, b"lost", routing_key="nowhere")                # dropped
    c.publish(1, b"back", routing_key="nowhere", mandatory=True)  # returned
    c.call(1, commands.Basic.Get(queue="r"))                     # get (manual ack), tag 1
    c.call(1, commands.Basic.Get(queue="r"))                     # get_empty on r
    c.call(1, commands.Basic.Consume(queue="q", consumer_tag="t"))  # tags 2, 3
    c.call(1, commands.Basic.Nack(delivery_tag=2, requeue=True))     # redelivered: tag 4
    c.call(1, commands.Basic.Ack(delivery_tag=0, multiple=True))     # acks 1, 3, 4
    channel = c.conn.channels[1]
    exchanges = {name: (x.publish, x.confirm, x.return_unroutable, x.drop_unroutable,
                        {q.name: n for q, n in x.queues.items()})
                 for name, x in channel.exchange_stats.items()}
    assert exchanges == {"": (3, 3, 1, 1, {"q": 1}),
                         "amq.fanout": (1, 1, 0, 0, {"q": 1, "r": 1})}
    assert _queue_counts(channel) == {
        "r": {"get": 1, "get_empty": 1, "ack": 1},
        "q": {"deliver": 3, "redeliver": 1, "ack": 2},
    }


@dataclass(eq=False)
class FakeQueue:
    name: str
    deleted: bool = False


def test_deleted_queues_are_dropped_once_the_map_has_grown() -> None:
    """A channel that meets a new queue per call (RPC reply queues) keeps about twice the
    live ones, not every queue it ever met."""
    counters = ExchangeCounters()
    live = FakeQueue("live")
    counters.first_route(live)
    for i in range(1000):
        q = FakeQueue(f"tmp-{i}")
        counters.first_route(q)
        q.deleted = True
        assert len(counters.queues) <= object_stats.PRUNE_AT + 1
    assert live in counters.queues


def test_a_channels_queue_map_is_pruned_too() -> None:
    c = Client()
    c.handshake()
    c.open_channel(1)
    channel = c.conn.channels[1]
    for i in range(300):
        name = f"reply-{i}"
        c.call(1, commands.Queue.Declare(queue=name, exclusive=True))
        c.call(1, commands.Basic.Get(queue=name))  # get_empty: counted for this queue
        c.call(1, commands.Queue.Delete(queue=name))
        assert len(channel.queue_stats) <= object_stats.PRUNE_AT + 1
