"""JSON Schemas for the OpenAPI document (``api.openapi_document``): request bodies
and responses of the main routes, and RabbitMQ's error shape for every error.

The schemas say what clients rely on (the fields rabbitmqadmin and the UI
read, with their types), not every field: objects stay open
(``additionalProperties``), so a field added later does not break them.
``tests/integration/test_openapi_schemathesis.py`` runs schemathesis against
a live broker with them: no 5xx, every response as described.
"""

from __future__ import annotations

from typing import Any

STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
BOOL: dict[str, Any] = {"type": "boolean"}
NUM: dict[str, Any] = {"type": "number"}
OBJ: dict[str, Any] = {"type": "object"}
NULLABLE_STR: dict[str, Any] = {"type": "string", "nullable": True}


def obj(required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {"type": "object", "required": sorted(required),
            "properties": {**required, **optional}}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def array(name: str) -> dict[str, Any]:
    return {"type": "array", "items": ref(name)}


RATE = obj({"rate": NUM})

SCHEMAS: dict[str, Any] = {
    # Every error: {"error": ..., "reason": ...} (rabbit_mgmt_util's shape). A reason is
    # text, or an Erlang term as a list, as publish's ["not_int","priority"] (basic.py).
    "Error": obj({"error": STR, "reason": {"oneOf": [STR, {"type": "array"}]}}),
    "Health": obj({"status": {"type": "string", "enum": ["ok", "failed"]}}, reason=STR),
    # node, listeners, contexts and object_totals.consumers: monitoring users and
    # administrators only (overview.overview).
    "Overview": obj({"management_version": STR, "rabbitmq_version": STR, "cluster_name": STR,
                     "product_name": STR, "product_version": STR,
                     "object_totals": obj({k: INT for k in (
                         "channels", "connections", "exchanges", "queues")}, consumers=INT),
                     "queue_totals": OBJ, "message_stats": OBJ, "churn_rates": OBJ,
                     "exchange_types": {"type": "array", "items": obj({"name": STR})}},
                    node=STR, contexts={"type": "array", "items": OBJ},
                    listeners={"type": "array", "items": obj(
                        {"node": STR, "protocol": STR, "ip_address": STR, "port": INT})}),
    "Whoami": obj({"name": STR, "tags": {"type": "array", "items": STR}},
                  # Leveret: the user's own rights, {vhost, configure, write, read} and
                  # {vhost, exchange, write, read}.
                  permissions={"type": "array", "items": OBJ},
                  topic_permissions={"type": "array", "items": OBJ}),
    "Node": obj({"name": STR, "running": BOOL, "mem_used": INT, "mem_limit": INT,
                 "mem_alarm": BOOL, "disk_free": INT, "disk_free_limit": INT,
                 "disk_free_alarm": BOOL, "fd_used": INT, "fd_total": INT,
                 "sockets_used": INT, "sockets_total": INT, "uptime": INT}),
    "Queue": obj({"name": STR, "vhost": STR, "type": STR, "durable": BOOL,
                  "auto_delete": BOOL, "exclusive": BOOL, "arguments": OBJ, "node": STR,
                  "messages": INT, "messages_ready": INT, "messages_unacknowledged": INT},
                 consumers=INT, policy=NULLABLE_STR, messages_details=RATE,
                 message_stats=OBJ, messages_persistent=INT, messages_paged_out=INT,
                 # Body bytes (broker/queue_bytes.py), absent with disable_stats.
                 message_bytes=INT, message_bytes_ready=INT, message_bytes_unacknowledged=INT,
                 message_bytes_ram=INT, message_bytes_persistent=INT,
                 message_bytes_paged_out=INT),
    "Exchange": obj({"name": STR, "vhost": STR, "type": STR, "durable": BOOL,
                     "auto_delete": BOOL, "internal": BOOL, "arguments": OBJ}),
    "Binding": obj({"source": STR, "vhost": STR, "destination": STR,
                    "destination_type": {"type": "string", "enum": ["queue", "exchange"]},
                    "routing_key": STR, "arguments": OBJ, "properties_key": STR}),
    "Connection": obj({"name": STR, "node": STR, "user": STR, "vhost": STR, "state": STR,
                       "channels": INT, "peer_host": STR, "peer_port": INT,
                       "protocol": STR, "client_properties": OBJ}),
    "Channel": obj({"name": STR, "number": INT, "node": STR, "user": STR, "vhost": STR,
                    "connection_details": obj({"name": STR}), "consumer_count": INT,
                    "prefetch_count": INT, "messages_unacknowledged": INT}),
    "Consumer": obj({"consumer_tag": STR, "ack_required": BOOL, "prefetch_count": INT,
                     "queue": obj({"name": STR, "vhost": STR}),
                     "channel_details": obj({"name": STR, "connection_name": STR})}),
    "Vhost": obj({"name": STR, "description": STR, "tags": {"type": "array", "items": STR},
                  "messages": INT, "messages_details": RATE, "message_stats": OBJ}),
    "User": obj({"name": STR, "tags": {"type": "array", "items": STR},
                 "password_hash": STR, "hashing_algorithm": STR}),
    "Permission": obj({"user": STR, "vhost": STR, "configure": STR, "write": STR,
                       "read": STR}),
    "TopicPermission": obj({"user": STR, "vhost": STR, "exchange": STR, "write": STR,
                            "read": STR}),
    "Policy": obj({"vhost": STR, "name": STR, "pattern": STR, "apply-to": STR,
                   "definition": OBJ, "priority": INT}),
    "Definitions": obj({"rabbit_version": STR, "policies": {"type": "array"},
                        "queues": {"type": "array"}, "exchanges": {"type": "array"},
                        "bindings": {"type": "array"}}),
    "Routed": obj({"routed": BOOL}),
    "Message": obj({"payload": STR, "payload_encoding": STR, "payload_bytes": INT,
                    "redelivered": BOOL, "exchange": STR, "routing_key": STR,
                    "message_count": INT, "properties": OBJ}),
}

# The console's own API: browsed messages, operation outcomes, trace events.
SKIPPED = {"type": "array", "items": obj({"position": INT, "reason": STR})}
SCHEMAS.update({
    "BrowsedMessage": obj({"position": INT, "payload": STR, "payload_encoding": STR,
                           "payload_bytes": INT, "properties": OBJ, "exchange": STR,
                           "routing_key": STR, "redelivered": BOOL},
                          consumer_tag=STR, channel=STR, unacked_for_seconds=NUM,
                          timestamp=INT),  # a stream's: its arrival, ms
    "Moved": obj({"moved": INT, "skipped": SKIPPED}),
    "Deleted": obj({"deleted": INT, "skipped": SKIPPED}),
    "TraceEvent": obj({"event": {"type": "string", "enum": [
        "publish", "route", "enqueue", "deliver", "ack", "nack", "reject", "expire",
        "dead-letter", "drop", "return"]}, "timestamp": NUM, "message_id": NULLABLE_STR,
        "exchange": STR, "routing_key": STR}),
    "TraceStatus": obj({"enabled": BOOL}, capacity=INT, queue=NULLABLE_STR, records=INT,
                       evicted=INT, started=NUM, subscribers=INT,
                       recent={"type": "array", "items": ref("TraceEvent")}),
})
SELECTION: dict[str, Any] = {"count": INT, "positions": {"type": "array", "items": INT}}

# GET path (under /api/) -> the 200 response's schema.
GET_RESPONSES: dict[str, Any] = {
    "overview": ref("Overview"), "whoami": ref("Whoami"),
    "nodes": array("Node"), "nodes/{node}": ref("Node"),
    "queues": array("Queue"), "queues/{vhost}": array("Queue"),
    "queues/{vhost}/{name}": ref("Queue"), "queues/{vhost}/{name}/bindings": array("Binding"),
    "exchanges": array("Exchange"), "exchanges/{vhost}": array("Exchange"),
    "exchanges/{vhost}/{name}": ref("Exchange"),
    "exchanges/{vhost}/{name}/bindings/{side}": array("Binding"),
    "bindings": array("Binding"), "bindings/{vhost}": array("Binding"),
    "connections": array("Connection"), "vhosts/{vhost}/connections": array("Connection"),
    "connections/{name}": ref("Connection"), "connections/{name}/channels": array("Channel"),
    "channels": array("Channel"), "vhosts/{vhost}/channels": array("Channel"),
    "channels/{name}": ref("Channel"),
    "consumers": array("Consumer"), "consumers/{vhost}": array("Consumer"),
    "vhosts": array("Vhost"), "vhosts/{name}": ref("Vhost"),
    "users": array("User"), "users/{name}": ref("User"),
    "permissions": array("Permission"), "vhosts/{name}/permissions": array("Permission"),
    "users/{name}/permissions": array("Permission"),
    "permissions/{vhost}/{user}": ref("Permission"),
    "topic-permissions": array("TopicPermission"),
    "topic-permissions/{vhost}/{user}": array("TopicPermission"),
    "policies": array("Policy"), "policies/{vhost}": array("Policy"),
    "policies/{vhost}/{name}": ref("Policy"),
    "definitions": ref("Definitions"), "definitions/{vhost}": ref("Definitions"),
    "traces/{vhost}": {"oneOf": [array("TraceEvent"), ref("TraceStatus")]},
}
POST_RESPONSES: dict[str, Any] = {
    "exchanges/{vhost}/{name}/publish": ref("Routed"),
    "queues/{vhost}/{name}/get": array("Message"),
    "queues/{vhost}/{name}/peek": array("BrowsedMessage"),
    "queues/{vhost}/{name}/search": array("BrowsedMessage"),
    "queues/{vhost}/{name}/redrive": ref("Moved"),
    "queues/{vhost}/{name}/move": ref("Moved"),
}
DELETE_RESPONSES: dict[str, Any] = {
    "queues/{vhost}/{name}/messages": ref("Deleted"),
}

BOOLISH: dict[str, Any] = {"oneOf": [BOOL, STR]}  # rabbitmqadmin sends "true"
# Method + path -> request body schema (lenient, as RabbitMQ's: extra keys are ignored).
REQUEST_BODIES: dict[tuple[str, str], Any] = {
    ("PUT", "queues/{vhost}/{name}"): {"type": "object", "properties": {
        "durable": BOOLISH, "auto_delete": BOOLISH, "arguments": OBJ, "node": STR}},
    ("PUT", "exchanges/{vhost}/{name}"): {"type": "object", "properties": {
        "type": STR, "durable": BOOLISH, "auto_delete": BOOLISH, "internal": BOOLISH,
        "arguments": OBJ}},
    ("PUT", "vhosts/{name}"): {"type": "object", "properties": {
        "description": STR, "tags": {"oneOf": [STR, {"type": "array", "items": STR}]},
        "default_queue_type": STR, "tracing": BOOLISH}},
    ("PUT", "users/{name}"): {"type": "object", "properties": {
        "password": STR, "password_hash": STR, "hashing_algorithm": STR,
        "tags": {"oneOf": [STR, {"type": "array", "items": STR}]}}},
    ("PUT", "permissions/{vhost}/{user}"): {"type": "object", "properties": {
        "configure": STR, "write": STR, "read": STR}},
    ("PUT", "topic-permissions/{vhost}/{user}"): {"type": "object", "properties": {
        "exchange": STR, "write": STR, "read": STR}},
    ("PUT", "policies/{vhost}/{name}"): {"type": "object", "properties": {
        "pattern": STR, "definition": OBJ, "priority": INT, "apply-to": STR}},
    ("PUT", "vhost-limits/{vhost}/{limit}"): {"type": "object", "properties": {
        "value": INT}},
    ("PUT", "user-limits/{name}/{limit}"): {"type": "object", "properties": {
        "value": INT}},
    ("POST", "exchanges/{vhost}/{name}/publish"): {"type": "object", "properties": {
        "routing_key": STR, "payload": STR,
        "payload_encoding": {"type": "string", "enum": ["string", "base64"]},
        "properties": OBJ}},
    ("POST", "queues/{vhost}/{name}/get"): {"type": "object", "properties": {
        "count": INT, "ackmode": STR, "encoding": STR, "truncate": INT}},
    ("POST", "bindings/{vhost}/e/{source}/{kind}/{dest}"): {"type": "object", "properties": {
        "routing_key": STR, "arguments": OBJ}},
    ("POST", "queues/{vhost}/{name}/peek"): {"type": "object", "properties": {
        "offset": INT, "count": INT, "timestamp": INT,
        "state": {"type": "string", "enum": ["ready", "unacked"]},
        "encoding": {"type": "string", "enum": ["auto", "base64"]}}},
    ("POST", "queues/{vhost}/{name}/search"): {"type": "object", "properties": {
        "message_id": STR, "correlation_id": STR, "header": OBJ, "body_contains": STR,
        "limit": INT, "offset": INT, "timestamp": INT,
        "encoding": {"type": "string", "enum": ["auto", "base64"]}}},
    ("POST", "queues/{vhost}/{name}/redrive"): {"type": "object", "properties": SELECTION},
    ("POST", "queues/{vhost}/{name}/move"): {"type": "object", "properties": {
        "destination": STR, **SELECTION}},
    ("DELETE", "queues/{vhost}/{name}/messages"): {"type": "object", "properties": SELECTION},
    ("PUT", "traces/{vhost}"): {"type": "object", "properties": {
        "capacity": INT, "queue": STR}},
}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def error_responses() -> dict[str, Any]:
    """Every error status a route may answer, each with RabbitMQ's JSON error body; 401
    has none when no credentials were sent (as RabbitMQ), so its body is not described."""
    return {"401": {"description": "not_authorized: the login failed (with WWW-Authenticate; "
                                   "no body without credentials); not_authorised: refused "
                                   "after the login (a tag, vhost or object access)"},
            **{code: {"description": text, "content": json_content(ref("Error"))}
            for code, text in (("400", "bad_request (also a body over the size limit)"),
                               ("403", "forbidden: a write from another Origin"),
                               ("404", "Object Not Found"), ("405", "Method Not Allowed"),
                               ("408", "request_timeout: the body stopped arriving"),
                               ("415", "Unsupported Media Type: a write's body not JSON"))}}


def success_responses(method: str, pattern: str) -> dict[str, Any]:
    """The 2xx answers of one route (health checks also answer 503 with a JSON body)."""
    if pattern.startswith(("health/", "aliveness-test/")):
        body = json_content(ref("Health"))
        return {"200": {"description": "ok", "content": body},
                "503": {"description": "failed", "content": body}}
    if pattern.endswith("/stream"):  # server-sent events (management_ui/sse.py)
        return {"200": {"description": "text/event-stream: one JSON event per data line",
                        "content": {"text/event-stream": {"schema": STR}}}}
    if method == "DELETE" and pattern in DELETE_RESPONSES:
        return {"200": {"description": "OK",
                        "content": json_content(DELETE_RESPONSES[pattern])}}
    if method == "GET":
        schema = GET_RESPONSES.get(pattern)
        return {"200": {"description": "OK",
                        **({"content": json_content(schema)} if schema else {})}}
    if method == "POST" and pattern in POST_RESPONSES:
        return {"200": {"description": "OK", "content": json_content(POST_RESPONSES[pattern])}}
    if method == "PUT":
        return {"201": {"description": "Created"}, "204": {"description": "Updated"}}
    if method == "POST":
        return {"201": {"description": "Created"}, "204": {"description": "Done"}}
    return {"204": {"description": "Deleted"}}
