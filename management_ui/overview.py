"""Read routes for the broker as a whole: overview, nodes, whoami, extensions, auth
(RabbitMQ's paths and fields). Objects (exchanges, queues, bindings) are ``read.py``'s."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.broker import inventory
from leveret.broker.api import EXCHANGE_TYPES
from leveret.management_ui import auth
from leveret.management_ui.listing import respond_list, respond_one
from leveret.management_ui.router import Request, json_response, not_found
from leveret.management_ui.sampler import VHOST_RATE_FIELDS, vhost_key
from leveret.model.stats import FIELDS as MESSAGE_STATS_FIELDS
from leveret.node import compiled

EXCHANGE_TYPE_DESCRIPTIONS = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
    "x-message-deduplication": "Message Deduplication Exchange.",  # the plugin's text
}
# Above this many queues, /api/overview's queue totals come from the last sample (<= 5 s old,
# like RabbitMQ's, which its stats emission delays too) instead of a walk over every queue.
LIVE_TOTALS_MAX_QUEUES = 1_000
DELIVER_GET = ("deliver", "deliver_no_ack", "get", "get_no_ack")  # model.stats.as_dict's sum
SAMPLE_RETENTION = {"global": [600, 3600, 28800, 86400], "basic": [600, 3600], "detailed": [600]}


def _chart(req: Request, kind: str) -> tuple[int | None, int | None]:
    age, incr = req.query.get(f"{kind}_age"), req.query.get(f"{kind}_incr")
    try:
        return (int(age) if age else None), (int(incr) if incr else None)
    except ValueError:
        return None, None


def exchange_types() -> list[dict[str, Any]]:
    return [{"name": t, "description": EXCHANGE_TYPE_DESCRIPTIONS.get(t, ""), "enabled": True}
            for t in sorted(EXCHANGE_TYPES)]


def listeners(state: Any) -> list[dict[str, Any]]:
    return [{"node": state.node, "protocol": protocol, "ip_address": ip, "port": port,
             "socket_opts": {}} for protocol, ip, port in state.broker.listeners]


async def overview(req: Request) -> web.Response:
    """The broker's totals. Monitoring users and administrators see the whole broker;
    other users (RabbitMQ 3.10.8, observed with a ``management`` user allowed in one vhost
    of two; ``test_management_overview.py``) see ``queue_totals``, ``message_stats`` and
    the exchange and queue counts of the vhosts they have permissions in, their own
    connections and channels, no ``consumers`` count and no ``node``, ``listeners`` or
    ``contexts``; ``churn_rates`` stay broker-wide. ``?columns=`` keeps whole top-level
    fields. Where Leveret differs: those users' ``X_details`` are summed over their
    vhosts' rings (``history.py``: 5 minutes of samples, where the broker's totals keep 10)."""
    state, broker = req.state, req.state.broker
    monitor = auth.allowed(req.tags, auth.MONITORING)
    out: dict[str, Any] = {
        "management_version": state.version, "rates_mode": "basic",
        "sample_retention_policies": SAMPLE_RETENTION, "exchange_types": exchange_types(),
        "product_version": state.version, "product_name": state.product_name,
        "rabbitmq_version": state.rabbitmq_version, "cluster_name": broker.cluster_name,
        "erlang_version": "n/a", "erlang_full_version": "n/a",
        "release_series_support_status": "supported",
        "disable_stats": False, "enable_queue_totals": False,
        "leveret_extensions": compiled.build(),  # the hot path: "compiled" or "pure" Python
    }
    if monitor:
        out.update(_broker_totals(req))
        out.update({
            "statistics_db_event_queue": 0, "node": state.node,
            "listeners": listeners(state),
            "contexts": [{"node": state.node, "description": "Leveret Management",
                          "path": "/", "port": str(port)}
                         for protocol, _, port in broker.listeners if protocol == "http"],
        })
    else:
        out.update(_vhost_totals(req))
        out["statistics_db_event_queue"] = 0
    return json_response(respond_one(req.query, out, top_level=True))


def _churn(req: Request) -> dict[str, Any]:
    s = req.state.sampler
    rate_age, rate_incr = _chart(req, "msg_rates")
    churn: dict[str, Any] = {}
    for name, value in req.state.broker.churn_totals().as_dict().items():
        churn[name] = value
        churn[f"{name}_details"] = s.details(f"churn_rates.{name}", rate_age, rate_incr)
    return churn


def _broker_totals(req: Request) -> dict[str, Any]:
    """The whole broker's message_stats, churn, queue and object totals, with rates and
    chart samples from the sampler's broker-wide series."""
    state, broker = req.state, req.state.broker
    s = state.sampler
    rate_age, rate_incr = _chart(req, "msg_rates")
    len_age, len_incr = _chart(req, "lengths")
    message_stats: dict[str, Any] = {}
    for name, value in broker.message_stats().as_dict().items():
        message_stats[name] = value
        message_stats[f"{name}_details"] = s.details(f"message_stats.{name}", rate_age, rate_incr)
    for name in ("disk_reads", "disk_writes"):
        message_stats[name] = 0
        message_stats[f"{name}_details"] = {"rate": 0.0}
    queues = sum(len(vh.queues) for vh in broker.vhosts.values())
    exchanges = sum(len(vh.exchanges) for vh in broker.vhosts.values())
    if queues > LIVE_TOTALS_MAX_QUEUES and state.queue_totals is not None:
        ready, unacked, consumers = state.queue_totals  # at most one sample (5 s) old
    else:
        ready = unacked = consumers = 0
        for vhost in broker.vhosts.values():
            for queue in vhost.queues.values():
                ready += queue.message_count
                unacked += queue.unacked
                consumers += queue.consumer_count
    queue_totals: dict[str, Any] = {}
    for name, value in (("messages", ready + unacked), ("messages_ready", ready),
                        ("messages_unacknowledged", unacked)):
        queue_totals[name] = value
        queue_totals[f"{name}_details"] = s.details(f"queue_totals.{name}", len_age, len_incr)
    connections = list(broker.connections)
    return {
        "message_stats": message_stats, "churn_rates": _churn(req), "queue_totals": queue_totals,
        "object_totals": {"channels": sum(len(c.channels) for c in connections),
                          "connections": len(connections), "consumers": consumers,
                          "exchanges": exchanges, "queues": queues},
    }


