"""The exchange record: its declared properties plus the matcher holding its bindings.

An ``Exchange`` is plain data; what an exchange *does* with a message is its
type's matcher (one module per type) and, across exchange-to-exchange
bindings and alternate exchanges, ``router.py``. Unknown types are the
caller's to refuse (503 ``unknown exchange type 'x'``) by checking
:data:`EXCHANGE_TYPES` first; constructing one anyway is a programming error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .binding import Matcher, Routable
from .delayed import DELAYED_TYPE, routing_type
from .direct import DirectMatcher
from .fanout import FanoutMatcher
from .headers import HeadersMatcher
from .topic import TopicMatcher

if TYPE_CHECKING:
    from leveret.model.message import Message

#: Exchange type name -> matcher class, for the built-in types.
EXCHANGE_TYPES: dict[str, type] = {
    "direct": DirectMatcher,
    "fanout": FanoutMatcher,
    "topic": TopicMatcher,
    "headers": HeadersMatcher,
    # The message-deduplication plugin's type routes as fanout; the window is the broker's
    # (broker/dedupe.py), since it is kept in the store with the enqueue.
    "x-message-deduplication": FanoutMatcher,
}
#: The types that route by themselves (what ``x-delayed-type`` may name).
ROUTING_TYPES = frozenset(EXCHANGE_TYPES)
# The plugin's delayed type routes with its ``x-delayed-type``'s matcher (``delayed.py``).
EXCHANGE_TYPES[DELAYED_TYPE] = DirectMatcher


class Schedule(Protocol):
    """What the exchange record shows of a delayed exchange's schedule."""

    @property
    def count(self) -> int:
        """Messages scheduled (``messages_delayed``)."""

    def take_dead_letter(self, message: Message) -> bool:
        """Schedule a message dead-lettered to this exchange if it carries a positive
        ``x-delay`` (true), as the plugin delays whatever its exchange routes."""


class Exchange(Routable):
    """A declared exchange. Compared by identity: a destination in other exchanges' bindings."""

    __slots__ = (
        "arguments",
        "auto_delete",
        "dedupe",
        "delayed",
        "durable",
        "internal",
        "matcher",
        "name",
        "policy_alternate_exchange",
        "type",
        "vhost",
    )

    def __init__(
        self,
        name: str,
        type: str,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: dict[str, Any] | None = None,
        *,
        vhost: str = "/",
    ) -> None:
        matcher_class = EXCHANGE_TYPES.get(type)
        if type == DELAYED_TYPE:
            matcher_class = EXCHANGE_TYPES[routing_type(type, arguments or {})]
        if matcher_class is None:
            raise ValueError(f"unknown exchange type {type!r}")
        self.name = name
        self.type = type
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments) if arguments else {}
        self.matcher: Matcher = matcher_class()
        self.vhost = vhost
        # Set by the vhost from the exchange's policy (``queues/policy.py``), if any.
        self.policy_alternate_exchange: str | None = None
        # Its deduplication window, set by the vhost (broker/dedupe.py), if it has one.
        self.dedupe: object | None = None
        # A delayed exchange's schedule (``broker/delayed.py``), set by the broker.
        self.delayed: Schedule | None = None

    @property
    def alternate_exchange(self) -> str | None:
        """Name of the alternate exchange: the ``alternate-exchange`` argument, else the policy's.

        As RabbitMQ (docs/ae.md): when both set one, the argument wins.
        """
        value = self.arguments.get("alternate-exchange")
        if value is None:
            return self.policy_alternate_exchange
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", "replace")
        return str(value)

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} type={self.type} vhost={self.vhost!r}>"
