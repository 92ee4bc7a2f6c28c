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
import struct
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
MAX_DELAY = (1 << 63) - 1


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
    """The message's delay in ms; 0 or less means none (see the module docstring); at most
    ``MAX_DELAY`` (what a released message's ``x-delay``, a signed 64-bit integer, holds)."""
    return min(_delay_of(headers), MAX_DELAY)


def _delay_of(headers: dict[str, Any] | None) -> int:
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


# -- x-delay from the publisher's bytes -------------------------------------------------
# Every publish to a delayed exchange needs its delay: decoding the whole property list with
# pamqp for it cost more than the rest of the publish, so the headers table is walked on the
# raw bytes (docs/STYLE.md: keep properties as the publisher's bytes, decode lazily).

_FLAG_CONTENT_TYPE, _FLAG_CONTENT_ENCODING, _FLAG_HEADERS = 0x8000, 0x4000, 0x2000
_U32, _I64 = struct.Struct(">I"), struct.Struct(">q")
_KEY = b"\x07" + DELAY_HEADER.encode()
# Field-table value type -> its fixed size (pamqp's decoder's types; ``_LONG``: a u32 length).
_LONG = -1
_SIZES = {ord("t"): 1, ord("b"): 1, ord("B"): 1, ord("s"): 2, ord("u"): 2, ord("I"): 4,
          ord("i"): 4, ord("l"): 8, ord("L"): 8, ord("f"): 4, ord("d"): 8, ord("D"): 5,
          ord("T"): 8, ord("V"): 0, ord("S"): _LONG, ord("A"): _LONG, ord("F"): _LONG,
          ord("x"): _LONG}
_INTS = {ord("b"): struct.Struct(">b"), ord("B"): struct.Struct(">B"),
         ord("s"): struct.Struct(">h"), ord("u"): struct.Struct(">H"),
         ord("I"): struct.Struct(">i"), ord("i"): struct.Struct(">I"),
         ord("l"): struct.Struct(">q"), ord("L"): struct.Struct(">q")}
_FLOATS = {ord("f"): struct.Struct(">f"), ord("d"): struct.Struct(">d")}


def raw_delay(raw: bytes) -> int | None:
    """``delay_of`` the headers in a raw property list, without decoding them: 0 when the
    list has no ``x-delay``; None when the walk cannot tell (then decode and ``delay_of``)."""
    # (``find``, not ``in``: ``bytes in bytes`` first tries the operand as an integer, and
    # formats and drops a TypeError doing so)
    if len(raw) < 2 or not (raw[0] << 8) & _FLAG_HEADERS or raw.find(_KEY) < 0:
        return 0
    found = _find(raw)
    if found is None:
        return None
    if not found:
        return 0
    _, kind_at, size = found
    return _value(raw[kind_at], raw, kind_at + 1, size)


def find_delay(raw: bytes) -> tuple[int, bytes | None] | None:
    """(``raw_delay``, ``raw_released`` of it when positive), walking the list once; None
    when the walk cannot tell."""
    found = _find(raw) if len(raw) >= 2 and raw.find(_KEY) >= 0 else ()
    if found is None:
        return None
    if not found:
        return 0, None
    delay = _value(raw[found[1]], raw, found[1] + 1, found[2])
    if delay is None:
        return None
    return delay, _released(raw, found, delay) if delay > 0 else None


def raw_released(raw: bytes, delay: int) -> bytes | None:
    """The raw property list with ``x-delay`` replaced by ``-delay`` (a signed 64-bit
    integer), other bytes untouched; None when the walk cannot tell (then re-encode)."""
    found = _find(raw) if raw.find(_KEY) >= 0 else None
    if not found:
        return None
    return _released(raw, found, delay)


def _released(raw: bytes, found: tuple[int, int, int], delay: int) -> bytes:
    table_at, kind_at, size = found
    grown = 9 - (1 + size)
    table_len = _u32(raw, table_at) + grown
    return b"".join((raw[:table_at], _U32.pack(table_len), raw[table_at + 4:kind_at], b"l",
                     _I64.pack(-delay), raw[kind_at + 1 + size:]))


def _find(raw: bytes) -> tuple[int, int, int] | tuple[()] | None:
    """(offset of the headers table's length, of x-delay's type byte, its value's size);
    () when there is none; None when the property list is not one this walk reads."""
    # Byte by byte and ``startswith``, no ``struct`` call or slice: this runs on every
    # publish to a delayed exchange.
    try:
        flags = (raw[0] << 8) | raw[1]
        if flags & 1 or not flags & _FLAG_HEADERS:
            return None if flags & 1 else ()
        pos = 2
        if flags & _FLAG_CONTENT_TYPE:
            pos += 1 + raw[pos]
        if flags & _FLAG_CONTENT_ENCODING:
            pos += 1 + raw[pos]
        table_at = pos
        end = pos + 4 + _u32(raw, pos)
        pos += 4
        while pos < end:
            key_end = pos + 1 + raw[pos]
            found = raw.startswith(_KEY, pos)  # its length byte too: the whole key
            size = _SIZES.get(raw[key_end])
            if size is None:
                return None
            if size == _LONG:
                size = 4 + _u32(raw, key_end + 1)
            if found:
                return table_at, key_end, size
            pos = key_end + 1 + size
        return ()
    except (IndexError, struct.error):
        return None


def _u32(raw: bytes, pos: int) -> int:
    """The big-endian unsigned 32-bit integer at ``pos`` (IndexError past the end)."""
    return (raw[pos] << 24) | (raw[pos + 1] << 16) | (raw[pos + 2] << 8) | raw[pos + 3]


def _value(kind: int, raw: bytes, pos: int, size: int) -> int | None:
    ints = _INTS.get(kind)
    if ints is not None:
        value: int = ints.unpack_from(raw, pos)[0]
        return value
    floats = _FLOATS.get(kind)
    if floats is not None:
        return delay_of({DELAY_HEADER: floats.unpack_from(raw, pos)[0]})
    if kind in (ord("S"), ord("x")):
        return delay_of({DELAY_HEADER: raw[pos + 4:pos + size]})
    if kind in (ord("t"), ord("V"), ord("A"), ord("F"), ord("T")):
        return 0
    return None  # decimal: decoded the slow way


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
