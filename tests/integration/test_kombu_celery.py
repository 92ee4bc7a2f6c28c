"""Celery's native delayed delivery topology, declared and used through kombu (py-amqp).

kombu builds 28 levels of topic exchanges and quorum queues chained by
exchange-to-exchange bindings; level N holds a message for 2**N seconds
(x-message-ttl) and dead-letters it to level N-1, the routing key's bits choosing
at each level whether the message waits there or passes straight through. This
exercises e2e bindings, per-queue TTL, dead-lettering with x-death,
reject-publish overflow arguments and quorum queue declarations at once. It also
proves that PyPI's ``amqp`` package (which kombu uses) is not shadowed.
"""

from __future__ import annotations

import time

import pytest

kombu = pytest.importorskip("kombu")
ndd = pytest.importorskip("kombu.transport.native_delayed_delivery")

WAIT = 120.0  # a bound for a message that is due, not a budget: the wait ends when it comes


def test_kombu_uses_pypi_amqp_not_ours():
    import amqp

    assert hasattr(amqp, "Connection") and "leveret" not in (amqp.__file__ or "")


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_celery_native_delayed_delivery(broker, qname, queue_type):
    prefix = f"{qname}-{queue_type}"
    with kombu.Connection(broker.url) as conn:
        ndd.declare_native_delayed_delivery_exchanges_and_queues(conn, queue_type, prefix)
        tasks_exchange = kombu.Exchange(f"{prefix}-tasks", type="topic")
        tasks = kombu.Queue(f"{prefix}-tasks", tasks_exchange, routing_key="tasks",
                            queue_arguments={"x-queue-type": "quorum"}
                            if queue_type == "quorum" else None)
        tasks.bind(conn.channel()).declare()
        ndd.bind_queue_to_native_delayed_delivery_exchange(conn, tasks, prefix)

        producer = kombu.Producer(conn.channel())
        start = time.monotonic()
        # countdown 2 s: binary ...010 -> waits at level 1 (2 s), passes levels 0 and 2-27.
        producer.publish({"task": "add", "args": [2, 3]},
                         exchange=ndd.level_name(27, prefix),
                         routing_key=ndd.calculate_routing_key(2, "tasks"),
                         delivery_mode=2, serializer="json")
        received: list = []
        with conn.Consumer(tasks, callbacks=[lambda body, msg: (received.append((body, msg)),
                                                                 msg.ack())]):
            deadline = start + WAIT
            while not received and time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=0.5)
                except TimeoutError:
                    pass
        elapsed = time.monotonic() - start
        assert received, "the delayed message never arrived"
        body, msg = received[0]
        assert body == {"task": "add", "args": [2, 3]}
        assert elapsed >= 1.8, elapsed  # held 2 s by level 1's TTL (an upper bound would
        # be a guess at the machine's speed: the deaths below say which levels held it)
        deaths = msg.headers["x-death"]
        assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
            (ndd.level_name(1, prefix), "expired", 1)]
        assert msg.headers["x-first-death-reason"] == "expired"
