"""Leader kills under confirmed load: lost, unexpected, duplicates, failover time.

    .venv/bin/python bench/cluster_failover.py [--cycles 20] [--period 30] [--restart 10]
                                               [--lease-ttl 3]

Starts a private etcd and three nodes on 127.0.0.1 (tests/cluster/harness.py), runs 4
publishers (unique ids, confirms, re-publishing what was not confirmed, through any node)
and 2 manual-ack consumers on one durable queue, and every ``period`` seconds ``kill -9``s
the leader, restarting it ``restart`` seconds later (it rejoins as a follower). Failover
time is SIGKILL -> the first confirm of a publish sent after it. At the end it heals,
drains the queue and compares: lost (confirmed, never received) and unexpected (received,
never published) must be 0; duplicates are expected (at-least-once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))

import harness


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--period", type=float, default=30.0)
    parser.add_argument("--restart", type=float, default=10.0)
    parser.add_argument("--lease-ttl", type=int, default=3)
    args = parser.parse_args()
    if harness.etcd_binary() is None:
        print("etcd is not installed (apt-get install etcd-server)", file=sys.stderr)
        return 2
    directory = Path(tempfile.mkdtemp(prefix="leveret-cluster-bench-"))
    etcd = harness.Etcd(directory).start()
    cluster = harness.Cluster(directory, etcd, name="bench", lease_ttl=args.lease_ttl)
    publishers: list[harness.Publisher] = []
    consumers: list[harness.Consumer] = []
    threads: list[threading.Thread] = []
    failovers: list[float] = []
    try:
        cluster.start(3)
        cluster.wait_leader()
        cluster.wait_in_sync(3)
        ports = cluster.ports()
        publishers = [harness.Publisher(ports, "bench", f"p{i}") for i in range(4)]
        consumers = [harness.Consumer(ports, "bench") for _ in range(2)]
        for worker in (*publishers, *consumers):
            threads.append(threading.Thread(target=worker.run, daemon=True))
            threads[-1].start()
        for cycle in range(1, args.cycles + 1):
            time.sleep(max(0.0, args.period - args.restart))
            leader = cluster.wait_leader()
            killed = time.monotonic()
            cluster.nodes[leader].kill()
            successor = cluster.wait_leader(other_than=leader)
            deadline = killed + 60
            first: float | None = None
            while first is None and time.monotonic() < deadline:
                # A confirm read after the kill may have left the old leader before it:
                # count only publishes sent after the kill.
                after = [t for p in publishers for i, t in p.confirmed[-50:]
                         if p.sent[i] > killed]
                first = min(after) if after else None
                time.sleep(0.02)
            took = (first - killed) if first is not None else float("inf")
            failovers.append(took)
            confirmed = sum(len(p.confirmed) for p in publishers)
            print(f"cycle {cycle}: killed {leader}, {successor} leads; first confirm after "
                  f"{took:.2f} s; {confirmed} confirmed so far", flush=True)
            time.sleep(args.restart)
            cluster.nodes[leader].start()
        for worker in publishers:
            worker.stop.set()
        cluster.wait_in_sync(3)
        time.sleep(2)
        for worker in consumers:
            worker.stop.set()
        for thread in threads:
            thread.join(60)
        received = [i for c in consumers for i in c.received]
        received += harness.drain(cluster.ports(), "bench")
        attempted = set().union(*(p.attempted for p in publishers))
        confirmed_ids = {i for p in publishers for i, _ in p.confirmed}
        verdict = harness.check(attempted, confirmed_ids, received)
        finite = sorted(f for f in failovers if f != float("inf"))
        print(f"cycles {args.cycles}, lease_ttl {args.lease_ttl}: published {len(attempted)}, "
              f"confirmed {len(confirmed_ids)}, received {len(received)}")
        print(f"lost {len(verdict.lost)}, unexpected {len(verdict.unexpected)}, "
              f"duplicates {verdict.duplicates}")
        if finite:
            print(f"failover p50 {statistics.median(finite):.2f} s, max {max(failovers):.2f} s")
        print(f"logs in {directory}")
        return 0 if not verdict.lost and not verdict.unexpected else 1
    finally:
        for worker in (*publishers, *consumers):
            worker.stop.set()
        cluster.stop()
        etcd.stop()


if __name__ == "__main__":
    sys.exit(main())
