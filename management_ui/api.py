"""The management API's route table (RabbitMQ's paths) and its aiohttp application.

One row per route: method, path under ``/api/``, handler, the tag needed
(``auth.py``). Read it next to RabbitMQ's ``rabbit_mgmt_dispatcher.erl``.
A route with a ``{vhost}`` that exists also applies its ``auth.VHOST_RULES``
entry (by default: administrators, or users with permissions there), checked
by the router.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from leveret.management_ui import (
    admin,
    basic,
    definitions,
    delayed,
    guard,
    health,
    log_stream,
    messages,
    openapi_schemas,
    overview,
    read,
    sessions,
    traces,
    write,
)
from leveret.management_ui.auth import ADMINISTRATOR, MANAGEMENT, MONITORING, POLICYMAKER
from leveret.management_ui.console import Console
from leveret.management_ui.router import Router, error_response, json_response, make_handler

__all__ = ["ROUTES", "build_app", "openapi_document"]

M, MON, POL, ADM = MANAGEMENT, MONITORING, POLICYMAKER, ADMINISTRATOR
B = "bindings/{vhost}/e/{source}/{kind}/{dest}"

ROUTES: list[tuple[str, str, Any, str | None]] = [
    ("GET", "overview", overview.overview, M),
    ("GET", "whoami", overview.whoami, M),
    ("GET", "extensions", overview.extensions, M),
    ("GET", "auth", overview.auth_info, None),
    ("GET", "nodes", overview.nodes, MON),
    ("GET", "nodes/{node}", overview.node, MON),
    ("GET", "connections", sessions.connections, M),
    ("GET", "connections/{name}", sessions.connection, M),
    ("DELETE", "connections/{name}", write.delete_connection, M),
    ("GET", "connections/{name}/channels", sessions.connection_channels, M),
    ("GET", "vhosts/{vhost}/connections", sessions.connections, M),
    ("GET", "channels", sessions.channels, M),
    ("GET", "vhosts/{vhost}/channels", sessions.channels, M),
    ("GET", "channels/{name}", sessions.channel, M),
    ("GET", "consumers", sessions.consumers, M),
    ("GET", "consumers/{vhost}", sessions.consumers, M),
    ("DELETE", "consumers/{vhost}/{channel}/{tag}", write.delete_consumer, M),
    ("GET", "exchanges", read.exchanges, M),
    ("GET", "exchanges/{vhost}", read.exchanges, M),
    ("GET", "exchanges/{vhost}/{name}", read.exchange, M),
    ("PUT", "exchanges/{vhost}/{name}", write.put_exchange, M),
    ("DELETE", "exchanges/{vhost}/{name}", write.delete_exchange, M),
    ("GET", "exchanges/{vhost}/{name}/bindings/{side}", read.exchange_bindings, M),
    ("POST", "exchanges/{vhost}/{name}/publish", basic.publish, M),
    ("GET", "exchanges/{vhost}/{name}/delayed", delayed.listing, M),
    ("DELETE", "exchanges/{vhost}/{name}/delayed", delayed.cancel_all, M),
    ("DELETE", "exchanges/{vhost}/{name}/delayed/{id}", delayed.cancel, M),
    ("POST", "exchanges/{vhost}/{name}/delayed/{id}/release", delayed.release, M),
    ("GET", "queues", read.queues, M),
    ("GET", "queues/{vhost}", read.queues, M),
    ("GET", "queues/{vhost}/{name}", read.queue, M),
    ("PUT", "queues/{vhost}/{name}", write.put_queue, M),
    ("DELETE", "queues/{vhost}/{name}", write.delete_queue, M),
    ("GET", "queues/{vhost}/{name}/bindings", read.queue_bindings, M),
    ("DELETE", "queues/{vhost}/{name}/contents", write.purge_queue, M),
    ("POST", "queues/{vhost}/{name}/get", basic.get, M),
    ("POST", "queues/{vhost}/{name}/peek", messages.peek, M),
    ("POST", "queues/{vhost}/{name}/search", messages.search, M),
    ("POST", "queues/{vhost}/{name}/redrive", messages.redrive, M),
    ("POST", "queues/{vhost}/{name}/move", messages.move, M),
    ("DELETE", "queues/{vhost}/{name}/messages", messages.delete_messages, M),
    ("GET", "logs/stream", log_stream.stream_logs, ADM),
    ("PUT", "traces/{vhost}", traces.put_trace, MON),
    ("DELETE", "traces/{vhost}", traces.delete_trace, MON),
    ("GET", "traces/{vhost}", traces.get_trace, MON),
    ("GET", "traces/{vhost}/stream", traces.stream_trace, MON),
    ("GET", "bindings", read.bindings, M),
    ("GET", "bindings/{vhost}", read.bindings, M),
    ("GET", B, read.bindings_list_between, M),
    ("POST", B, write.post_binding, M),
    ("GET", B + "/{props}", read.binding, M),
    ("DELETE", B + "/{props}", write.delete_binding, M),
    ("GET", "vhosts", admin.vhosts, M),
    ("GET", "vhosts/{name}", admin.vhost, ADM),
    ("PUT", "vhosts/{name}", admin.put_vhost, ADM),
    ("DELETE", "vhosts/{name}", admin.delete_vhost, ADM),
    ("GET", "vhosts/{name}/permissions", admin.vhost_permissions, ADM),
    ("GET", "cluster-name", admin.cluster_name, M),
    ("GET", "feature-flags", admin.empty_list, ADM),
    ("GET", "users", admin.users, ADM),
    ("GET", "users/{name}", admin.user, ADM),
    ("PUT", "users/{name}", admin.put_user, ADM),
    ("DELETE", "users/{name}", admin.delete_user, ADM),
    ("GET", "users/{name}/permissions", admin.user_permissions, ADM),
    ("GET", "permissions", admin.permissions, ADM),
    ("GET", "permissions/{vhost}/{user}", admin.permission, ADM),
    ("PUT", "permissions/{vhost}/{user}", admin.put_permission, ADM),
    ("DELETE", "permissions/{vhost}/{user}", admin.delete_permission, ADM),
    ("GET", "topic-permissions", admin.topic_permissions, ADM),
    ("GET", "topic-permissions/{vhost}/{user}", admin.topic_permissions, ADM),
    ("PUT", "topic-permissions/{vhost}/{user}", admin.put_topic_permission, ADM),
    ("DELETE", "topic-permissions/{vhost}/{user}", admin.delete_topic_permission, ADM),
    ("DELETE", "topic-permissions/{vhost}/{user}/{exchange}", admin.delete_topic_permission,
     ADM),
    ("GET", "policies", admin.policies, M),
    ("GET", "policies/{vhost}", admin.policies, M),
    ("GET", "policies/{vhost}/{name}", admin.policy, POL),  # auth.POLICY, as PUT
    ("PUT", "policies/{vhost}/{name}", write.put_policy, POL),
    ("DELETE", "policies/{vhost}/{name}", write.delete_policy, POL),
    ("GET", "operator-policies", admin.empty_list, M),
    ("GET", "parameters", admin.empty_list, M),
    ("GET", "global-parameters", admin.empty_list, M),
    ("GET", "vhost-limits", admin.vhost_limits, M),
    ("GET", "vhost-limits/{vhost}", admin.vhost_limits, M),
    ("PUT", "vhost-limits/{vhost}/{limit}", admin.put_vhost_limit, ADM),
    ("DELETE", "vhost-limits/{vhost}/{limit}", admin.delete_vhost_limit, ADM),
    ("GET", "user-limits", admin.user_limits, ADM),
    ("GET", "user-limits/{name}", admin.user_limits, ADM),
    ("PUT", "user-limits/{name}/{limit}", admin.put_user_limit, ADM),
    ("DELETE", "user-limits/{name}/{limit}", admin.delete_user_limit, ADM),
    ("GET", "definitions", definitions.export, ADM),
    ("POST", "definitions", definitions.import_, ADM),
    ("GET", "definitions/{vhost}", definitions.export, ADM),
    ("POST", "definitions/{vhost}", definitions.import_, ADM),
    ("GET", "health/checks/alarms", health.alarms, M),
    ("GET", "health/checks/local-alarms", health.local_alarms, M),
    ("GET", "health/checks/virtual-hosts", health.virtual_hosts, M),
    ("GET", "health/checks/node-is-quorum-critical", health.single_node, M),
    ("GET", "health/checks/node-is-mirror-sync-critical", health.single_node, M),
    ("GET", "health/checks/certificate-expiration/{within}/{unit}",
     health.certificate_expiration, M),
    ("GET", "health/checks/port-listener/{port}", health.port_listener, M),
    ("GET", "health/checks/protocol-listener/{protocol}", health.protocol_listener, M),
    ("GET", "aliveness-test/{vhost}", health.aliveness_test, M),
]


def openapi_document() -> dict[str, Any]:
    """An OpenAPI 3 description of ROUTES: paths, methods, parameters, tags needed, and
    the request and response schemas of ``openapi_schemas.py``."""
    paths: dict[str, Any] = {}
    for method, pattern, handler, need in ROUTES:
        params = [seg[1:-1] for seg in pattern.split("/") if seg.startswith("{")]
        doc = (handler.__doc__ or handler.__name__.replace("_", " ")).strip().split("\n")[0]
        op: dict[str, Any] = {
            "summary": doc, "operationId": f"{method.lower()}_{pattern}",
            "parameters": [{"name": p, "in": "path", "required": True,
                            "schema": {"type": "string"}} for p in params],
            "responses": {**openapi_schemas.success_responses(method, pattern),
                          **openapi_schemas.error_responses()},
        }
        body = openapi_schemas.REQUEST_BODIES.get((method, pattern))
        if body is not None:
            op["requestBody"] = {"required": False,
                                 "content": openapi_schemas.json_content(body)}
        if need is not None:
            op["security"] = [{"basic": []}]
            op["x-rabbitmq-tag"] = need
        paths.setdefault(f"/api/{pattern}", {})[method.lower()] = op
    return {"openapi": "3.0.3",
            "info": {"title": "Leveret management API (RabbitMQ 3.10 compatible)",
                     "version": "1"},
            "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
                           "schemas": openapi_schemas.SCHEMAS},
            "paths": paths}


async def openapi(req: Any) -> web.Response:
    """This document."""
    return json_response(openapi_document())


ROUTES.append(("GET", "openapi.json", openapi, None))


def build_app(state: Any) -> web.Application:
    # A definitions file can be large; RabbitMQ's default body limit is 20 MB.
    app = web.Application(client_max_size=32 * 1024 * 1024,
                          middlewares=guard.middlewares(state.config))
    # [\s\S]: a percent-encoded newline in a name must reach the router too (".*" stops).
    app.router.add_route("*", "/api/{tail:[\\s\\S]*}", make_handler(Router(ROUTES), state))

    console = Console()

    async def root(request: web.Request) -> web.StreamResponse:
        """The web console's page and assets (console.py); anything else is 404."""
        if request.method in ("GET", "HEAD"):
            found = console.serve(request)
            if found is not None:
                return found
        return error_response(404, "Object Not Found", "Not Found")

    app.router.add_route("*", "/{tail:[\\s\\S]*}", root)
    return app
