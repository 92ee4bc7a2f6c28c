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
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))

import harness
from link_proxy import LinkProxy


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
    if harness.etcd_binary() is None:
        print("etcd is not installed (apt-get install etcd-server)", file=sys.stderr)
        return 2
    directory = Path(tempfile.mkdtemp(prefix="leveret-partition-bench-"))
    etcd = harness.Etcd(directory).start()
    cluster = harness.Cluster(directory, etcd, name="partition", lease_ttl=args.lease_ttl)
    proxies: dict[str, LinkProxy] = {}
    publishers: list[harness.Publisher] = []
    threads: list[threading.Thread] = []
    snapshots = 0
    try:
        for i in range(1, 4):
            node = harness.Node(f"n{i}", directory, etcd.url, cluster.name, args.lease_ttl)
            proxies[node.name] = LinkProxy(node.replication_port)
            node.extra = ["--replication-advertised-port", str(proxies[node.name].port)]
            cluster.nodes[node.name] = node.start()
        leader = cluster.wait_leader()
        cluster.wait_in_sync(3)
        ports = cluster.ports()
        publishers = [harness.Publisher(ports, "partition", f"p{i}") for i in range(2)]
        for worker in publishers:
            threads.append(threading.Thread(target=worker.run, daemon=True))
            threads[-1].start()
        followers = [n for n in cluster.nodes if n != leader]
        for cycle in range(1, args.cycles + 1):
            time.sleep(2)
            follower = followers[cycle % len(followers)]
            cut = time.monotonic()
            proxies[leader].cut(follower)
            time.sleep(args.cut)
            healed = time.monotonic()
            pause = _pause(publishers, cut, healed)
            dropped = follower not in etcd.in_sync(cluster.name)
            proxies[leader].heal(follower)
            while follower not in etcd.in_sync(cluster.name):
                if time.monotonic() > healed + 120:
                    raise RuntimeError(f"{follower} did not rejoin")
                time.sleep(0.05)
            back = time.monotonic() - healed
            print(f"cycle {cycle}: cut {follower} for {args.cut:.0f} s; longest confirm pause "
                  f"{pause:.2f} s; dropped from the in-sync set: {dropped}; back in it "
                  f"{back:.2f} s after healing", flush=True)
        for worker in publishers:
            worker.stop.set()
        for thread in threads:
            thread.join(60)
        received = harness.drain(cluster.ports(), "partition")
        attempted = set().union(*(p.attempted for p in publishers))
        confirmed = {i for p in publishers for i, _ in p.confirmed}
        verdict = harness.check(attempted, confirmed, received)
        snapshots = sum(cluster.nodes[n].log_text().count("receiving a snapshot")
                        for n in followers)
        print(f"cycles {args.cycles}: published {len(attempted)}, confirmed {len(confirmed)}, "
              f"received {len(received)}; snapshots {snapshots}; leader still {leader}: "
              f"{etcd.leader(cluster.name) == leader}")
        print(f"lost {len(verdict.lost)}, unexpected {len(verdict.unexpected)}, "
              f"duplicates {verdict.duplicates}")
        print(f"logs in {directory}")
        return 0 if not verdict.lost and not verdict.unexpected and not snapshots else 1
    finally:
        for worker in publishers:
            worker.stop.set()
        for proxy in proxies.values():
            proxy.close()
        cluster.stop()
        etcd.stop()


if __name__ == "__main__":
    sys.exit(main())
