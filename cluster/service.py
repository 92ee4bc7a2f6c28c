"""The leader's window for the front doors: ``Broker.cluster`` (``broker/cluster_view.py``).

Started first among the leader's services, so the management plane and Prometheus see it:
it names the broker after the cluster node, and re-reads the member list from etcd every
``REFRESH`` seconds (a few requests, never per message) so ``/api/nodes`` answers from memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from leveret.broker.broker import Broker
from leveret.broker.cluster_view import ClusterNode, ReplicationFigures
from leveret.cluster.coordinator import Coordinator, CoordinatorError
from leveret.cluster.leader import Leader

if TYPE_CHECKING:
    from leveret.config import Config

log = logging.getLogger(__name__)

REFRESH = 2.0


def broker_node_name(node: str) -> str:
    """A cluster node as the management API names nodes (RabbitMQ's ``rabbit@host``)."""
    return f"leveret@{node}"


class ClusterService:
    def __init__(self, node: str, cluster: str, coordinator: Coordinator,
                 leader: Leader) -> None:
        self.node = node
        self.cluster = cluster
        self.coordinator = coordinator
        self.leader = leader
        self._nodes = [ClusterNode(broker_node_name(node), True, True)]
        self._task: asyncio.Task[None] | None = None

    def nodes(self) -> list[ClusterNode]:
        """The members etcd lists, with the in-sync set and each follower's lag as this
        leader knows them now (from memory: a request costs no etcd call)."""
        leader = self.leader
        out = []
        for node in self._nodes:
            name = node.name.removeprefix("leveret@")
            follower = leader.followers.get(name)
            lag = (0 if node.leader else max(0, leader.last_seq - follower.acked)
                   if follower is not None else None)
            out.append(ClusterNode(node.name, node.running, node.leader,
                                   name in leader.in_sync, lag))
        return out

    def figures(self) -> ReplicationFigures:
        return self.leader.figures(self.cluster)

    async def start(self, broker: Broker, config: Config) -> None:
        broker.cluster_name = broker_node_name(self.node)
        broker.cluster = self
        await self._refresh()
        self._task = asyncio.create_task(self._refresh_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(REFRESH)
            await self._refresh()

    async def _refresh(self) -> None:
        try:
            members = await self.coordinator.members()
        except CoordinatorError as exc:
            log.debug("cannot read the cluster's members: %s", exc)
            return
        self._nodes = [ClusterNode(broker_node_name(name), info.get("running") == "true",
                                   name == self.node)
                       for name, info in members.items()]