def _summed(state: Any, vhosts: list[Any], names: tuple[str, ...],
            age: int | None, incr: int | None) -> dict[str, dict[str, Any]]:
    """``X_details`` of ``names`` (vhost ring fields, and ``deliver_get``) summed over
    ``vhosts``: rates added, and with a range, samples added point by point (every vhost's
    points fall on the same clock grid)."""
    ring = VHOST_RATE_FIELDS + MESSAGE_STATS_FIELDS
    per_vhost = [state.sampler.object_details(vhost_key(vh.name), ring, 0, age, incr)
                 for vh in vhosts]
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        parts = DELIVER_GET if name == "deliver_get" else (name,)
        details = [d[p] for d in per_vhost for p in parts]
        summed: dict[str, Any] = {"rate": round(sum(d["rate"] for d in details), 1)}
        if age is not None:
            points: list[dict[str, Any]] = []
            for d in details:
                for i, sample in enumerate(d["samples"]):
                    if i == len(points):
                        points.append(dict(sample))
                    else:
                        points[i]["sample"] += sample["sample"]
            summed["samples"] = points
            summed["avg_rate"] = round(sum(d["avg_rate"] for d in details), 1)
            summed["avg"] = round(sum(d["avg"] for d in details), 1)
        out[name] = summed
    return out


