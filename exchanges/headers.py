"""Headers exchange: bindings match on the message's header table, not its routing key.

Semantics (RabbitMQ's ``rabbit_exchange_type_headers.erl``)
-----------------------------------------------------------
* ``x-match`` is ``all`` (the default when absent), ``any``, ``all-with-x`` or
  ``any-with-x``. ``x-match`` itself is never matched against the headers;
  with ``all``/``any`` neither is any other binding argument starting with
  ``x-``, the ``-with-x`` modes match them like ordinary arguments.
* ``all``: every remaining binding argument must be present in the headers
  with an equal value. With no remaining arguments it matches every message.
* ``any``: at least one must be. With no remaining arguments it matches none.
* A binding argument whose value is void (``None``) matches on presence alone.
* Values are compared as RabbitMQ compares the decoded terms (Erlang ``==``).
  A top-level value has lost its wire type: integers of any width and floats
  by numeric value (``I`` 1 matches ``l`` 1 and ``d`` 1.0), timestamps as their
  integer seconds, ``str``, ``bytes`` and byte arrays by their bytes, booleans
  only with booleans, decimals by (scale, unscaled value) so ``1.0`` and
  ``1.00`` differ. An array is a list of ``{Type, Value}`` and a table a list
  of ``{Key, Type, Value}`` in wire order, so inside them the wire type counts
  too (``[I 1]`` does not match ``[l 1]``, nor ``f`` 1.5 ``d`` 1.5, nor a string
  a byte array) and so does the order of a nested table's keys. The wire
  types are the ones ``model/field_table`` keeps; an integer that never had
  one (JSON from the HTTP API) is a long, as RabbitMQ reads JSON.
* An invalid ``x-match`` is refused at bind time by :meth:`validate_binding`
  with RabbitMQ's text; a binding that bypassed validation (e.g. restored
  from an old definitions file) matches as ``all``, as RabbitMQ does.

Routing evaluates every binding (there is no index a header table can be
looked up in), so a binding is compiled at bind time into its mode and the
list of (name, value) pairs to test, and each message's header table is
normalised once per route, so a binding costs a few dict lookups.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable
from decimal import Decimal
from typing import Any

from ..model.erlang_terms import field_term, field_type, pretty, write
from ..model.errors import PRECONDITION_FAILED, ChannelError
from .binding import BindingSet, BindingSetOwner, timestamp_seconds

X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")

#: marker for "present with any value" (a void binding argument)
_PRESENT: Any = object()
#: marker for a header the message does not carry
_ABSENT: Any = object()

def match_value(value: Any) -> Hashable:
    """The form a top-level field value is compared in (see the module docstring)."""
    kind = type(value)  # exact-type fast path for the usual header values
    if kind is str:
        return ("bin", value.encode("utf-8"))
    if kind is int or kind is float:
        return ("num", value)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if isinstance(value, str):
        return ("bin", value.encode("utf-8"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bin", bytes(value))
    if isinstance(value, datetime.datetime):
        return ("num", timestamp_seconds(value))
    if isinstance(value, Decimal):
        return ("dec", _decimal_key(value))
    if value is None:
        return ("void",)
    if isinstance(value, (list, tuple, dict)):
        return ("typed", _typed(value))
    return ("other", repr(value))


def _typed(value: Any) -> Hashable:
    """A value inside an array or table, or one of those: its wire type counts."""
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_typed(v) for v in value))
    if isinstance(value, dict):  # wire order: RabbitMQ does not sort nested tables
        return ("table", tuple((str(k), _typed(v)) for k, v in value.items()))
    if isinstance(value, Decimal):
        return ("decimal", _decimal_key(value))
    kind = field_type(value)
    if kind == "float":
        return (kind, field_term(value))  # the 32-bit value as a double
    if value is None:
        return (kind,)
    found = match_value(value)
    return (kind, found[1] if isinstance(found, tuple) else found)


def _decimal_key(value: Decimal) -> Hashable:
    if not value.is_finite():
        return str(value)
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    return (-int(exponent), unscaled)


class _Compiled:
    """One binding, ready to test: its mode and the arguments that take part."""

    __slots__ = ("any", "dest", "tests")

    def __init__(self, dest: object, arguments: dict[str, Any]) -> None:
        mode = arguments.get("x-match", "all")
        if isinstance(mode, bytes):
            mode = mode.decode("utf-8", "replace")
        if mode not in X_MATCH_MODES:
            mode = "all"
        with_x = mode.endswith("-with-x")
        self.dest = dest
        self.any = mode.startswith("any")
        self.tests: tuple[tuple[str, Any], ...] = tuple(
            (name, _PRESENT if value is None else match_value(value))
            for name, value in sorted(arguments.items())
            if name != "x-match" and (with_x or not name.startswith("x-"))
        )

    def matches(self, table: dict[str, Any]) -> bool:
        """``table`` maps header names to their :func:`match_value`."""
        if self.any:
            for name, wanted in self.tests:
                got = table.get(name, _ABSENT)
                if got is not _ABSENT and (wanted is _PRESENT or got == wanted):
                    return True
            return False
        for name, wanted in self.tests:
            got = table.get(name, _ABSENT)
            if got is _ABSENT or (wanted is not _PRESENT and got != wanted):
                return False
        return True


class HeadersMatcher(BindingSetOwner):
    """The bindings of one headers exchange."""

    __slots__ = ("_compiled", "_set")

    def __init__(self) -> None:
        self._set = BindingSet()
        self._compiled: dict[Hashable, _Compiled] = {}

    def bind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        key = self._set.add(dest, routing_key, arguments)
        if key is None:
            return False
        self._compiled[key] = _Compiled(dest, arguments)
        return True

    def unbind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.remove(dest, routing_key, arguments) is None:
            return False
        self._rebuild()
        return True

    def remove_destination(self, dest: object) -> int:
        removed = len(self._set.remove_destination(dest))
        if removed:
            self._rebuild()
        return removed

    def _rebuild(self) -> None:
        # Keeps bind order; unbinding is rare next to routing, so O(bindings) is fine.
        self._compiled = {key: self._compiled[key] for key, _ in self._set.items()}

    def route(self, routing_key: str, headers: dict[str, Any] | None) -> list[object]:
        if not self._compiled:
            return []
        # Normalise the message's headers once, not once per binding.
        table = {name: match_value(value) for name, value in headers.items()} if headers else {}
        found: dict[int, object] = {}
        for binding in self._compiled.values():
            dest = binding.dest
            if id(dest) not in found and binding.matches(table):
                found[id(dest)] = dest
        return list(found.values())

    @staticmethod
    def validate_binding(routing_key: str, arguments: dict[str, Any]) -> None:
        """Refuse a bad ``x-match`` with RabbitMQ's text (406 PRECONDITION_FAILED)."""
        if "x-match" not in arguments:
            return
        mode = arguments["x-match"]
        if isinstance(mode, (str, bytes)):
            text = mode if isinstance(mode, str) else mode.decode("utf-8", "replace")
            if text in X_MATCH_MODES:
                return
            raise ChannelError(
                PRECONDITION_FAILED,
                f"Invalid x-match field value {write(field_term(mode))}; "
                "expected all, any, all-with-x, or any-with-x",
            )
        # RabbitMQ's io_lib ~p, from the column where the value starts.
        prefix = f"Invalid x-match field type {field_type(mode)} (value "
        raise ChannelError(
            PRECONDITION_FAILED,
            f"{prefix}{pretty(field_term(mode), len(prefix))}); expected longstr",
        )
