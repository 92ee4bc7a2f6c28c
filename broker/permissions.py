"""Permissions: who may configure, write and read what, per (user, vhost).

Theory of operation
-------------------
RabbitMQ's model (``rabbit_access_control`` over ``rabbit_auth_backend_internal``):
three regular expressions per user and vhost, matched *unanchored* against a
resource name (``re:run``, so ``"q"`` allows ``"aqb"``); ``''`` is stored as
``^$`` (nothing). Which operation needs which right, checked where RabbitMQ's
``rabbit_channel`` checks it (before the object is looked up, so a refused
name gets 403 even when it does not exist):

===============================  =========  ======================  ==================
operation                        configure  write                   read
===============================  =========  ======================  ==================
exchange.declare (not passive)   exchange   (AE: the AE)            (AE: the exchange)
queue.declare (not passive)      queue      (DLX: the DLX)          (DLX: the queue)
exchange.delete / queue.delete   the object
queue.bind / unbind                         queue                   exchange
exchange.bind / unbind                      destination             source
basic.publish                               exchange (amq.default)
basic.get / consume, queue.purge                                    queue
===============================  =========  ======================  ==================

Passive declares are not checked (RabbitMQ 3.10; 4.3.1 wants any one right).
Topic permissions (opt-in): for a topic exchange named in a user's topic
permissions, publish needs the routing key to match ``write`` and a binding
from it needs the binding key to match ``read``; ``{username}`` and
``{vhost}`` in a pattern are expanded. No topic permissions: no check.

Patterns are compiled by RE2 (``model.name_pattern``): every publish and declare
matches a client-chosen name against them, so a backtracking pattern would let any
client stall the broker's loop; RE2 refuses backreferences and lookaround instead.

Cost: each pattern is compiled once, when set. An ``Access`` is one
channel's view (user, vhost, compiled permission) and remembers every
allowed decision, so a repeated check is a set lookup; the publish path
looks only at ``Access.writable`` (exchange names already allowed). When
permissions change the broker hands its channels a fresh ``Access``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from leveret.model import name_pattern
from leveret.model.errors import ACCESS_REFUSED, ChannelError
from leveret.model.name_pattern import NamePattern

CONFIGURE, WRITE, READ = "configure", "write", "read"
DEFAULT_EXCHANGE_NAME = "amq.default"  # how the default exchange "" is named in checks
# Allowed decisions remembered per channel; a client inventing names cannot grow it forever.
CACHE_LIMIT = 4096


def compile_pattern(pattern: str) -> NamePattern:
    """RabbitMQ stores ``''`` as ``^$``; a bad regex is a ``ValueError`` with its reason."""
    try:
        return name_pattern.compile_pattern(pattern or "^$", caseless=False)
    except name_pattern.PatternError as exc:
        raise ValueError(f"invalid regular expression '{pattern}': {exc}") from None


@dataclass
class Permission:
    """configure / write / read patterns of one user in one vhost, compiled once."""

    user: str
    vhost: str
    configure: str
    write: str
    read: str
    _compiled: dict[str, NamePattern] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._compiled = {CONFIGURE: compile_pattern(self.configure),
                          WRITE: compile_pattern(self.write), READ: compile_pattern(self.read)}

    def allows(self, right: str, name: str) -> bool:
        return self._compiled[right].search(name) is not None

    def record(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost, "configure": self.configure,
                "write": self.write, "read": self.read}


@dataclass
class TopicPermission:
    user: str
    vhost: str
    exchange: str
    write: str
    read: str

    _compiled: dict[str, NamePattern] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # {username} and {vhost} are this record's own, so each pattern expands once.
        self._compiled = {right: compile_pattern(pattern.replace(
            "{username}", re.escape(self.user)).replace("{vhost}", re.escape(self.vhost)))
            for right, pattern in ((WRITE, self.write), (READ, self.read))}

    def allows(self, right: str, routing_key: str) -> bool:
        return self._compiled[right].search(routing_key) is not None

    def record(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost, "exchange": self.exchange,
                "write": self.write, "read": self.read}


def refused(kind: str, name: str, vhost: str, user: str) -> ChannelError:
    return ChannelError(ACCESS_REFUSED,
                        f"access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'")


class Access:
    """One channel's rights: checks raise 403 with RabbitMQ's text; allowed ones are cached."""

    __slots__ = ("_allowed", "permission", "topics", "user", "vhost", "writable")

    def __init__(self, user: str, vhost: str, permission: Permission | None,
                 topics: dict[str, TopicPermission] | None = None) -> None:
        self.user = user
        self.vhost = vhost
        self.permission = permission
        self.topics = topics or None  # exchange name -> topic permission; None = no checks
        self.writable: set[str] = set()  # exchanges basic.publish may use (the hot path)
        self._allowed: set[tuple[str, str, str]] = set()

    def check(self, right: str, kind: str, name: str) -> None:
        if not name and kind == "exchange":
            name = DEFAULT_EXCHANGE_NAME
        key = (right, kind, name)
        if key in self._allowed:
            return
        permission = self.permission
        if permission is None or not permission.allows(right, name):
            raise refused(kind, name, self.vhost, self.user)
        if len(self._allowed) >= CACHE_LIMIT:
            self._allowed.clear()
        self._allowed.add(key)

    def check_publish(self, exchange: str) -> None:
        """write on the exchange (``amq.default`` for ``""``); remembered in ``writable``."""
        self.check(WRITE, "exchange", exchange)
        if len(self.writable) >= CACHE_LIMIT:
            self.writable.clear()
        self.writable.add(exchange)

    def check_topic(self, right: str, exchange: str, routing_key: str) -> None:
        """Topic permission on a topic exchange's routing/binding key (callers check the type)."""
        topics = self.topics
        if topics is None:
            return
        topic = topics.get(exchange)
        if topic is not None and not topic.allows(right, routing_key):
            raise ChannelError(
                ACCESS_REFUSED, f"access to topic '{routing_key}' in exchange '{exchange}' in "
                f"vhost '{self.vhost}' refused for user '{self.user}'")


