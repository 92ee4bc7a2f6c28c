"""Read routes: overview, nodes, exchanges, queues, bindings, vhosts, policies, whoami,
extensions, auth (RabbitMQ's paths and fields); sessions are ``sessions.py``'s."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from leveret.broker import inventory
from leveret.broker.api import EXCHANGE_TYPES
from leveret.broker.inventory import truthy
from leveret.management_ui import alerts, auth, views
from leveret.management_ui.listing import respond_list, respond_one
from leveret.management_ui.rights import DEST_KIND
from leveret.management_ui.router import Request, bad_request, json_response, not_found
from leveret.management_ui.sampler import VHOST_RATE_FIELDS, vhost_key
from leveret.model.errors import ChannelError
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
BY_NAME = {"name": lambda o: o.name}
BY_VHOST_NAME = {"name": lambda o: o.name, "vhost": lambda o: o.vhost.name}
# Queue fields readable without formatting: sorting 10,000 queues by them formats one page.
QUEUE_FIELDS = {
    **BY_VHOST_NAME,
    "messages": lambda q: q.message_count + q.unacked,
    "messages_ready": lambda q: q.message_count,
    "messages_unacknowledged": lambda q: q.unacked,
    "consumers": lambda q: q.consumer_count,
    "durable": lambda q: q.durable,
    "auto_delete": lambda q: q.auto_delete,
    "exclusive": lambda q: q.exclusive,
}


def vhost_of(req: Request, name: str | None = None) -> Any:
    vhost = req.state.broker.vhosts.get(req.params["vhost"] if name is None else name)
    if vhost is None:
        raise not_found()
    return vhost


def vhosts_in_scope(req: Request, monitors_see_all: bool = False) -> list[Any]:
    """The path's vhost (404 when missing), or every vhost; of those, the ones whose objects
    this user may list (``auth.visible_vhosts``; the router has already refused a path
    vhost the route's rule does not let the user name)."""
    if "vhost" in req.params:
        vhost = vhost_of(req)
        return [vhost] if auth.sees_vhost(req.state.broker, req.user, req.tags, vhost.name,
                                          monitors_see_all) else []
    return auth.visible_vhosts(req.state.broker, req.user, req.tags, monitors_see_all)


def _chart(req: Request, kind: str) -> tuple[int | None, int | None]:
    age, incr = req.query.get(f"{kind}_age"), req.query.get(f"{kind}_incr")
    try:
        return (int(age) if age else None), (int(incr) if incr else None)
    except ValueError:
        return None, None


def list_ranges(req: Request, total: int, cheap: dict[str, Any]) -> views.Ranges:
    """The chart ranges asked for a list, bounded by how many objects it formats: a page
    when paged and sorted by a field read off the objects, else all of them."""
    ranges = views.Ranges.of(req.query)
    if ranges == views.NO_RANGES:
        return ranges
    formatted = total
    sort = req.query.get("sort", "")
    if "page" in req.query and (not sort or sort in cheap):
        try:
            formatted = min(total, int(req.query.get("page_size") or 100))
        except ValueError:
            pass  # respond_list refuses it
    return ranges.bounded(formatted)


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


# -- exchanges, queues, bindings -----------------------------------------------------------------

def exchange_of(req: Request, vhost: Any, name: str) -> Any:
    exchange = vhost.exchanges.get("" if name == "amq.default" else name)
    if exchange is None:
        raise not_found()
    return exchange


def _sorted_exchanges(vhosts: list[Any]) -> list[Any]:
    return sorted((x for vh in vhosts for x in vh.exchanges.values()),
                  key=lambda x: (x.vhost, x.name))


async def exchanges(req: Request) -> web.Response:
    found = _sorted_exchanges(vhosts_in_scope(req))
    ranges = list_ranges(req, len(found), BY_VHOST_NAME)
    return json_response(respond_list(req.query, found,
                                      lambda x: views.exchange_json(x, req.state, ranges),
                                      {"name": lambda x: x.name, "vhost": lambda x: x.vhost}))


async def exchange(req: Request) -> web.Response:
    vhost = vhost_of(req)
    out = views.exchange_json(exchange_of(req, vhost, req.params["name"]), req.state,
                              views.Ranges.of(req.query))
    out["incoming"] = []  # per-exchange publish stats: not counted (no work per message)
    out["outgoing"] = []
    return json_response(respond_one(req.query, out))


async def exchange_bindings(req: Request) -> web.Response:
    """The bindings with this exchange as source or destination: none (not 404) when the
    vhost or the exchange does not exist, as RabbitMQ 3.10.8 answers."""
    side = req.params["side"]
    if side not in ("source", "destination"):
        raise not_found()
    vhost = req.state.broker.vhosts.get(req.params["vhost"])
    name = req.params["name"]
    name = "" if name == "amq.default" else name
    found: list[dict[str, Any]] = []
    if vhost is not None and name in vhost.exchanges:
        if side == "source":
            found = [b for b in views.vhost_bindings(vhost) if b["source"] == name]
        else:
            found = [b for b in views.vhost_bindings(vhost)
                     if b["destination_type"] == "exchange" and b["destination"] == name]
    return json_response(respond_list(req.query, found, _binding, pageless=True))


def _binding(b: dict[str, Any]) -> dict[str, Any]:
    """Binding lists: already formatted. RabbitMQ 3.10.8 neither pages them nor filters
    them by name (``listing.respond_list``'s ``pageless``)."""
    return b


def _sorted_queues(vhosts: list[Any]) -> list[Any]:
    return sorted((q for vh in vhosts for q in vh.queues.values()),
                  key=lambda q: (q.vhost.name, q.name))


def _annotator(req: Request) -> alerts.Annotator:
    """Alert hints for this request (``alerts.py``); ``?no_ack_seconds=`` sets the threshold."""
    raw = req.query.get("no_ack_seconds", "")
    try:
        no_ack = float(raw) if raw else alerts.NO_ACK_SECONDS
    except ValueError:
        raise bad_request("no_ack_seconds must be a number") from None
    return alerts.Annotator(req.state.ack_watch, no_ack, time.time())


async def queues(req: Request) -> web.Response:
    full = not truthy(req.query.get("disable_stats", "false"))
    state = req.state
    if not full:
        return json_response(respond_list(req.query, _sorted_queues(vhosts_in_scope(req)),
                                          lambda q: views.queue_json(q, state, False),
                                          QUEUE_FIELDS))
    annotate = _annotator(req)
    held = inventory.held_bytes(state.broker)  # unacked bytes: one pass for the whole list
    found = _sorted_queues(vhosts_in_scope(req))
    ranges = list_ranges(req, len(found), QUEUE_FIELDS)
    return json_response(respond_list(req.query, found,
                                      lambda q: annotate(q, views.queue_json(
                                          q, state, held=held, ranges=ranges)),
                                      QUEUE_FIELDS))


def queue_of(req: Request, vhost: Any) -> Any:
    queue = vhost.queues.get(req.params["name"])
    if queue is None:
        raise not_found()
    return queue


async def queue(req: Request) -> web.Response:
    vhost = vhost_of(req)
    q = queue_of(req, vhost)
    full = not truthy(req.query.get("disable_stats", "false"))
    out = views.queue_json(q, req.state, full, ranges=views.Ranges.of(req.query))
    if full:
        _annotator(req)(q, out)
    out["consumer_details"] = [views.consumer_json(c, req.state) for c in q.all_consumers()]
    out["deliveries"] = []
    out["incoming"] = []
    return json_response(respond_one(req.query, out))


async def queue_bindings(req: Request) -> web.Response:
    """The queue's bindings. RabbitMQ 3.10.8 does not look the queue up: for a missing one
    it lists the default exchange's implicit binding to that name (none when the vhost is
    missing), and so does this."""
    vhost = req.state.broker.vhosts.get(req.params["vhost"])
    name = req.params["name"]
    found: list[dict[str, Any]] = []
    if vhost is not None and name not in vhost.queues:
        found = [inventory.default_binding(vhost.name, name)]
    elif vhost is not None:
        found = [b for b in views.vhost_bindings(vhost)
                 if b["destination_type"] == "queue" and b["destination"] == name]
    return json_response(respond_list(req.query, found, _binding, pageless=True))


async def bindings(req: Request) -> web.Response:
    found = [b for vh in vhosts_in_scope(req) for b in views.vhost_bindings(vh)]
    return json_response(respond_list(req.query, found, _binding, pageless=True))


def binding_ends(vhost: Any, params: dict[str, str]) -> tuple[Any, Any]:
    """The source exchange and the destination of a ``bindings/{vhost}/e/{source}/{kind}/
    {dest}`` route; ChannelError NOT_FOUND for the first one missing, the source first (as
    RabbitMQ's HTTP bind names them). An unknown ``{kind}`` is 404."""
    kind = params["kind"]
    if kind not in DEST_KIND:
        raise not_found()
    source = vhost.get_exchange("" if params["source"] == "amq.default" else params["source"])
    dest = (vhost.get_queue if kind == "q" else vhost.get_exchange)(params["dest"])
    return source, dest


def bindings_between(req: Request) -> tuple[Any, Any, Any, list[dict[str, Any]]]:
    """/bindings/{vhost}/e/{source}/{q|e}/{destination}: (vhost, source, dest, bindings);
    404 ``Object Not Found`` when one of them is missing."""
    vhost = vhost_of(req)
    try:
        source, dest = binding_ends(vhost, req.params)
    except ChannelError:
        raise not_found() from None
    return vhost, source, dest, _between(vhost, source, dest, req.params["kind"])


def _between(vhost: Any, source: Any, dest: Any, kind: str) -> list[dict[str, Any]]:
    dest_type = DEST_KIND[kind]
    return [b for b in views.vhost_bindings(vhost)
            if b["source"] == source.name and b["destination"] == dest.name
            and b["destination_type"] == dest_type]


async def bindings_list_between(req: Request) -> web.Response:
    """The bindings from one exchange to one queue or exchange: none (not 404) when the
    vhost, the source or the destination does not exist, as RabbitMQ 3.10 answers."""
    vhost = req.state.broker.vhosts.get(req.params["vhost"])
    found: list[dict[str, Any]] = []
    if vhost is not None:
        try:
            source, dest = binding_ends(vhost, req.params)
        except ChannelError:
            pass
        else:
            found = _between(vhost, source, dest, req.params["kind"])
    return json_response(respond_list(req.query, found, _binding, pageless=True))


async def binding(req: Request) -> web.Response:
    for b in bindings_between(req)[3]:
        if views.same_properties_key(b["properties_key"], req.params["props"]):
            return json_response(respond_one(req.query, b))
    raise not_found()
