"""Direct exchange: a message goes to every destination bound with its exact routing key.

Routing is the hot path of most brokers' traffic, so it is one dict lookup
returning a tuple precomputed at bind time: no allocation per message. Binding
arguments are ignored for routing (as in RabbitMQ) but still tell bindings
apart: the same queue bound twice with different arguments is two bindings,
and it is routed to once.
"""

from __future__ import annotations

from typing import Any

from .binding import BindingSet, BindingSetOwner, DestinationCounts


class DirectMatcher(BindingSetOwner):
    """The bindings of one direct exchange, indexed by routing key."""

    __slots__ = ("_index", "_set")

    def __init__(self) -> None:
        self._set = BindingSet()
        self._index: dict[str, DestinationCounts] = {}

    def bind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.add(dest, routing_key, arguments) is None:
            return False
        counts = self._index.get(routing_key)
        if counts is None:
            counts = self._index[routing_key] = DestinationCounts()
        counts.add(dest)
        return True

    def unbind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.remove(dest, routing_key, arguments) is None:
            return False
        self._forget(dest, routing_key)
        return True

    def remove_destination(self, dest: object) -> int:
        removed = self._set.remove_destination(dest)
        for _, routing_key, _ in removed:
            self._forget(dest, routing_key)
        return len(removed)

    def _forget(self, dest: object, routing_key: str) -> None:
        counts = self._index[routing_key]
        counts.discard(dest)
        if not counts:
            del self._index[routing_key]

    def route(self, routing_key: str, headers: dict[str, Any] | None) -> tuple[object, ...]:
        counts = self._index.get(routing_key)
        return counts.snapshot if counts is not None else ()

    @staticmethod
    def validate_binding(routing_key: str, arguments: dict[str, Any]) -> None:
        """Direct bindings take any key and arguments."""
