"""Definitions export and import (``/api/definitions[/{vhost}]``), RabbitMQ's format.

Export: ``rabbit_version``, users (salted SHA-256 hashes, RabbitMQ's
``rabbit_password_hashing_sha256``), vhosts, permissions, policies, queues,
exchanges (user exchanges only) and bindings (not the default exchange's);
per vhost, only ``rabbit_version, parameters, policies, queues, exchanges,
bindings`` without ``vhost`` keys (as RabbitMQ).

Import is additive and **validated before anything is applied**: every item
is checked (types, vhosts, exchange types, queue arguments, policies,
equivalence with what exists, binding ends present in the broker or the
file); the first problem is a 400 naming the item, and nothing changes.
Users and permissions are not imported yet: the user model (issue 11)
will take them; until then they are reported in the log and skipped. Vhosts
are not created (also issue 11): a file naming an unknown vhost is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from typing import Any

from aiohttp import web

from leveret.exchanges import EXCHANGE_TYPES
from leveret.management_ui import admin, read, views
from leveret.management_ui.listing import truthy
from leveret.management_ui.router import Request, bad_request, json_response
from leveret.model.errors import ChannelError
from leveret.queues import queue_types
from leveret.queues.arguments import validate_queue_arguments
from leveret.queues.policy import PolicyError, validate

log = logging.getLogger(__name__)

HASHING = "rabbit_password_hashing_sha256"


def password_hash(password: str, salt: bytes | None = None) -> str:
    """``base64(salt4 + sha256(salt4 + utf8(password)))`` (RabbitMQ's passwords.md)."""
    salt = os.urandom(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def _queues(vhost: Any, with_vhost: bool) -> list[dict[str, Any]]:
    out = []
    for q in sorted(vhost.queues.values(), key=lambda q: q.name):
        if q.exclusive:
            continue  # RabbitMQ leaves exclusive queues out
        item = {"name": q.name, "vhost": vhost.name, "durable": q.durable,
                "auto_delete": q.auto_delete, "arguments": views.jsonable(q.arguments)}
        if not with_vhost:
            del item["vhost"]
        out.append(item)
    return out


def _exchanges(vhost: Any, with_vhost: bool) -> list[dict[str, Any]]:
    out = []
    for x in sorted(vhost.exchanges.values(), key=lambda x: x.name):
        if x.name == "" or x.name.startswith("amq."):
            continue
        item = {"name": x.name, "vhost": vhost.name, "type": x.type, "durable": x.durable,
                "auto_delete": x.auto_delete, "internal": x.internal,
                "arguments": views.jsonable(x.arguments)}
        if not with_vhost:
            del item["vhost"]
        out.append(item)
    return out


def _bindings(vhost: Any, with_vhost: bool) -> list[dict[str, Any]]:
    out = []
    for b in views.vhost_bindings(vhost):
        if b["source"] == "":
            continue
        item = {k: b[k] for k in ("source", "vhost", "destination", "destination_type",
                                  "routing_key", "arguments")}
        if not with_vhost:
            del item["vhost"]
        out.append(item)
    return out


def _policies(vhost: Any, with_vhost: bool) -> list[dict[str, Any]]:
    out = []
    for p in sorted(vhost.policies, key=lambda p: p.name):
        item = admin.policy_json(p)
        if not with_vhost:
            del item["vhost"]
        out.append(item)
    return out


async def export(req: Request) -> web.Response:
    state, broker = req.state, req.state.broker
    if "vhost" in req.params:
        vhost = read.vhost_of(req)
        body: dict[str, Any] = {
            "rabbit_version": state.rabbitmq_version, "parameters": [],
            "policies": _policies(vhost, False), "queues": _queues(vhost, False),
            "exchanges": _exchanges(vhost, False), "bindings": _bindings(vhost, False),
        }
    else:
        vhosts = sorted(broker.vhosts.values(), key=lambda v: v.name)
        body = {
            "rabbit_version": state.rabbitmq_version, "rabbitmq_version": state.rabbitmq_version,
            "product_name": state.product_name, "product_version": state.version,
            "users": [{"name": u, "password_hash": password_hash(p), "hashing_algorithm": HASHING,
                       "tags": ["administrator"], "limits": {}}
                      for u, p in sorted(broker.users.items())],
            "vhosts": [{"name": v.name, "limits": [], "metadata": {"description": "", "tags": []}}
                       for v in vhosts],
            "permissions": admin.all_permissions(state), "topic_permissions": [],
            "parameters": [], "global_parameters": [],
            "policies": [p for v in vhosts for p in _policies(v, True)],
            "queues": [q for v in vhosts for q in _queues(v, True)],
            "exchanges": [x for v in vhosts for x in _exchanges(v, True)],
            "bindings": [b for v in vhosts for b in _bindings(v, True)],
        }
    headers = {}
    if "download" in req.query:
        headers["Content-Disposition"] = f'attachment; filename="{req.query["download"]}"'
    return json_response(body, headers=headers)


class Invalid(Exception):
    pass


def _list(defs: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = defs.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise Invalid(f"'{key}' must be a list of objects")
    return items


def _str(item: dict[str, Any], key: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise Invalid(f"{what}: '{key}' is missing or not a string")
    return value


def plan(broker: Any, defs: dict[str, Any], only_vhost: str | None) -> list[Any]:
    """Check everything; return the operations to apply (callables), or raise Invalid."""
    ops: list[Any] = []

    def vhost_named(item: dict[str, Any], what: str) -> Any:
        name = only_vhost if only_vhost is not None else item.get("vhost")
        if not isinstance(name, str):
            raise Invalid(f"{what}: 'vhost' is missing")
        vhost = broker.vhosts.get(name)
        if vhost is None:
            raise Invalid(f"{what}: vhost '{name}' does not exist")
        return vhost

    if only_vhost is None:
        for item in _list(defs, "vhosts"):
            name = _str(item, "name", "vhost")
            if name not in broker.vhosts:
                raise Invalid(f"vhost '{name}' does not exist (Leveret cannot create vhosts yet)")
    for item in _list(defs, "policies"):
        what = f"policy '{item.get('name')}'"
        vhost = vhost_named(item, what)
        try:
            policy = validate(vhost.name, _str(item, "name", what), _str(item, "pattern", what),
                              item.get("definition"), item.get("priority", 0),
                              item.get("apply-to", "all"))
        except PolicyError as exc:
            raise Invalid(f"{what}: {exc}") from None
        ops.append(lambda v=vhost, p=policy: v.set_policy(p))
    new_exchanges: dict[tuple[str, str], Any] = {}
    for item in _list(defs, "exchanges"):
        name = _str(item, "name", "exchange")
        what = f"exchange '{name}'"
        vhost = vhost_named(item, what)
        type_ = _str(item, "type", what)
        if type_ not in EXCHANGE_TYPES:
            raise Invalid(f"{what}: unknown exchange type '{type_}'")
        args = item.get("arguments") or {}
        if not isinstance(args, dict):
            raise Invalid(f"{what}: 'arguments' must be an object")
        flags = (truthy(item.get("durable", True)), truthy(item.get("auto_delete", False)),
                 truthy(item.get("internal", False)))
        existing = vhost.exchanges.get(name)
        if existing is None and name.startswith("amq."):
            raise Invalid(f"{what}: the 'amq.' prefix is reserved")
        earlier = new_exchanges.get((vhost.name, name))
        if earlier is not None and earlier != (type_, flags, args):
            raise Invalid(f"{what} appears twice with different properties")
        try:
            if existing is not None:  # the same check a redeclare makes, without declaring
                vhost._check_exchange_equivalent(existing, type_, *flags, args)
        except ChannelError as exc:
            raise Invalid(exc.detail) from None
        new_exchanges[(vhost.name, name)] = (type_, flags, args)
        ops.append(lambda v=vhost, n=name, t=type_, f=flags, a=args:
                   v.declare_exchange(n, t, *f, a))
    new_queues: dict[tuple[str, str], Any] = {}
    for item in _list(defs, "queues"):
        name = _str(item, "name", "queue")
        what = f"queue '{name}'"
        vhost = vhost_named(item, what)
        args = item.get("arguments") or {}
        if not isinstance(args, dict):
            raise Invalid(f"{what}: 'arguments' must be an object")
        durable, auto_delete = truthy(item.get("durable", True)), truthy(item.get("auto_delete", False))
        if name.startswith("amq."):
            raise Invalid(f"{what}: the 'amq.' prefix is reserved")
        earlier = new_queues.get((vhost.name, name))
        if earlier is not None and earlier != (durable, auto_delete, args):
            raise Invalid(f"{what} appears twice with different properties")
        try:
            validate_queue_arguments(args, vhost.describe_queue(name))
            existing = vhost.queues.get(name)
            if existing is not None:
                vhost._check_queue_equivalent(existing, durable, False, auto_delete, args)
            else:
                queue_types.check_declare(
                    queue_types.queue_type(args), server_named=False, durable=durable,
                    exclusive=False, auto_delete=auto_delete, arguments=args,
                    what=vhost.describe_queue(name))
        except ChannelError as exc:
            raise Invalid(exc.detail) from None
        new_queues[(vhost.name, name)] = (durable, auto_delete, args)
        ops.append(lambda v=vhost, n=name, d=durable, ad=auto_delete, a=args:
                   v.declare_queue(n, durable=d, exclusive=False, auto_delete=ad, arguments=a))
    for item in _list(defs, "bindings"):
        source = _str(item, "source", "binding")
        dest = _str(item, "destination", "binding")
        what = f"binding '{source}' -> '{dest}'"
        vhost = vhost_named(item, what)
        kind = item.get("destination_type", "queue")
        if kind not in ("queue", "exchange"):
            raise Invalid(f"{what}: destination_type must be queue or exchange")
        if source not in vhost.exchanges and (vhost.name, source) not in new_exchanges:
            raise Invalid(f"{what}: no exchange '{source}' in vhost '{vhost.name}'")
        known = vhost.queues if kind == "queue" else vhost.exchanges
        planned = new_queues if kind == "queue" else new_exchanges
        if dest not in known and (vhost.name, dest) not in planned:
            raise Invalid(f"{what}: no {kind} '{dest}' in vhost '{vhost.name}'")
        if source == "":
            raise Invalid(f"{what}: cannot bind to the default exchange")
        args = item.get("arguments") or {}
        rk = str(item.get("routing_key", ""))
        ops.append(lambda v=vhost, s=source, d=dest, k=kind, r=rk, a=args: v.bind(
            v.exchanges[s], (v.queues if k == "queue" else v.exchanges)[d], r, a))
    skipped = [k for k in ("users", "permissions", "topic_permissions") if defs.get(k)]
    if skipped:
        log.warning("definitions: %s not imported (the user model comes with issue 11)",
                    ", ".join(skipped))
    return ops


def load_file(broker: Any, path: str) -> int:
    """Import a definitions file at start (``load_definitions``); returns the operations
    applied. Raises ``Invalid`` (with nothing applied) or ``OSError``/``ValueError``."""
    with open(path, "rb") as fh:
        defs = json.loads(fh.read())
    if not isinstance(defs, dict):
        raise Invalid("the file does not hold a JSON object")
    ops = plan(broker, defs, None)
    for op in ops:
        op()
    return len(ops)


async def import_(req: Request) -> web.Response:
    only = read.vhost_of(req).name if "vhost" in req.params else None
    if req.http.content_type.startswith("multipart/"):
        form = await req.http.post()  # the UI's upload: a "file" field
        upload: Any = form.get("file")
        raw = upload.file.read() if hasattr(upload, "file") else str(upload or "").encode()
        try:
            defs = json.loads(raw)
        except ValueError:
            raise bad_request("not_json") from None
    else:
        defs = await req.body()
    if not isinstance(defs, dict):
        raise bad_request("not_json")
    try:
        ops = plan(req.state.broker, defs, only)
    except Invalid as exc:
        raise bad_request(f"Validation failed: {exc}; nothing was imported") from None
    for op in ops:
        op()
    log.info("definitions imported: %d operation(s)", len(ops))
    return web.Response(status=204)
