"""Fanout exchange: a message goes to every bound destination, key and headers ignored.

The destination list is a tuple rebuilt only when bindings change, so routing
returns it as is. Several bindings to one queue (different keys or arguments)
still deliver one copy.
"""

from __future__ import annotations

from typing import Any

from .binding import BindingSet, BindingSetOwner, DestinationCounts


class FanoutMatcher(BindingSetOwner):
    """The bindings of one fanout exchange."""

    __slots__ = ("_dests", "_set")

    def __init__(self) -> None:
        self._set = BindingSet()
        self._dests = DestinationCounts()

    def bind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.add(dest, routing_key, arguments) is None:
            return False
        self._dests.add(dest)
        return True

    def unbind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.remove(dest, routing_key, arguments) is None:
            return False
        self._dests.discard(dest)
        return True

    def remove_destination(self, dest: object) -> int:
        removed = len(self._set.remove_destination(dest))
        if removed:
            self._dests.discard(dest, removed)
        return removed

    def route(self, routing_key: str, headers: dict[str, Any] | None) -> tuple[object, ...]:
        return self._dests.snapshot

    @staticmethod
    def validate_binding(routing_key: str, arguments: dict[str, Any]) -> None:
        """Fanout bindings take any key and arguments."""
