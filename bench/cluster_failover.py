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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_bench import etcd_missing, harness, three_nodes, verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--period", type=float, default=30.0)
    parser.add_argument("--restart", type=float, default=10.0)
    parser.add_argument("--lease-ttl", type=int, default=3)
    args = parser.parse_args()
    if etcd_missing():
        return 2
    failovers: list[float] = []
    with three_nodes("failover", args.lease_ttl) as bench:
        cluster = bench.cluster
        ports = cluster.ports()
        publishers = [harness.Publisher(ports, "bench", f"p{i}") for i in range(4)]
        consumers = [harness.Consumer(ports, "bench") for _ in range(2)]
        bench.run([*publishers, *consumers])
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
        bench.stop(publishers)
        cluster.wait_in_sync(3)
        time.sleep(2)
        bench.join()
        received = [i for c in consumers for i in c.received]
        received += harness.drain(cluster.ports(), "bench")
        print(f"cycles {args.cycles}, lease_ttl {args.lease_ttl}:", end=" ")
        ok = verdict(publishers, received)
        finite = sorted(f for f in failovers if f != float("inf"))
        if finite:
            print(f"failover p50 {statistics.median(finite):.2f} s, max {max(failovers):.2f} s")
        print(f"logs in {bench.directory}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
