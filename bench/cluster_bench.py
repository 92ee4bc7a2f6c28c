"""What the cluster nemesis benches share: three nodes on a private etcd, load, the verdict.

``cluster_failover.py`` and ``cluster_partition.py`` differ only in what they do to the
cluster; the setup (a temporary directory, an etcd, three nodes on 127.0.0.1, optionally
each behind a relay that can cut a follower's link), the workload threads and the
Jepsen-style verdict live here, on top of ``tests/cluster/harness.py`` as the tests use it.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))

import harness
from link_proxy import LinkProxy

Worker = harness.Publisher | harness.Consumer


@dataclass
class Bench:
    directory: Path
    etcd: harness.Etcd
    cluster: harness.Cluster
    relays: dict[str, LinkProxy] = field(default_factory=dict)  # by node, when asked for
    workers: list[Worker] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def run(self, workers: Sequence[Worker]) -> None:
        """Start ``workers`` (publishers, consumers) on threads of their own."""
        for worker in workers:
            self.workers.append(worker)
            self.threads.append(threading.Thread(target=worker.run, daemon=True))
            self.threads[-1].start()

    def stop(self, workers: Sequence[Worker]) -> None:
        for worker in workers:
            worker.stop.set()

    def join(self) -> None:
        self.stop(self.workers)
        for thread in self.threads:
            thread.join(60)


def etcd_missing() -> bool:
    if harness.etcd_binary() is None:
        print("etcd is not installed (apt-get install etcd-server)", file=sys.stderr)
        return True
    return False


@contextmanager
def three_nodes(name: str, lease_ttl: int, relays: bool = False) -> Iterator[Bench]:
    """Three nodes with a leader and all in sync; ``relays``: each node advertises a
    relay in front of its replication port, so whichever leads, a follower's link can be
    cut (``bench.relays[leader].cut(follower)``). Everything stops on the way out."""
    directory = Path(tempfile.mkdtemp(prefix=f"leveret-{name}-bench-"))
    etcd = harness.Etcd(directory).start()
    bench = Bench(directory, etcd, harness.Cluster(directory, etcd, name=name,
                                                   lease_ttl=lease_ttl))
    try:
        if relays:
            for i in range(1, 4):
                node = harness.Node(f"n{i}", directory, etcd.url, name, lease_ttl)
                bench.relays[node.name] = LinkProxy(node.replication_port)
                node.extra = ["--replication-advertised-port",
                              str(bench.relays[node.name].port)]
                bench.cluster.nodes[node.name] = node.start()
        else:
            bench.cluster.start(3)
        bench.cluster.wait_leader()
        bench.cluster.wait_in_sync(3)
        yield bench
    finally:
        bench.stop(bench.workers)
        for relay in bench.relays.values():
            relay.close()
        bench.cluster.stop()
        etcd.stop()


def verdict(publishers: Sequence[harness.Publisher], received: list[str]) -> bool:
    """Print published/confirmed/received and lost/unexpected/duplicates; True when
    nothing confirmed was lost and nothing unpublished arrived."""
    attempted = set().union(*(p.attempted for p in publishers))
    confirmed = {i for p in publishers for i, _ in p.confirmed}
    outcome = harness.check(attempted, confirmed, received)
    print(f"published {len(attempted)}, confirmed {len(confirmed)}, received {len(received)}")
    print(f"lost {len(outcome.lost)}, unexpected {len(outcome.unexpected)}, "
          f"duplicates {outcome.duplicates}")
    return not outcome.lost and not outcome.unexpected
