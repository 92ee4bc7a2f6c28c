"""What the front doors may know of the cluster a node leads (``leveret.cluster`` fills it).

A seam, not the cluster itself: the management plane lists every node (``/api/nodes``) and
Prometheus exports replication figures through ``Broker.cluster``, which stays None on a
single node (nothing is asked, nothing costs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ClusterNode:
    name: str  # as /api/nodes names nodes: "leveret@<node_name>"
    running: bool
    leader: bool
    in_sync: bool = False  # in the in-sync set (the leader always is)
    lag: int | None = None  # batches shipped and not yet acked; None: not connected


@dataclass(frozen=True)
class ReplicationFigures:
    cluster: str  # the cluster's name (etcd key prefix)
    epoch: int
    in_sync: int  # nodes in the in-sync set, the leader included
    followers: int  # followers connected now
    batches_shipped: int
    last_batch: int  # the last batch written (its seq): a follower's applied one trails it
    ack_seconds_sum: float  # time from local commit to the last needed follower ack
    lag: dict[str, int] = field(default_factory=dict)  # follower -> batches not yet acked


class ClusterView(Protocol):
    def nodes(self) -> list[ClusterNode]:
        """Every node that ever joined, as last read from the coordinator."""

    def figures(self) -> ReplicationFigures: ...
