"""Read routes for sessions: connections, channels and consumers (RabbitMQ's paths and
fields), each seen only by its own user, monitoring users and administrators."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.broker import inventory
from leveret.management_ui import auth, views
from leveret.management_ui.listing import respond_list, respond_one
from leveret.management_ui.read import list_ranges, vhost_of, vhosts_in_scope
from leveret.management_ui.router import ApiError, Request, json_response, not_found


def _connections(req: Request) -> list[Any]:
    """Open connections (in the path's vhost), those of other users only for monitoring
    users and administrators (``auth.may_see_connection``)."""
    vhost = vhost_of(req) if "vhost" in req.params else None
    return [c for c in inventory.open_connections(req.state.broker, vhost)
            if auth.may_see_connection(req.user, req.tags, c.user)]


def find_connection(req: Request, close: bool = False) -> Any:
    """The path's connection: 404 when there is none, 401 when it is another user's and
    this one may not see (or ``close``) it."""
    conn = inventory.find_connection(req.state.broker, req.params["name"])
    if conn is None:
        raise not_found()
    check_owner(req, conn.user, close)
    return conn


def check_owner(req: Request, owner: str | None, close: bool = False) -> None:
    if not auth.may_see_connection(req.user, req.tags, owner, close):
        raise ApiError(401, auth.NOT_AUTHORISED, auth.NO_OBJECT_ACCESS)


async def connections(req: Request) -> web.Response:
    found = _connections(req)
    ranges = list_ranges(req, len(found), {"name": True})
    return json_response(respond_list(req.query, found,
                                      lambda c: views.connection_json(c, req.state, ranges),
                                      {"name": views.connection_name}))


async def connection(req: Request) -> web.Response:
    return json_response(respond_one(req.query,
                                     views.connection_json(find_connection(req), req.state,
                                                           views.Ranges.of(req.query))))


async def connection_channels(req: Request) -> web.Response:
    conn = find_connection(req)
    channels = sorted(conn.channels.values(), key=lambda ch: ch.number)
    ranges = list_ranges(req, len(channels), {})
    return json_response(respond_list(req.query, channels,
                                      lambda ch: views.channel_json(ch, req.state, ranges)))


def _channels(req: Request) -> list[Any]:
    out = []
    for conn in _connections(req):
        out.extend(sorted(conn.channels.values(), key=lambda ch: ch.number))
    return out


async def channels(req: Request) -> web.Response:
    found = _channels(req)
    ranges = list_ranges(req, len(found), {"name": True})
    return json_response(respond_list(req.query, found,
                                      lambda ch: views.channel_json(ch, req.state, ranges),
                                      {"name": views.channel_name}))


async def channel(req: Request) -> web.Response:
    for ch in views.vhost_channels(req.state.broker):
        if views.channel_name(ch) == req.params["name"]:
            check_owner(req, ch.connection.user)
            return json_response(respond_one(req.query, views.channel_json(
                ch, req.state, views.Ranges.of(req.query))))
    raise not_found()


async def consumers(req: Request) -> web.Response:
    found = list(inventory.vhost_consumers(vhosts_in_scope(req, monitors_see_all=True)))
    return json_response(respond_list(req.query, found,
                                      lambda c: views.consumer_json(c, req.state)))