class AccessControl:
    """Every permission and topic permission, by (user, vhost)."""

    def __init__(self) -> None:
        self.permissions: dict[tuple[str, str], Permission] = {}
        self.topics: dict[tuple[str, str], dict[str, TopicPermission]] = {}

    def access(self, user: str, vhost: str) -> Access:
        return Access(user, vhost, self.permissions.get((user, vhost)),
                      self.topics.get((user, vhost)))

    def can_open(self, user: str, vhost: str) -> bool:
        """A connection may open a vhost on which the user has (any) permissions."""
        return (user, vhost) in self.permissions

    def set(self, permission: Permission) -> None:
        self.permissions[permission.user, permission.vhost] = permission

    def clear(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.pop((user, vhost), None)

    def set_topic(self, topic: TopicPermission) -> None:
        self.topics.setdefault((topic.user, topic.vhost), {})[topic.exchange] = topic

    def clear_topic(self, user: str, vhost: str, exchange: str | None = None) -> list[TopicPermission]:
        """Remove one exchange's topic permission, or all of them; returns what went."""
        per = self.topics.get((user, vhost), {})
        gone = [per.pop(exchange)] if exchange is not None and exchange in per else (
            [] if exchange is not None else list(per.values()))
        if exchange is None or not per:
            self.topics.pop((user, vhost), None)
        return gone

    def of_user(self, user: str) -> list[Permission]:
        return [p for (u, _), p in self.permissions.items() if u == user]

    def of_vhost(self, vhost: str) -> list[Permission]:
        return [p for (_, v), p in self.permissions.items() if v == vhost]

    def topics_of(self, user: str | None = None, vhost: str | None = None) -> list[TopicPermission]:
        return [t for (u, v), per in self.topics.items() for t in per.values()
                if (user is None or u == user) and (vhost is None or v == vhost)]
