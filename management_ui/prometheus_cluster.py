"""``leveret_replication_*``: a cluster leader's replication figures (``Broker.cluster``).

A single node (``Broker.cluster`` None) has none of these series. A follower serves the
same names from its own point of view (``cluster/follower_metrics.py``). The lag is per
follower connected now, in batches shipped and not yet acked.
"""

from __future__ import annotations

from typing import Protocol

from leveret.broker.cluster_view import ReplicationFigures


class _Writer(Protocol):
    def one(self, name: str, type_: str, help_: str, value: float,
            labels: tuple[tuple[str, str], ...] = ()) -> None: ...

    def family(self, name: str, type_: str, help_: str,
               samples: list[tuple[tuple[tuple[str, str], ...], float]]) -> None: ...


def write_replication(w: _Writer, figures: ReplicationFigures) -> None:
    w.one("leveret_replication_leader", "gauge", "1 on the leader, 0 on a follower", 1)
    w.one("leveret_replication_epoch", "gauge",
          "Epoch of this node's leadership (etcd revision of its win)", figures.epoch)
    w.one("leveret_replication_last_batch", "gauge",
          "The last batch this node holds (the leader: written)", figures.last_batch)
    w.one("leveret_replication_in_sync", "gauge",
          "Nodes in the in-sync set, the leader included", figures.in_sync)
    w.one("leveret_replication_member_in_sync", "gauge",
          "1 when this node is in the in-sync set", 1)
    w.one("leveret_replication_followers_connected", "gauge",
          "Followers connected to this leader", figures.followers)
    w.one("leveret_replication_batches_shipped_total", "counter",
          "Group-commit batches sent to the followers", figures.batches_shipped)
    w.one("leveret_replication_ack_seconds_total", "counter",
          "Time confirms waited for the in-sync followers' acks, summed over batches",
          figures.ack_seconds_sum)
    w.family("leveret_replication_lag_batches", "gauge",
             "Batches shipped to a follower and not yet acked",
             [((("follower", name),), lag) for name, lag in figures.lag.items()])
