"""Three nodes on one etcd: confirmed publishing through any node survives ``kill -9`` of
the leader (lost = 0, unexpected = 0), a follower takes over, and the old leader rejoins
the in-sync set as a follower."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import urllib.request

import harness


def _wait(predicate: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_leader_kill_loses_no_confirmed_message(cluster: harness.Cluster) -> None:
    cluster.start(3)
    leader = cluster.wait_leader()
    cluster.wait_in_sync(3)
    publisher = harness.Publisher(cluster.ports(), "orders", "p")
    thread = threading.Thread(target=publisher.run, daemon=True)
    thread.start()
    try:
        _wait(lambda: len(publisher.confirmed) >= 100, "100 confirms before the kill")
        killed = time.monotonic()
        cluster.nodes[leader].kill()
        successor = cluster.wait_leader(other_than=leader)
        assert successor != leader
        _wait(lambda: publisher.confirmed[-1][1] > killed, "a confirm from the new leader")
        cluster.nodes[leader].start()  # rejoins as a follower
        _wait(lambda: leader in cluster.etcd.in_sync(cluster.name), "the old leader in sync")
        after = len(publisher.confirmed)
        _wait(lambda: len(publisher.confirmed) >= after + 50, "confirms with it in sync")
    finally:
        publisher.stop.set()
        thread.join(60)
    assert cluster.etcd.leader(cluster.name) == successor
    new, old = cluster.nodes[successor], cluster.nodes[leader]
    # Asked of the old leader, now a follower, which relays the API to the new one.
    _wait(lambda: {(n["name"], n["running"]) for n in _get_json(old.management_port, "/api/nodes")}
          == {("leveret@n1", True), ("leveret@n2", True), ("leveret@n3", True)},
          "every node listed running by /api/nodes")
    metrics = _get(new.prometheus_port, "/metrics")
    assert "leveret_replication_in_sync 3" in metrics
    assert f'rabbitmq_cluster="{cluster.name}"' in metrics
    assert f'leveret_replication_lag_batches{{follower="{leader}"}}' in metrics
    status = _cluster_status(cluster)
    assert status["leader"] == successor
    assert status["running_nodes"] == status["disk_nodes"] == ["n1", "n2", "n3"]
    assert status["in_sync"] == ["n1", "n2", "n3"]
    received = harness.drain(cluster.ports(), "orders")
    verdict = harness.check(publisher.attempted, {i for i, _ in publisher.confirmed}, received)
    assert verdict.lost == set()
    assert verdict.unexpected == set()
    assert len(received) >= len(publisher.confirmed)


def _get(port: int, path: str) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request, timeout=10) as response:
        text: str = response.read().decode()
        return text


def _get_json(port: int, path: str) -> list[dict[str, object]]:
    result: list[dict[str, object]] = json.loads(_get(port, path))
    return result


def _cluster_status(cluster: harness.Cluster) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "leveret", "ctl", "cluster_status", "--etcd", cluster.etcd.url,
         "--cluster-name", cluster.name, "--formatter", "json"],
        capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_cluster_status_names_a_cluster_without_nodes(etcd: harness.Etcd) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "leveret", "ctl", "cluster_status", "--etcd", etcd.url,
         "--cluster-name", "nobody-here"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Cluster status of cluster nobody-here ..." in done.stdout
    assert "(none: an election is due)" in done.stdout