def _vhost_totals(req: Request) -> dict[str, Any]:
    """The totals of the vhosts this (non-monitoring) user has permissions in, and of its
    own connections; rates and chart samples summed from the sampler's per-vhost rings."""
    state, broker = req.state, req.state.broker
    vhosts = auth.visible_vhosts(broker, req.user, req.tags, monitors_see_all=False)
    rate_age, rate_incr = _chart(req, "msg_rates")
    len_age, len_incr = _chart(req, "lengths")
    stats = broker.message_stats([vh.name for vh in vhosts]).as_dict()
    rates = _summed(state, vhosts, tuple(stats), rate_age, rate_incr)
    message_stats: dict[str, Any] = {}
    for name, value in stats.items():
        message_stats[name] = value
        message_stats[f"{name}_details"] = rates[name]
    for name in ("disk_reads", "disk_writes"):
        message_stats[name] = 0
        message_stats[f"{name}_details"] = {"rate": 0.0}
    ready = sum(q.message_count for vh in vhosts for q in vh.queues.values())
    unacked = sum(q.unacked for vh in vhosts for q in vh.queues.values())
    lengths = _summed(state, vhosts, VHOST_RATE_FIELDS[:3], len_age, len_incr)
    queue_totals: dict[str, Any] = {}
    for name, value in (("messages", ready + unacked), ("messages_ready", ready),
                        ("messages_unacknowledged", unacked)):
        queue_totals[name] = value
        queue_totals[f"{name}_details"] = lengths[name]
    own = [c for c in inventory.open_connections(broker) if c.user == req.user]
    if not vhosts:  # as RabbitMQ: nothing to sum is no figures, not zeros
        message_stats, queue_totals = {}, {}
    return {
        "message_stats": message_stats, "churn_rates": _churn(req), "queue_totals": queue_totals,
        "object_totals": {"channels": sum(len(c.channels) for c in own),
                          "connections": len(own),
                          "exchanges": sum(len(vh.exchanges) for vh in vhosts),
                          "queues": sum(len(vh.queues) for vh in vhosts)},
    }


def node_json(state: Any) -> dict[str, Any]:
    out = inventory.node_record(state.broker)
    out["name"] = state.node
    out.update({
        "mem_used_details": {"rate": 0.0}, "disk_free_details": {"rate": 0.0},
        "proc_used": 0, "proc_total": 0, "run_queue": 0, "rates_mode": "basic",
        "net_ticktime": 0, "exchange_types": exchange_types(),
        "auth_mechanisms": [{"name": m, "description": "", "enabled": True}
                            for m in ("PLAIN", "AMQPLAIN")],
        "partitions": [], "applications": [], "enabled_plugins": [], "cluster_links": [],
        "log_files": [], "config_files": [], "contexts": [],
    })
    return out


async def nodes(req: Request) -> web.Response:
    """This node; in a cluster, also every other node with ``running`` (only the leader
    serves the API, so the others' resources are not known here)."""
    rows = [node_json(req.state)]
    cluster = req.state.broker.cluster
    if cluster is not None:  # Leveret's: role, in_sync, replication_lag (batches; null: away)
        rows += [{"name": n.name, "type": "disc", "running": n.running, "leader": n.leader,
                  "role": "leader" if n.leader else "follower", "in_sync": n.in_sync,
                  "replication_lag": n.lag}
                 for n in cluster.nodes() if n.name != req.state.node]
        rows[0].update(leader=True, role="leader", in_sync=True, replication_lag=0)
    return json_response(respond_list(req.query, rows, lambda row: row))


async def node(req: Request) -> web.Response:
    if req.params["node"] != req.state.node:
        raise not_found()
    return json_response(respond_one(req.query, node_json(req.state)))


async def whoami(req: Request) -> web.Response:
    """RabbitMQ's ``name`` and ``tags``, plus (Leveret) the user's own ``permissions`` and
    ``topic_permissions``: RabbitMQ lets only administrators read permissions, so its UI
    offers actions a user then learns they may not take; everyone may read their own."""
    permissions, topics = req.state.broker.accounts.own_rights(req.user)
    return json_response(respond_one(req.query, {"name": req.user, "tags": req.tags,
                                                 "permissions": permissions,
                                                 "topic_permissions": topics}))


async def extensions(req: Request) -> web.Response:
    return json_response([])


async def auth_info(req: Request) -> web.Response:
    return json_response(respond_one(req.query, {"enable_uaa": False, "uaa_client_id": "",
                                                 "uaa_location": ""}))
