"""Definitions in RabbitMQ's format: export, and an import checked before it is applied.

The broker model's side of ``/api/definitions`` (``management_ui/definitions.py``),
``leveret ctl export_definitions``/``import_definitions`` and the
``load_definitions`` file read at boot: one implementation for all three.

Export: ``rabbit_version``, users (salted SHA-256 hashes, RabbitMQ's
``rabbit_password_hashing_sha256``), vhosts, permissions, policies, queues,
exchanges (user exchanges only) and bindings (not the default exchange's);
per vhost, only ``rabbit_version, parameters, policies, queues, exchanges,
bindings`` without ``vhost`` keys (as RabbitMQ).

Import is additive and **validated before anything is applied**: every item
is checked (types, vhosts, exchange types, queue arguments, policies,
equivalence with what exists, binding ends present in the broker or the
file); the first problem raises ``Invalid`` naming the item, and nothing
changes. Vhosts, users, permissions and topic permissions go through
``Accounts`` (persisted, pushed to live connections); a vhost named in the
file is validated against as if it existed (an unregistered ``VirtualHost``
stands in for it until it is created, first, when applying).

``apply`` checks and applies in one go (at boot, ``leveret ctl``); the HTTP
import goes through ``import_slices.py``, which runs the same ``plan_steps``
and operations with the loop given back between slices.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from leveret import __version__
from leveret.broker.delayed import check_declaration
from leveret.broker.inventory import (
    PRODUCT_NAME,
    RABBITMQ_VERSION,
    jsonable,
    truthy,
    vhost_bindings,
)
from leveret.broker.permissions import Permission, TopicPermission
from leveret.broker.users import User
from leveret.broker.vhost import VirtualHost
from leveret.exchanges import EXCHANGE_TYPES
from leveret.model.dedupe import settings_for_exchange
from leveret.model.errors import ChannelError, ConnectionError_
from leveret.queues import queue_types
from leveret.queues.arguments import validate_queue_arguments
from leveret.queues.policy import PolicyError, validate

if TYPE_CHECKING:
    from leveret.broker.broker import Broker


def policy_record(policy: Any) -> dict[str, Any]:
    return {"vhost": policy.vhost, "name": policy.name, "pattern": policy.pattern,
            "apply-to": policy.apply_to, "definition": policy.definition,
            "priority": policy.priority}


def permission_record(p: Any) -> dict[str, Any]:
    return {"user": p.user, "vhost": p.vhost, "configure": p.configure, "write": p.write,
            "read": p.read}


def topic_permission_record(t: Any) -> dict[str, Any]:
    return {"user": t.user, "vhost": t.vhost, "exchange": t.exchange, "write": t.write,
            "read": t.read}


def all_permissions(broker: Any) -> list[dict[str, Any]]:
    control = broker.accounts.control
    return sorted((permission_record(p) for u in sorted(broker.accounts.users)
                   for p in control.of_user(u)), key=lambda p: (p["vhost"], p["user"]))


def all_topic_permissions(broker: Any) -> list[dict[str, Any]]:
    return sorted((topic_permission_record(t) for t in broker.accounts.control.topics_of()),
                  key=lambda t: (t["vhost"], t["user"], t["exchange"]))


def _queues(vhost: Any, with_vhost: bool) -> list[dict[str, Any]]:
    out = []
    for q in sorted(vhost.queues.values(), key=lambda q: q.name):
        if q.exclusive:
            continue  # RabbitMQ leaves exclusive queues out
        item = {"name": q.name, "vhost": vhost.name, "durable": q.durable,
                "auto_delete": q.auto_delete, "arguments": jsonable(q.arguments)}
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
                "arguments": jsonable(x.arguments)}
        if not with_vhost:
            del item["vhost"]
        out.append(item)
    return out


def _bindings(vhost: Any, with_vhost: bool) -> list[dict[str, Any]]:
    out = []
    for b in vhost_bindings(vhost):
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
        item = policy_record(p)
        if not with_vhost:
            del item["vhost"]
        out.append(item)
    return out


def export(broker: Any, vhost: Any = None) -> dict[str, Any]:
    """The whole broker's definitions, or one vhost's (RabbitMQ's per-vhost shape)."""
    if vhost is not None:
        return {
            "rabbit_version": RABBITMQ_VERSION, "parameters": [],
            "policies": _policies(vhost, False), "queues": _queues(vhost, False),
            "exchanges": _exchanges(vhost, False), "bindings": _bindings(vhost, False),
        }
    vhosts = sorted(broker.vhosts.values(), key=lambda v: v.name)
    return {
        "rabbit_version": RABBITMQ_VERSION, "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": PRODUCT_NAME, "product_version": __version__,
        "users": [dict(u.record()) for u in sorted(broker.accounts.users.values(),
                                                   key=lambda u: u.name)],
        "vhosts": [{"name": v.name, "description": v.description, "tags": list(v.tags),
                    "default_queue_type": v.default_queue_type, "limits": [],
                    "metadata": {"description": v.description, "tags": list(v.tags)}}
                   for v in vhosts],
        "permissions": all_permissions(broker),
        "topic_permissions": all_topic_permissions(broker),
        "parameters": [], "global_parameters": [],
        "policies": [p for v in vhosts for p in _policies(v, True)],
        "queues": [q for v in vhosts for q in _queues(v, True)],
        "exchanges": [x for v in vhosts for x in _exchanges(v, True)],
        "bindings": [b for v in vhosts for b in _bindings(v, True)],
    }


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


# An operation of an import: what it applies (for a log line), and how.
Op = tuple[str, Callable[..., object]]  # called without arguments


def _op(what: str, apply: Callable[..., object]) -> Op:
    return what, apply


def plan(broker: Broker, defs: dict[str, Any], only_vhost: str | None) -> list[Op]:
    """Check everything; return the operations to apply, or raise Invalid."""
    ops: list[Op] = []
    for _ in plan_steps(broker, defs, only_vhost, ops):
        pass
    return ops


def plan_steps(broker: Broker, defs: dict[str, Any], only_vhost: str | None,
               ops: list[Op]) -> Iterator[None]:
    """``plan`` one item at a time: appends to ``ops`` and yields before each item, where
    a sliced import (``import_slices.py``) may give the loop back."""

    # Vhosts the file creates: validated against an unregistered stand-in, created first.
    planned_vhosts: dict[str, VirtualHost] = {}
    if only_vhost is None:
        for item in _list(defs, "vhosts"):
            yield
            name = _str(item, "name", "vhost")
            if not name:
                raise Invalid("vhost: the name cannot be empty")
            metadata: dict[str, Any] = item.get("metadata") or {}
            if not isinstance(metadata, dict):
                metadata = {}
            description = str(item.get("description", metadata.get("description", "")) or "")
            tags = item.get("tags", metadata.get("tags", ())) or ()
            dqt = item.get("default_queue_type") or None
            if name not in broker.vhosts:
                planned_vhosts[name] = VirtualHost(name, broker.log, broker.paging)
            ops.append(_op(f"vhost '{name}'", lambda n=name, d=description, t=tags, q=dqt:
                        broker.accounts.add_vhost(n, d, t, q)))

    def vhost_named(item: dict[str, Any], what: str) -> Any:
        name = only_vhost if only_vhost is not None else item.get("vhost")
        if not isinstance(name, str):
            raise Invalid(f"{what}: 'vhost' is missing")
        vhost = broker.vhosts.get(name) or planned_vhosts.get(name)
        if vhost is None:
            raise Invalid(f"{what}: vhost '{name}' does not exist")
        return vhost

    def live(vhost: Any) -> Any:
        return broker.vhosts[vhost.name]  # at apply time: the stand-in's real vhost

    yield from _plan_accounts(broker, defs, only_vhost, planned_vhosts, ops)
    for item in _list(defs, "policies"):
        yield
        what = f"policy '{item.get('name')}'"
        vhost = vhost_named(item, what)
        try:
            policy = validate(vhost.name, _str(item, "name", what), _str(item, "pattern", what),
                              item.get("definition"), item.get("priority", 0),
                              item.get("apply-to", "all"))
        except PolicyError as exc:
            raise Invalid(f"{what}: {exc}") from None
        ops.append(_op(what, lambda v=vhost, p=policy: live(v).set_policy(p)))
    new_exchanges: dict[tuple[str, str], Any] = {}
    for item in _list(defs, "exchanges"):
        yield
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
            else:  # a delayed exchange's and a deduplication window's arguments
                check_declaration(type_, args)
                settings_for_exchange(type_, args, flags[0])
        except (ChannelError, ConnectionError_) as exc:
            raise Invalid(exc.detail) from None
        new_exchanges[(vhost.name, name)] = (type_, flags, args)
        ops.append(_op(what, lambda v=vhost, n=name, t=type_, f=flags, a=args:
                    live(v).declare_exchange(n, t, *f, a)))
    new_queues: dict[tuple[str, str], Any] = {}
    for item in _list(defs, "queues"):
        yield
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
        ops.append(_op(what, lambda v=vhost, n=name, d=durable, ad=auto_delete, a=args:
                    live(v).declare_queue(n, durable=d, exclusive=False, auto_delete=ad,
                                          arguments=a)))
    for item in _list(defs, "bindings"):
        yield
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
        ops.append(_op(what, lambda v=vhost, s=source, d=dest, k=kind, r=rk, a=args:
                    live(v).bind(live(v).exchanges[s],
                                 (live(v).queues if k == "queue" else live(v).exchanges)[d],
                                 r, a)))


def _plan_accounts(broker: Any, defs: dict[str, Any], only_vhost: str | None,
                   planned_vhosts: dict[str, Any], ops: list[Op]) -> Iterator[None]:
    """Users, permissions and topic permissions of a full (not per-vhost) file."""
    if only_vhost is not None:
        return
    accounts = broker.accounts
    file_users: set[str] = set()
    for item in _list(defs, "users"):
        yield
        name = _str(item, "name", "user")
        what = f"user '{name}'"
        if "password" in item and "password_hash" in item:
            raise Invalid(f"{what}: password and password_hash cannot both be set")
        try:
            record = User.from_record(item)
        except (ValueError, TypeError, KeyError) as exc:
            raise Invalid(f"{what}: {exc}") from None
        file_users.add(name)
        if "password" in item:
            record.set_password(str(item["password"]))

        def put_user(r: User = record) -> None:
            if r.name in accounts.users:
                user = accounts.users[r.name]
                user.password_hash, user.hashing_algorithm = r.password_hash, r.hashing_algorithm
                accounts.set_user_tags(r.name, r.tags)  # persists the record
            else:
                accounts.add_user(r.name, tags=r.tags, password_hash=r.password_hash,
                                  hashing_algorithm=r.hashing_algorithm)
            if r.limits:
                accounts.set_user_limits(r.name, r.limits)
        ops.append((what, put_user))
    known_vhosts = set(broker.vhosts) | set(planned_vhosts)
    known_users = set(accounts.users) | file_users
    for key, fields, cls in (("permissions", ("configure", "write", "read"), Permission),
                             ("topic_permissions", ("exchange", "write", "read"),
                              TopicPermission)):
        for item in _list(defs, key):
            yield
            user, vhost = _str(item, "user", key), _str(item, "vhost", key)
            what = f"{key[:-1].replace('_', ' ')} of '{user}' in '{vhost}'"
            if user not in known_users:
                raise Invalid(f"{what}: no user '{user}'")
            if vhost not in known_vhosts:
                raise Invalid(f"{what}: vhost '{vhost}' does not exist")
            values = [_str(item, f, what) for f in fields]
            try:
                cls(user, vhost, *values)  # compiles the patterns
            except (re.error, ValueError) as exc:
                raise Invalid(f"{what}: {exc}") from None
            setter = (accounts.set_permissions if key == "permissions"
                      else accounts.set_topic_permissions)
            ops.append(_op(what, lambda f=setter, u=user, v=vhost, vals=values: f(u, v, *vals)))


def load_file(broker: Any, path: str) -> int:
    """Import a definitions file at start (``load_definitions``); returns the operations
    applied. Raises ``Invalid`` (with nothing applied) or ``OSError``/``ValueError``."""
    with open(path, "rb") as fh:
        defs = json.loads(fh.read())
    return apply(broker, defs)


def apply(broker: Any, defs: Any, only_vhost: str | None = None) -> int:
    """Check ``defs`` whole, then apply it; returns the operations applied.
    Raises ``Invalid`` with nothing applied."""
    if not isinstance(defs, dict):
        raise Invalid("the file does not hold a JSON object")
    ops = plan(broker, defs, only_vhost)
    for _, op in ops:
        op()
    return len(ops)
