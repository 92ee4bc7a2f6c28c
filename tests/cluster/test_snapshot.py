"""A node the leader's retained batches cannot bring up to date gets a snapshot (LMDB's
consistent copy), joins the in-sync set, and then holds exactly what the others hold."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import harness

from leveret.persistence.lmdb_store import LmdbStore


def _wait(predicate: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_fresh_node_after_a_failover_is_sent_a_snapshot(cluster: harness.Cluster) -> None:
    cluster.start(3)
    leader = cluster.wait_leader()
    cluster.wait_in_sync(3)
    publisher = harness.Publisher(cluster.ports(), "ledger", "p")
    thread = threading.Thread(target=publisher.run, daemon=True)
    thread.start()
    try:
        _wait(lambda: len(publisher.confirmed) >= 50, "confirms before the kill")
        killed = time.monotonic()
        cluster.nodes[leader].kill()
        cluster.wait_leader(other_than=leader)
        # The new leader retains only its own epoch's batches: a node holding nothing
        # cannot be streamed to from batch 1.
        _wait(lambda: publisher.confirmed[-1][1] > killed, "a confirm from the new leader")
        fresh = harness.Node("n4", cluster.directory, cluster.etcd.url, cluster.name,
                             cluster.lease_ttl)
        cluster.nodes["n4"] = fresh.start()
        _wait(lambda: "n4" in cluster.etcd.in_sync(cluster.name), "n4 in sync")
        assert "snapshot installed" in fresh.log_text()
        target = len(publisher.confirmed) + 50
        _wait(lambda: len(publisher.confirmed) >= target, "confirms with n4 in sync")
    finally:
        publisher.stop.set()
        thread.join(60)
    in_sync = cluster.etcd.in_sync(cluster.name)
    assert "n4" in in_sync and leader not in in_sync
    for node in cluster.nodes.values():
        node.kill()
    confirmed = {i for i, _ in publisher.confirmed}
    seen = {}
    for name in sorted(in_sync):
        store = LmdbStore(cluster.directory / name / "store")
        try:
            qid = store.state().qids[("/", "ledger")]
            seen[name] = (store.queue_stats(qid).count, store.load_definitions())
        finally:
            store.close()
    counts = {count for count, _ in seen.values()}
    assert len(counts) == 1 and counts.pop() >= len(confirmed), seen
    definitions = [d for _, d in seen.values()]
    assert all(d == definitions[0] for d in definitions)
