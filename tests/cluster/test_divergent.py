"""A leader that committed a batch and died before shipping it rejoins by a snapshot: the
batch only it held (its publisher got no confirm) is discarded, and every confirmed
message is kept. The leader dies in that window through the cluster's test hook
(``cluster/crash_hook.py``); a ``kill -9`` from outside cannot aim at it."""

from __future__ import annotations

from pathlib import Path

import harness
import pika
import pika.exceptions
import pytest

from leveret.cluster import crash_hook
from leveret.cluster import lineage as lineage_file
from leveret.persistence.lmdb_store import LmdbStore

PERSISTENT = pika.BasicProperties(delivery_mode=2)



def _publish_confirmed(port: int, bodies: list[str]) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, socket_timeout=10, connection_attempts=3))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("ledger", durable=True)
        for body in bodies:
            channel.basic_publish("", "ledger", body.encode(), PERSISTENT)  # raises unless acked
    finally:
        connection.close()


def _bodies(store_dir: Path) -> list[str]:
    """The queue's messages in a stopped node's store."""
    store = LmdbStore(store_dir)
    try:
        qid = store.state().qids[("/", "ledger")]
        return [e.message.body.decode() for e in store.read_queue(qid, 0, 1000)]
    finally:
        store.close()


def test_a_leader_dead_before_shipping_rejoins_by_snapshot(cluster: harness.Cluster,
                                                           tmp_path: Path) -> None:
    triggers = tmp_path / "crash-before-shipping"
    triggers.mkdir()
    for i in range(1, 4):
        cluster.nodes[f"n{i}"] = harness.Node(
            f"n{i}", cluster.directory, cluster.etcd.url, cluster.name, cluster.lease_ttl,
            env={crash_hook.ENV: str(triggers)}).start()
    old = cluster.wait_leader()
    cluster.wait_in_sync(3)
    before = [f"c{i}" for i in range(20)]
    _publish_confirmed(cluster.nodes[old].port, before)

    (triggers / old).touch()  # its next batch is committed locally, then it dies
    with pytest.raises(pika.exceptions.AMQPError):
        _publish_confirmed(cluster.nodes[old].port, ["doomed"])
    (triggers / old).unlink()
    dead = cluster.nodes[old]
    assert dead.proc is not None and dead.proc.wait(60) == -9
    dead.kill()  # reaped: its store can be opened
    assert _bodies(dead.directory / old / "store") == [*before, "doomed"]  # the divergence

    new = cluster.wait_leader(other_than=old)
    after = [f"c{i}" for i in range(20, 30)]
    _publish_confirmed(cluster.nodes[new].port, after)
    dead.start()  # rejoins as a follower; its last batch is not in the new history
    harness.wait_for(lambda: old in cluster.etcd.in_sync(cluster.name), "the old leader back in sync")
    assert "receiving a snapshot" in dead.log_text()
    dead.kill()
    assert _bodies(dead.directory / old / "store") == [*before, *after]
    ours = lineage_file.load(dead.directory / old)
    assert ours == lineage_file.load(cluster.directory / new)  # one history again

    received = harness.drain([n.port for n in cluster.nodes.values() if n.proc], "ledger")
    assert received == [*before, *after]  # every confirmed one, and not the doomed one
