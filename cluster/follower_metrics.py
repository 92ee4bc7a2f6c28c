"""A follower's own ``/metrics``: which node it is, and replication from its point of view.

A follower runs no broker (it relays clients to the leader), so the broker's Prometheus
endpoint does not run here; but a scraper asks every node, and a relayed answer would be
the leader's under the follower's address. So the follower serves, on its own
``--prometheus-port``, ``rabbitmq_identity_info`` with its own node name and the
``leveret_replication_*`` series as it sees them: the leader's epoch it follows, the last
batch it applied (the leader's ``leveret_replication_last_batch`` minus this one is its
lag), whether its link to the leader is up and whether it is in the in-sync set. Each
scrape reads the in-sync set from etcd (a scrape pays for it, never a message). When the
node starts to lead it closes this endpoint and the broker's takes the port.

With ``prometheus_authentication`` on, the endpoint is not served: the users live in the
broker, which a follower does not run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiohttp import web

from leveret.cluster.coordinator import Coordinator, CoordinatorError, Leadership
from leveret.cluster.follower import FollowerLink
from leveret.cluster.service import broker_node_name

log = logging.getLogger(__name__)

# Prometheus's text format 0.0.4, as the broker's endpoint serves it. Written here, a handful
# of series, rather than borrowed from ``management_ui``, a layer above this package.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def one(self, name: str, type_: str, help_: str, value: int,
            labels: tuple[tuple[str, str], ...] = ()) -> None:
        pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
        self.lines.append(f"# TYPE {name} {type_}\n# HELP {name} {help_}\n"
                          f"{name}{'{' + pairs + '}' if pairs else ''} {int(value)}\n")

    def text(self) -> str:
        return "".join(self.lines)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class FollowerMetrics:
    def __init__(self, node: str, cluster: str, coordinator: Coordinator, link: FollowerLink,
                 following: Callable[[], Leadership | None]) -> None:
        self.node = node
        self.cluster = cluster
        self.coordinator = coordinator
        self.link = link
        self.following = following
        self._runner: web.AppRunner | None = None

    async def listen(self, hosts: Sequence[str], port: int) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        where: list[str | None] = [*hosts] or [None]  # None: every interface
        for host in where:
            try:
                await web.TCPSite(runner, host, port, reuse_address=True).start()
            except OSError as exc:
                log.warning("not serving this follower's Prometheus metrics on port %d: %s",
                            port, exc.strerror or exc)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            in_sync: set[str] | None = await self.coordinator.in_sync()
        except CoordinatorError:
            in_sync = None  # etcd unreachable: the series are left out, not guessed
        return web.Response(body=self.render(in_sync).encode(),
                            headers={"Content-Type": CONTENT_TYPE})

    def render(self, in_sync: set[str] | None) -> str:
        w = _Text()
        w.one("rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info", 1, (
            ("rabbitmq_node", broker_node_name(self.node)), ("rabbitmq_cluster", self.cluster),
            ("rabbitmq_cluster_permanent_id", f"leveret-{self.cluster}")))
        leader = self.following()
        w.one("leveret_replication_leader", "gauge", "1 on the leader, 0 on a follower", 0)
        w.one("leveret_replication_epoch", "gauge",
              "Epoch of the leadership this node follows (0: no leader)",
              leader.epoch if leader is not None else 0)
        w.one("leveret_replication_last_batch", "gauge",
              "The last batch this node holds (a follower: applied and synced)", self.link.applied)
        w.one("leveret_replication_leader_connected", "gauge",
              "1 while this follower's replication link to the leader is up",
              self.link.connected)
        if in_sync is not None:
            w.one("leveret_replication_in_sync", "gauge",
                  "Nodes in the in-sync set, the leader included", len(in_sync))
            w.one("leveret_replication_member_in_sync", "gauge",
                  "1 when this node is in the in-sync set", self.node in in_sync)
        return w.text()
