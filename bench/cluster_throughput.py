"""Confirmed persistent throughput: three clustered nodes against one node, same machine.

    .venv/bin/python bench/cluster_throughput.py [--duration 10] [--rounds 1]

Starts a private etcd and three nodes on 127.0.0.1 (tests/cluster/harness.py), runs
``bench/loadgen.py --scenario confirmed`` against the leader, stops them, then runs the
same against a single node (no ``--etcd``) on a fresh data dir; prints each round's
``consumed_per_s`` and the cluster/single ratio. All processes share the machine's cores,
so the cluster pays for its followers' CPU too: this is the pessimistic figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "cluster"))

import harness  # noqa: E402


def loadgen(port: int, duration: float) -> float:
    done = subprocess.run(
        [sys.executable, str(HERE / "loadgen.py"), "--port", str(port), "--scenario",
         "confirmed", "--duration", str(duration)],
        capture_output=True, text=True, check=True, timeout=duration * 10 + 120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["consumed_per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if harness.etcd_binary() is None:
        print("etcd is not installed (apt-get install etcd-server)", file=sys.stderr)
        return 2
    clustered: list[float] = []
    single: list[float] = []
    for round_ in range(1, args.rounds + 1):
        directory = Path(tempfile.mkdtemp(prefix="leveret-cluster-throughput-"))
        etcd = harness.Etcd(directory).start()
        cluster = harness.Cluster(directory, etcd, name="tp", lease_ttl=5)
        try:
            cluster.start(3)
            leader = cluster.nodes[cluster.wait_leader()]
            cluster.wait_in_sync(3)
            clustered.append(loadgen(leader.port, args.duration))
        finally:
            cluster.stop()
            etcd.stop()
        node = harness.Node("solo", directory, etcd="", cluster="")  # no etcd: one node
        try:
            node.start()
            single.append(loadgen(node.port, args.duration))
        finally:
            node.kill()
        print(f"round {round_}: cluster {clustered[-1]:.0f} msg/s, single {single[-1]:.0f} "
              f"msg/s", flush=True)
    ratio = statistics.median(clustered) / statistics.median(single)
    print(f"confirmed, 3 nodes: {statistics.median(clustered):.0f} msg/s; one node: "
          f"{statistics.median(single):.0f} msg/s; ratio {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
