"""Read routes for vhosts, policies, users and permissions.

Users and permissions are read-only over today's model (``Broker.users``, a
name -> password map where everyone is an administrator with full
permissions); the access-control work (issue 11) brings the real model and the
write routes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.management_ui import views
from leveret.management_ui.listing import respond_list
from leveret.management_ui.read import BY_NAME, vhost_of, vhosts_in_scope
from leveret.management_ui.router import Request, json_response, not_found


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
    description = "Default virtual host" if vhost.name == state.config.default_vhost else ""
    return {
        "name": vhost.name, "description": description, "tags": [],
        "default_queue_type": "undefined",
        "metadata": {"description": description, "tags": []}, "tracing": False,
        "cluster_state": {state.node: "running"},
        "messages": ready + unacked, "messages_details": {"rate": 0.0},
        "messages_ready": ready, "messages_ready_details": {"rate": 0.0},
        "messages_unacknowledged": unacked, "messages_unacknowledged_details": {"rate": 0.0},
        "recv_oct": recv, "recv_oct_details": {"rate": 0.0},
        "send_oct": send, "send_oct_details": {"rate": 0.0},
        "message_stats": views.with_rates(broker.message_stats(vhost.name).as_dict()),
    }


async def vhosts(req: Request) -> web.Response:
    items = sorted(req.state.broker.vhosts.values(), key=lambda v: v.name)
    return json_response(respond_list(req.query, items, lambda v: vhost_json(v, req.state),
                                      BY_NAME))


async def vhost(req: Request) -> web.Response:
    return json_response(vhost_json(vhost_of(req, req.params["name"]), req.state))


def policy_json(policy: Any) -> dict[str, Any]:
    return {"vhost": policy.vhost, "name": policy.name, "pattern": policy.pattern,
            "apply-to": policy.apply_to, "definition": policy.definition,
            "priority": policy.priority}


async def policies(req: Request) -> web.Response:
    items = sorted((p for vh in vhosts_in_scope(req) for p in vh.policies),
                   key=lambda p: (p.vhost, p.name))
    return json_response(respond_list(req.query, items, policy_json, BY_NAME))


async def policy(req: Request) -> web.Response:
    vhost = vhost_of(req)
    found = vhost.policies.by_name.get(req.params["name"])
    if found is None:
        raise not_found()
    return json_response(policy_json(found))


# -- users and permissions (read-only over today's model: issue 11 owns them) ---------------------

def user_json(name: str) -> dict[str, Any]:
    return {"name": name, "tags": ["administrator"], "limits": {}}


async def users(req: Request) -> web.Response:
    return json_response(respond_list(req.query, sorted(req.state.broker.users), user_json))


async def user(req: Request) -> web.Response:
    if req.params["name"] not in req.state.broker.users:
        raise not_found()
    return json_response(user_json(req.params["name"]))


def all_permissions(state: Any) -> list[dict[str, Any]]:
    return [{"user": u, "vhost": v, "configure": ".*", "write": ".*", "read": ".*"}
            for u in sorted(state.broker.users) for v in sorted(state.broker.vhosts)]


async def permissions(req: Request) -> web.Response:
    return json_response(respond_list(req.query, all_permissions(req.state), lambda p: p))


async def vhost_permissions(req: Request) -> web.Response:
    name = vhost_of(req, req.params["name"]).name
    found = [p for p in all_permissions(req.state) if p["vhost"] == name]
    return json_response(respond_list(req.query, found, lambda p: p))


async def user_permissions(req: Request) -> web.Response:
    if req.params["name"] not in req.state.broker.users:
        raise not_found()
    found = [p for p in all_permissions(req.state) if p["user"] == req.params["name"]]
    return json_response(respond_list(req.query, found, lambda p: p))


async def cluster_name(req: Request) -> web.Response:
    return json_response({"name": req.state.broker.cluster_name})


async def empty_list(req: Request) -> web.Response:
    return json_response([])
