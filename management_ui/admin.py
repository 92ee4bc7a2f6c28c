"""Vhosts, users, permissions, topic permissions, limits and policies over HTTP.

Reads format the broker model; writes call ``Accounts`` (``broker/accounts.py``),
which checks, persists and pushes changes to live connections with
rabbitmqctl's texts: an ``AccountError`` becomes a 400 with that text, "does
not exist" a 404.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from leveret.broker import definitions
from leveret.broker.accounts import AccountError
from leveret.broker.limits import USER_LIMITS
from leveret.management_ui import auth, views
from leveret.management_ui.listing import respond_list, respond_one
from leveret.management_ui.read import BY_NAME, vhost_of, vhosts_in_scope
from leveret.management_ui.router import Request, bad_request, json_response, not_found
from leveret.management_ui.sampler import VHOST_RATE_FIELDS, vhost_key
from leveret.model.stats import FIELDS as MESSAGE_STATS_FIELDS

# -- vhosts, policies --------------------------------------------------------------------------

def vhost_json(vhost: Any, state: Any) -> dict[str, Any]:
    broker = state.broker
    ready = sum(q.message_count for q in vhost.queues.values())
    unacked = sum(q.unacked for q in vhost.queues.values())
    recv = send = 0
    for conn in list(broker.connections):
        if conn.vhost is vhost:
            recv += conn.recv_oct
            send += conn.send_oct
    description, tags = vhost.description, list(vhost.tags)
    names = VHOST_RATE_FIELDS + MESSAGE_STATS_FIELDS
    rates = state.sampler.object_rates(vhost_key(vhost.name), len(names))
    out: dict[str, Any] = {
        "name": vhost.name, "description": description, "tags": tags,
        "default_queue_type": vhost.default_queue_type or "undefined",
        "metadata": {"description": description, "tags": tags}, "tracing": False,
        "cluster_state": {state.node: "running"},
        **views.with_rates({"messages": ready + unacked, "messages_ready": ready,
                            "messages_unacknowledged": unacked, "recv_oct": recv,
                            "send_oct": send}, rates[:len(VHOST_RATE_FIELDS)],
                           VHOST_RATE_FIELDS),
    }
    out["message_stats"] = views.with_rates(broker.message_stats(vhost.name).as_dict(),
                                            rates[len(VHOST_RATE_FIELDS):],
                                            MESSAGE_STATS_FIELDS)
    return out


async def vhosts(req: Request) -> web.Response:
    """The vhosts this user may see (``auth.visible_vhosts``: monitoring users see all)."""
    items = sorted(auth.visible_vhosts(req.state.broker, req.user, req.tags, True),
                   key=lambda v: v.name)
    return json_response(respond_list(req.query, items, lambda v: vhost_json(v, req.state),
                                      BY_NAME))


async def vhost(req: Request) -> web.Response:
    return json_response(respond_one(req.query,
                                     vhost_json(vhost_of(req, req.params["name"]), req.state)))


policy_json = definitions.policy_record


async def policies(req: Request) -> web.Response:
    items = sorted((p for vh in vhosts_in_scope(req) for p in vh.policies),
                   key=lambda p: (p.vhost, p.name))
    return json_response(respond_list(req.query, items, policy_json, BY_NAME))


async def policy(req: Request) -> web.Response:
    vhost = vhost_of(req)
    found = vhost.policies.by_name.get(req.params["name"])
    if found is None:
        raise not_found()
    return json_response(respond_one(req.query, policy_json(found)))


# -- users, permissions, limits --------------------------------------------------------------

def user_json(user: Any) -> dict[str, Any]:
    return dict(user.record())


def _user(req: Request) -> Any:
    found = req.state.broker.accounts.users.get(req.params["name"])
    if found is None:
        raise not_found()
    return found


async def users(req: Request) -> web.Response:
    items = sorted(req.state.broker.accounts.users.values(), key=lambda u: u.name)
    return json_response(respond_list(req.query, items, user_json, BY_NAME))


async def user(req: Request) -> web.Response:
    return json_response(respond_one(req.query, user_json(_user(req))))


permission_json = definitions.permission_record
topic_permission_json = definitions.topic_permission_record


def all_permissions(state: Any) -> list[dict[str, Any]]:
    return definitions.all_permissions(state.broker)


def all_topic_permissions(state: Any) -> list[dict[str, Any]]:
    return definitions.all_topic_permissions(state.broker)


async def permissions(req: Request) -> web.Response:
    return json_response(respond_list(req.query, all_permissions(req.state), lambda p: p))


async def vhost_permissions(req: Request) -> web.Response:
    name = vhost_of(req, req.params["name"]).name
    found = [p for p in all_permissions(req.state) if p["vhost"] == name]
    return json_response(respond_list(req.query, found, lambda p: p))


async def user_permissions(req: Request) -> web.Response:
    name = _user(req).name
    found = [p for p in all_permissions(req.state) if p["user"] == name]
    return json_response(respond_list(req.query, found, lambda p: p))


async def permission(req: Request) -> web.Response:
    vhost, user = vhost_of(req).name, req.params["user"]
    for p in all_permissions(req.state):
        if (p["vhost"], p["user"]) == (vhost, user):
            return json_response(respond_one(req.query, p))
    raise not_found()


async def topic_permissions(req: Request) -> web.Response:
    found = all_topic_permissions(req.state)
    if "vhost" in req.params:
        found = [t for t in found if t["vhost"] == vhost_of(req).name
                 and t["user"] == req.params["user"]]
    return json_response(respond_list(req.query, found, lambda t: t))


def _limits_json(kind: str, name: str, limits: dict[str, int]) -> dict[str, Any]:
    return {kind: name, "value": dict(limits)}


async def vhost_limits(req: Request) -> web.Response:
    vhosts = sorted(vhosts_in_scope(req, monitors_see_all=True), key=lambda v: v.name)
    return json_response([_limits_json("vhost", v.name, v.limits) for v in vhosts if v.limits])


async def user_limits(req: Request) -> web.Response:
    users_ = [_user(req)] if "name" in req.params else sorted(
        req.state.broker.accounts.users.values(), key=lambda u: u.name)
    return json_response([_limits_json("user", u.name, u.limits) for u in users_ if u.limits])


# -- writes through Accounts ----------------------------------------------------------------

def _account_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except AccountError as exc:
        text = str(exc)
        if "does not exist" in text:
            raise not_found() from None
        raise bad_request(text) from None


async def put_vhost(req: Request) -> web.Response:
    body = await req.body()
    name = req.params["name"]
    existed = name in req.state.broker.vhosts
    metadata: dict[str, Any] = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        metadata = {}
    _account_call(req.state.broker.accounts.add_vhost, name,
                  str(body.get("description", metadata.get("description", "")) or ""),
                  body.get("tags", metadata.get("tags", ())) or (),
                  body.get("default_queue_type") or None)
    if not existed:  # as RabbitMQ: whoever creates a vhost gets full permissions on it
        _account_call(req.state.broker.accounts.set_permissions, req.user, name, ".*", ".*",
                      ".*")
    return web.Response(status=204 if existed else 201)


async def delete_vhost(req: Request) -> web.Response:
    _account_call(req.state.broker.accounts.delete_vhost, req.params["name"])
    return web.Response(status=204)


async def put_user(req: Request) -> web.Response:
    body = await req.body()
    accounts, name = req.state.broker.accounts, req.params["name"]
    if "password" in body and "password_hash" in body:
        raise bad_request("password and password_hash cannot both be set")
    if "tags" not in body:
        raise bad_request("[{key_missing,tags}]")
    tags = body["tags"]
    if name in accounts.users:
        if "password" in body:
            _account_call(accounts.change_password, name, str(body["password"]))
        elif "password_hash" in body:
            user = accounts.users[name]
            user.password_hash = str(body["password_hash"])
            user.hashing_algorithm = str(body.get("hashing_algorithm") or user.hashing_algorithm)
        _account_call(accounts.set_user_tags, name, tags)  # also persists a new hash
        return web.Response(status=204)
    kwargs: dict[str, Any] = {"tags": tags}
    if "password_hash" in body:
        kwargs["password_hash"] = str(body["password_hash"])
        if body.get("hashing_algorithm"):
            kwargs["hashing_algorithm"] = str(body["hashing_algorithm"])
    elif "password" in body:
        kwargs["password"] = str(body["password"])
    _account_call(accounts.add_user, name, **kwargs)
    return web.Response(status=201)


async def delete_user(req: Request) -> web.Response:
    _account_call(req.state.broker.accounts.delete_user, req.params["name"])
    return web.Response(status=204)


async def put_permission(req: Request) -> web.Response:
    body = await req.body()
    vhost, user = vhost_of(req).name, req.params["user"]
    existed = any((p["vhost"], p["user"]) == (vhost, user) for p in all_permissions(req.state))
    for key in ("configure", "write", "read"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    _account_call(req.state.broker.accounts.set_permissions, user, vhost,
                  str(body["configure"]), str(body["write"]), str(body["read"]))
    return web.Response(status=204 if existed else 201)


async def delete_permission(req: Request) -> web.Response:
    vhost, user = vhost_of(req).name, req.params["user"]
    if not any((p["vhost"], p["user"]) == (vhost, user) for p in all_permissions(req.state)):
        raise not_found()
    _account_call(req.state.broker.accounts.clear_permissions, user, vhost)
    return web.Response(status=204)


async def put_topic_permission(req: Request) -> web.Response:
    body = await req.body()
    for key in ("exchange", "write", "read"):
        if key not in body:
            raise bad_request(f"[{{key_missing,{key}}}]")
    _account_call(req.state.broker.accounts.set_topic_permissions, req.params["user"],
                  vhost_of(req).name, str(body["exchange"]), str(body["write"]),
                  str(body["read"]))
    return web.Response(status=201)


async def delete_topic_permission(req: Request) -> web.Response:
    _account_call(req.state.broker.accounts.clear_topic_permissions, req.params["user"],
                  vhost_of(req).name, req.params.get("exchange"))
    return web.Response(status=204)


async def put_vhost_limit(req: Request) -> web.Response:
    body = await req.body()
    vhost = vhost_of(req)
    _account_call(req.state.broker.accounts.set_vhost_limits, vhost.name,
                  {**vhost.limits, req.params["limit"]: body.get("value")})
    return web.Response(status=204)


async def delete_vhost_limit(req: Request) -> web.Response:
    vhost = vhost_of(req)
    if req.params["limit"] not in vhost.limits:
        raise not_found()
    _account_call(req.state.broker.accounts.set_vhost_limits, vhost.name,
                  {k: v for k, v in vhost.limits.items() if k != req.params["limit"]})
    return web.Response(status=204)


async def put_user_limit(req: Request) -> web.Response:
    """``PUT /api/user-limits/{name}/{limit}`` with ``{"value": n}``, with RabbitMQ 3.10's
    reasons; a negative value means no limit and is listed as set (as RabbitMQ)."""
    name, limit = req.params["name"], req.params["limit"]
    accounts = req.state.broker.accounts
    user = accounts.users.get(name)
    if user is None:
        raise bad_request(["no_such_user", name])
    body = await req.body()
    if "value" not in body:
        raise bad_request("[{key_missing,value}]")
    value = body["value"]
    if limit not in USER_LIMITS:
        raise bad_request(f'Unrecognised terms [{{<<"{limit}">>,{value}}}] in user-limits')
    if isinstance(value, bool) or not isinstance(value, int):
        shown = f'<<"{value}">>' if isinstance(value, str) else json.dumps(value)
        raise bad_request(f"{limit} should be a number, actually was {shown}")
    _account_call(accounts.set_user_limits, name, {**user.limits, limit: value})
    return web.Response(status=204)


async def delete_user_limit(req: Request) -> web.Response:
    """``DELETE /api/user-limits/{name}/{limit}``: 204 also when the limit was not set, as
    RabbitMQ; an unknown user is a 404 (RabbitMQ 3.10.8 answers an empty 500)."""
    user = _user(req)
    _account_call(req.state.broker.accounts.clear_user_limits, user.name, req.params["limit"])
    return web.Response(status=204)


async def cluster_name(req: Request) -> web.Response:
    return json_response(respond_one(req.query, {"name": req.state.broker.cluster_name}))


async def empty_list(req: Request) -> web.Response:
    return json_response([])
