"""Delayed exchanges: which exchanges delay, by how much, and the due-time key (pure).

Two ways to ask for one, so both user bases move over unchanged:

* the rabbitmq-delayed-message-exchange plugin's type ``x-delayed-message``, routing as
  the type named by its ``x-delayed-type`` argument (the plugin's ``validate/1``: its 406
  texts; an unknown type is ``rabbit_exchange:check_type``'s 503 ``unknown exchange type``,
  the same connection error as declaring that type directly);
* LavinMQ's ``x-delayed-exchange: true`` argument on an exchange of any type.

The header ``x-delay`` (ms) is read as the plugin's ``get_delay/1`` does: AMQP integer
types as they are, strings converted, floats truncated. Leveret differs in two places,
both towards delivering what was asked for: a delay above 2^32-1 ms is delayed (the plugin
delivers it at once, its Erlang timer's limit), and a string that is not an integer is no
delay (the plugin's conversion crashes the channel). Anything else, absent, or <= 0: no
delay, routed at once.

On release the header is rewritten to minus the delay, as the plugin does: clients written
for the plugin test for the negative value, and it keeps a released message from being
delayed again by a downstream delayed exchange (LavinMQ deletes the header instead).

A scheduled message is stored under a 64-bit key that sorts by due time: the due time in
ms since the epoch in the top 44 bits (good to the year 2527), a counter in the low 20 bits
to tell apart messages due in the same millisecond. Big-endian, as the store keeps keys, so
the store's order is due order and the first entry is the next one due.
"""

from __future__ import annotations

import decimal
from typing import Any

from leveret.model.errors import (
    COMMAND_INVALID,
    PRECONDITION_FAILED,
    ChannelError,
    ConnectionError_,
)

DELAYED_TYPE = "x-delayed-message"
TYPE_ARGUMENT = "x-delayed-type"
FLAG_ARGUMENT = "x-delayed-exchange"  # LavinMQ's
DELAY_HEADER = "x-delay"

# Key layout (see the module docstring).
COUNTER_BITS = 20
COUNTER_MASK = (1 << COUNTER_BITS) - 1
MAX_DUE_MS = (1 << (64 - COUNTER_BITS)) - 1


def validate(type_: str, arguments: dict[str, Any], routing_types: set[str] | frozenset[str]
             ) -> None:
    """Refuse a delayed exchange declaration as the plugin does (``validate/1``)."""
    if type_ != DELAYED_TYPE:
        return
    routing = _text(arguments.get(TYPE_ARGUMENT))
    if routing == DELAYED_TYPE:
        raise ChannelError(PRECONDITION_FAILED,
                           "Invalid argument, 'x-delayed-message' can't be used for "
                           "'x-delayed-type'", (40, 10))
    if routing is None:
        raise ChannelError(PRECONDITION_FAILED,
                           "Invalid argument, 'x-delayed-type' must be an existing exchange type",
                           (40, 10))
    if routing not in routing_types:
        raise ConnectionError_(COMMAND_INVALID, f"unknown exchange type '{routing}'", (40, 10))


def routing_type(type_: str, arguments: dict[str, Any]) -> str:
    """The type whose matcher routes for an exchange of ``type_`` (after ``validate``)."""
    if type_ == DELAYED_TYPE:
        routing = _text(arguments.get(TYPE_ARGUMENT))
        assert routing is not None, "validate() first"
        return routing
    return type_


def is_delayed(type_: str, arguments: dict[str, Any]) -> bool:
    """Does an exchange of this type and arguments delay messages with ``x-delay``?"""
    return type_ == DELAYED_TYPE or arguments.get(FLAG_ARGUMENT) is True


def delay_of(headers: dict[str, Any] | None) -> int:
    """The message's delay in ms; 0 or less means none (see the module docstring)."""
    if not headers:
        return 0
    value = headers.get(DELAY_HEADER)
    if isinstance(value, bool):  # AMQP's boolean is not an integer type
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, (float, decimal.Decimal)):
        try:
            return int(value)  # truncates, as Erlang's trunc/1
        except (OverflowError, ValueError):  # inf, nan
            return 0
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return 0
    return 0


def due_key(due_ms: int, counter: int) -> int:
    """The store key of a message due at ``due_ms`` (clamped to ``MAX_DUE_MS``)."""
    return (min(max(due_ms, 0), MAX_DUE_MS) << COUNTER_BITS) | (counter & COUNTER_MASK)


def due_of(key: int) -> int:
    """The due time (ms since the epoch) of a store key."""
    return key >> COUNTER_BITS


def released_headers(headers: dict[str, Any], delay: int) -> dict[str, Any]:
    """The headers a released message carries: ``x-delay`` rewritten to ``-delay``."""
    return {**headers, DELAY_HEADER: -delay}


def _text(value: object) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None
