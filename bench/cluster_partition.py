"""A follower's replication link cut under confirmed load: confirm pause, rejoin, lost.

    .venv/bin/python bench/cluster_partition.py [--cycles 5] [--cut 10] [--lease-ttl 3]

Starts a private etcd and three nodes on 127.0.0.1 (tests/cluster/harness.py), each node
advertising a TCP relay in front of its replication port (tests/cluster/link_proxy.py),
and runs 2 confirmed publishers through any node. Each cycle cuts one follower's link to
the leader for ``cut`` seconds (its process lives on), then heals it. Per cycle: the
longest pause between confirms while the link was cut (bounded by the leader's ack timeout
plus one etcd transaction), and how long after healing the follower was back in the
in-sync set; whether it needed a snapshot. At the end it drains the queue and compares:
lost and unexpected must be 0.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_bench import etcd_missing, harness, three_nodes, verdict


def _pause(publishers: list[harness.Publisher], start: float, end: float) -> float:
    """The longest gap between consecutive confirms (any publisher) within [start, end]."""
    times = sorted(t for p in publishers for _, t in p.confirmed if start <= t <= end)
    edges = [start, *times, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--cut", type=float, default=10.0)
    parser.add_argument("--lease-ttl", type=int, default=3)
    args = parser.parse_args()
    if etcd_missing():
        return 2
    with three_nodes("partition", args.lease_ttl, relays=True) as bench:
        cluster, etcd = bench.cluster, bench.etcd
        leader = cluster.wait_leader()
        publishers = [harness.Publisher(cluster.ports(), "partition", f"p{i}")
                      for i in range(2)]
        bench.run(publishers)
        followers = [n for n in cluster.nodes if n != leader]
        for cycle in range(1, args.cycles + 1):
            time.sleep(2)
            follower = followers[cycle % len(followers)]
            cut = time.monotonic()
            bench.relays[leader].cut(follower)
            time.sleep(args.cut)
            healed = time.monotonic()
            pause = _pause(publishers, cut, healed)
            dropped = follower not in etcd.in_sync(cluster.name)
            bench.relays[leader].heal(follower)
            while follower not in etcd.in_sync(cluster.name):
                if time.monotonic() > healed + 120:
                    raise RuntimeError(f"{follower} did not rejoin")
                time.sleep(0.05)
            back = time.monotonic() - healed
            print(f"cycle {cycle}: cut {follower} for {args.cut:.0f} s; longest confirm pause "
                  f"{pause:.2f} s; dropped from the in-sync set: {dropped}; back in it "
                  f"{back:.2f} s after healing", flush=True)
        bench.join()
        received = harness.drain(cluster.ports(), "partition")
        snapshots = sum(cluster.nodes[n].log_text().count("receiving a snapshot")
                        for n in followers)
        print(f"cycles {args.cycles}: snapshots {snapshots}; leader still {leader}: "
              f"{etcd.leader(cluster.name) == leader};", end=" ")
        ok = verdict(publishers, received)
        print(f"logs in {bench.directory}")
        return 0 if ok and not snapshots else 1


if __name__ == "__main__":
    sys.exit(main())
