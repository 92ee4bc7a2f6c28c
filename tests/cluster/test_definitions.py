"""Kill the leader right after each kind of "-ok": the change holds on the new leader
(declare, bind, purge, delete, as a policy set over the API would: every "-ok" waits for
the in-sync followers' acks of the batch that records it)."""

from __future__ import annotations

import time

import harness
import pika
import pika.exceptions
import pytest


def _channel(cluster: harness.Cluster) -> tuple[pika.BlockingConnection,
                                                pika.adapters.blocking_connection.BlockingChannel]:
    deadline = time.monotonic() + 60
    while True:
        for port in cluster.ports():
            try:
                connection = pika.BlockingConnection(pika.ConnectionParameters(
                    "127.0.0.1", port, socket_timeout=3, connection_attempts=1))
                return connection, connection.channel()
            except Exception:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.2)


def _failover(cluster: harness.Cluster) -> None:
    leader = cluster.wait_leader()
    cluster.nodes[leader].kill()
    cluster.wait_leader(other_than=leader)
    cluster.nodes[leader].start()


def test_each_ok_survives_the_leader_killed_right_after(cluster: harness.Cluster) -> None:
    cluster.start(3)
    cluster.wait_leader()
    cluster.wait_in_sync(3)
    connection, channel = _channel(cluster)
    channel.exchange_declare("orders", "topic", durable=True)
    for queue in ("kept", "purged", "doomed"):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind("kept", "orders", "eu.#")
    channel.queue_bind("kept", "orders", "us.#")
    channel.confirm_delivery()
    for queue in ("kept", "purged"):
        for i in range(5):
            channel.basic_publish("", queue, f"m{i}".encode(),
                                  pika.BasicProperties(delivery_mode=2))
    channel.queue_unbind("kept", "orders", "us.#")
    channel.queue_purge("purged")
    channel.queue_delete("doomed")
    _failover(cluster)  # right after the last of these "-ok"s

    connection, channel = _channel(cluster)
    channel.exchange_declare("orders", "topic", durable=True, passive=True)
    assert channel.queue_declare("kept", durable=True, passive=True).method.message_count == 5
    assert channel.queue_declare("purged", durable=True, passive=True).method.message_count == 0
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare("doomed", durable=True, passive=True)
    assert closed.value.reply_code == 404
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("orders", "eu.fr", b"x", mandatory=True)  # the binding held
    with pytest.raises(pika.exceptions.UnroutableError):  # the unbinding held too
        channel.basic_publish("orders", "us.ny", b"x", mandatory=True)
    connection.close()
