"""Read routes for objects: exchanges, queues, bindings, and the helpers other routes use to
find a vhost, an exchange or a queue (RabbitMQ's paths and fields). The broker as a whole
(overview, nodes, whoami) is ``overview.py``'s; sessions are ``sessions.py``'s."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from leveret.broker import inventory
from leveret.broker.inventory import truthy
from leveret.management_ui import alerts, auth, views
from leveret.management_ui.listing import respond_list, respond_one
from leveret.management_ui.rights import DEST_KIND
from leveret.management_ui.router import Request, bad_request, json_response, not_found
from leveret.model.errors import ChannelError

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
