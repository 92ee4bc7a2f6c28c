"""The bindings of one exchange, shared bookkeeping for every exchange type.

Each exchange type (``direct.py``, ``fanout.py``, ``topic.py``, ``headers.py``)
keeps its own routing index, built for its own hot path; what they share is the
*set* of bindings, which this module owns:

* a binding is ``(destination, routing_key, arguments)``; destinations are
  compared by identity (they are live ``Queue`` / ``Exchange`` objects), the
  routing key by value, and the arguments by :func:`args_key`;
* binding twice is idempotent and unbinding a missing binding is a no-op, as in
  RabbitMQ, so both report whether anything changed;
* a per-destination index makes ``remove_destination`` (queue or exchange
  deleted) proportional to that destination's bindings, not to the exchange's;
* bindings whose destination is a :class:`Routable` (an exchange) are counted,
  so the router can skip its exchange-to-exchange machinery for the common
  case of an exchange bound only to queues.

Destinations are keyed by ``id()``; that is safe because the set keeps a
reference to each destination it indexes, so no id can be reused while listed.
"""

from __future__ import annotations

import calendar
import datetime
from collections.abc import Hashable, Iterable, Iterator
from decimal import Decimal
from typing import Any, Protocol


class Routable:
    """Marker base for destinations that route onward (exchanges).

    It lives here, not in ``exchange.py``, so matchers can count
    exchange-to-exchange bindings without importing the exchange class.
    """

    __slots__ = ()


class Matcher(Protocol):
    """What the broker core and the router rely on; every exchange type has it."""

    def bind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool: ...
    def unbind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool: ...
    def has_binding(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool: ...
    def remove_destination(self, dest: object) -> int: ...
    def route(self, routing_key: str, headers: dict[str, Any] | None) -> Iterable[object]: ...
    def bindings(self) -> Iterator[tuple[object, str, dict[str, Any]]]: ...
    def __len__(self) -> int: ...
    def validate_binding(self, routing_key: str, arguments: dict[str, Any]) -> None: ...

    @property
    def exchange_bindings(self) -> int: ...


def args_key(value: Any) -> Hashable:
    """A hashable, type-exact key for a field value (or a whole arguments table).

    Python's ``==`` says ``1 == 1.0 == True``, but two bindings whose arguments
    differ like that are different bindings in RabbitMQ (its tables carry the
    wire type), so each value is tagged with its type before comparison.
    """
    if value is None:
        return ("V",)
    if isinstance(value, bool):
        return ("t", value)
    if isinstance(value, dict):
        return ("F", tuple(sorted((str(k), args_key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("A", tuple(args_key(v) for v in value))
    if isinstance(value, Decimal):
        return ("D", value.as_tuple())
    if isinstance(value, (bytearray, memoryview)):
        return ("x", bytes(value))
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


def timestamp_seconds(value: datetime.datetime) -> int:
    """Seconds since the epoch, as an AMQP timestamp carries it (naive = UTC)."""
    if value.tzinfo is None:
        return calendar.timegm(value.utctimetuple())
    return int(value.timestamp())


_Key = tuple[int, str, Hashable]


class BindingSet:
    """All bindings of one exchange, with idempotent add/remove and a per-destination index."""

    __slots__ = ("_bindings", "_by_dest", "exchange_bindings")

    def __init__(self) -> None:
        self._bindings: dict[_Key, tuple[object, str, dict[str, Any]]] = {}
        self._by_dest: dict[int, set[_Key]] = {}
        #: how many bindings have a :class:`Routable` destination
        self.exchange_bindings = 0

    def add(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> _Key | None:
        """Add a binding; return its key, or None if that exact binding existed."""
        key = (id(dest), routing_key, args_key(arguments))
        if key in self._bindings:
            return None
        self._bindings[key] = (dest, routing_key, dict(arguments))
        self._by_dest.setdefault(id(dest), set()).add(key)
        if isinstance(dest, Routable):
            self.exchange_bindings += 1
        return key

    def __contains__(self, binding: tuple[object, str, dict[str, Any]]) -> bool:
        dest, routing_key, arguments = binding
        return (id(dest), routing_key, args_key(arguments)) in self._bindings

    def remove(
        self, dest: object, routing_key: str, arguments: dict[str, Any]
    ) -> tuple[object, str, dict[str, Any]] | None:
        """Remove one binding; return it, or None if there was no such binding."""
        key = (id(dest), routing_key, args_key(arguments))
        return self._pop(key)

    def remove_destination(self, dest: object) -> list[tuple[object, str, dict[str, Any]]]:
        """Remove every binding to ``dest``; return the removed bindings."""
        keys = self._by_dest.get(id(dest))
        if not keys:
            return []
        removed = []
        for key in list(keys):
            binding = self._pop(key)
            if binding is not None:
                removed.append(binding)
        return removed

    def _pop(self, key: _Key) -> tuple[object, str, dict[str, Any]] | None:
        binding = self._bindings.pop(key, None)
        if binding is None:
            return None
        keys = self._by_dest[key[0]]
        keys.discard(key)
        if not keys:
            del self._by_dest[key[0]]
        if isinstance(binding[0], Routable):
            self.exchange_bindings -= 1
        return binding

    def __iter__(self) -> Iterator[tuple[object, str, dict[str, Any]]]:
        for dest, routing_key, arguments in list(self._bindings.values()):
            yield dest, routing_key, dict(arguments)

    def items(self) -> Iterable[tuple[_Key, tuple[object, str, dict[str, Any]]]]:
        """(key, binding) pairs, for matchers that rebuild an index."""
        return self._bindings.items()

    def __len__(self) -> int:
        return len(self._bindings)


class BindingSetOwner:
    """What every matcher answers from its ``BindingSet`` alone (listing and counting)."""

    _set: BindingSet

    def bindings(self) -> Iterator[tuple[object, str, dict[str, Any]]]:
        return iter(self._set)

    def has_binding(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        """Whether that exact binding exists (queue.unbind of a missing one is a no-op)."""
        return (dest, routing_key, arguments) in self._set

    def __len__(self) -> int:
        return len(self._set)

    @property
    def exchange_bindings(self) -> int:
        """Bindings whose destination is an exchange (the router's fast-path test)."""
        return self._set.exchange_bindings


class DestinationCounts:
    """Destinations with a reference count, in first-bound order.

    Several bindings can lead to the same destination (same queue, different
    arguments or keys); routing must name it once, and it must stay until the
    last of those bindings goes.
    """

    __slots__ = ("_counts", "snapshot")

    def __init__(self) -> None:
        self._counts: dict[int, list[Any]] = {}
        #: the destinations as an immutable tuple, rebuilt on change, returned by route()
        self.snapshot: tuple[object, ...] = ()

    def add(self, dest: object) -> None:
        entry = self._counts.get(id(dest))
        if entry is None:
            self._counts[id(dest)] = [dest, 1]
            self.snapshot = (*self.snapshot, dest)
        else:
            entry[1] += 1

    def discard(self, dest: object, times: int = 1) -> None:
        entry = self._counts.get(id(dest))
        if entry is None:
            return
        entry[1] -= times
        if entry[1] <= 0:
            del self._counts[id(dest)]
            self.snapshot = tuple(e[0] for e in self._counts.values())

    def __bool__(self) -> bool:
        return bool(self._counts)
