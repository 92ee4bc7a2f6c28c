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
# The same as C integers when compiled (exchanges/delayed.pxd): ``due_key`` runs on every
# delayed publish, and a module constant is a dict lookup where these are none.
_KEY_BITS, _KEY_MASK, _KEY_MAX_DUE = COUNTER_BITS, COUNTER_MASK, MAX_DUE_MS


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
# Compiled (exchanges/delayed.pxd), the walk reads C integers through a pointer into those
# bytes and returns C integers: no lookup, struct call, slice or tuple per field.

_FLAG_CONTENT_TYPE, _FLAG_CONTENT_ENCODING, _FLAG_HEADERS = 0x8000, 0x4000, 0x2000
_I64 = struct.Struct(">q")
_KEY = b"\x07" + DELAY_HEADER.encode()  # as the table holds it: its length byte first
# What ``_find`` says instead of a type byte's offset.
_NONE = -1  # the list has no x-delay
_UNREAD = -2  # not a list this walk reads (decode it)
# ``_size_of``: a value whose size is the u32 before it; a type pamqp does not decode.
_LONG, _BAD = -1, -2


def raw_delay(raw: bytes) -> int | None:
    """``delay_of`` the headers in a raw property list, without decoding them: 0 when the
    list has no ``x-delay``; None when the walk cannot tell (then decode and ``delay_of``)."""
    _, kind_at, size = _find(raw)
    if kind_at < 0:
        return 0 if kind_at == _NONE else None
    return _value(raw, kind_at, size)


def find_delay(raw: bytes) -> tuple[int, bytes | None] | None:
    """(``raw_delay``, ``raw_released`` of it when positive), walking the list once; None
    when the walk cannot tell."""
    table_at, kind_at, size = _find(raw)
    if kind_at < 0:
        return (0, None) if kind_at == _NONE else None
    delay = _value(raw, kind_at, size)
    if delay is None:
        return None
    return delay, _released(raw, table_at, kind_at, size, delay) if delay > 0 else None


def raw_released(raw: bytes, delay: int) -> bytes | None:
    """The raw property list with ``x-delay`` replaced by ``-delay`` (a signed 64-bit
    integer), other bytes untouched; None when the walk cannot tell (then re-encode)."""
    table_at, kind_at, size = _find(raw)
    if kind_at < 0:
        return None
    return _released(raw, table_at, kind_at, size, delay)


def _released(raw: bytes, table_at: int, kind_at: int, size: int, delay: int) -> bytes:
    grown = 9 - (1 + size)
    table_len = _u32(raw, table_at) + grown
    return b"".join((raw[:table_at], table_len.to_bytes(4, "big"), raw[table_at + 4:kind_at],
                     b"l", _I64.pack(-delay), raw[kind_at + 1 + size:]))


def _find(raw: bytes) -> tuple[int, int, int]:
    """(offset of the headers table's length, of x-delay's type byte, its value's size);
    the second is ``_NONE`` when there is no x-delay, ``_UNREAD`` when the list is not one
    this walk reads. Every read is inside the list (a stored list was checked at publish;
    this does not count on it)."""
    n = len(raw)
    if n < 2:
        return 0, _NONE, 0
    p = raw
    flags = (p[0] << 8) | p[1]
    if flags & 1:
        return 0, _UNREAD, 0
    if not flags & _FLAG_HEADERS:
        return 0, _NONE, 0
    pos = 2
    if flags & _FLAG_CONTENT_TYPE:
        if pos >= n:
            return 0, _UNREAD, 0
        pos += 1 + p[pos]
    if flags & _FLAG_CONTENT_ENCODING:
        if pos >= n:
            return 0, _UNREAD, 0
        pos += 1 + p[pos]
    if pos + 4 > n:
        return 0, _UNREAD, 0
    table_at = pos
    end = pos + 4 + _u32(p, pos)
    if end > n:
        return 0, _UNREAD, 0
    pos += 4
    while pos < end:
        length = p[pos]
        key_end = pos + 1 + length
        if key_end >= end:
            return 0, _UNREAD, 0
        size = _size_of(p[key_end])
        if size == _LONG:
            if key_end + 5 > end:
                return 0, _UNREAD, 0
            size = 4 + _u32(p, key_end + 1)
        elif size == _BAD:
            return 0, _UNREAD, 0
        if key_end + 1 + size > end:
            return 0, _UNREAD, 0
        if length == 7 and p[pos:key_end] == _KEY:  # a copy only of a 7-byte name
            return table_at, key_end, size
        pos = key_end + 1 + size
    return 0, _NONE, 0


def _u32(p: bytes, pos: int) -> int:
    """The big-endian unsigned 32-bit integer at ``pos`` (the caller knows it is there)."""
    high = p[pos]  # compiled: 64-bit before the shift (a C int would turn negative)
    return (high << 24) | (p[pos + 1] << 16) | (p[pos + 2] << 8) | p[pos + 3]


def _size_of(kind: int) -> int:
    """A field-table value's size by its type byte (pamqp's decoder's types)."""
    if kind == 83 or kind == 65 or kind == 70 or kind == 120:  # S A F x
        return _LONG
    if kind == 116 or kind == 98 or kind == 66:  # t b B
        return 1
    if kind == 115 or kind == 117:  # s u
        return 2
    if kind == 73 or kind == 105 or kind == 102:  # I i f
        return 4
    if kind == 108 or kind == 76 or kind == 100 or kind == 84:  # l L d T
        return 8
    if kind == 68:  # D
        return 5
    if kind == 86:  # V
        return 0
    return _BAD


def _value(raw: bytes, at: int, size: int) -> int | None:
    """The delay the value at ``at`` (its type byte) gives; None for a decimal (decoded
    the slow way)."""
    p = raw
    kind = p[at]
    pos = at + 1
    if kind == 73 or kind == 105:  # I: signed 32; i: unsigned 32
        word = _u32(p, pos)
        return word - 0x100000000 if kind == 73 and word & 0x80000000 else word
    if kind == 108 or kind == 76:  # l L: signed 64 (pamqp reads L signed too)
        high = _u32(p, pos)
        if high & 0x80000000:
            high -= 0x100000000
        return high * 0x100000000 + _u32(p, pos + 4)
    if kind == 98:  # b
        return p[pos] - 256 if p[pos] & 0x80 else p[pos]
    if kind == 66:  # B
        return p[pos]
    if kind == 115 or kind == 117:  # s u
        word = (p[pos] << 8) | p[pos + 1]
        return word - 0x10000 if kind == 115 and word & 0x8000 else word
    if kind == 102 or kind == 100:  # f d
        return delay_of({DELAY_HEADER: struct.unpack_from(">f" if kind == 102 else ">d",
                                                          raw, pos)[0]})
    if kind == 83 or kind == 120:  # S x
        return delay_of({DELAY_HEADER: raw[pos + 4:pos + size]})
    if kind == 68:  # D
        return None
    return 0  # t V A F T


def due_key(due_ms: int, counter: int) -> int:
    """The store key of a message due at ``due_ms`` (clamped to ``MAX_DUE_MS``)."""
    if due_ms > _KEY_MAX_DUE:
        due = _KEY_MAX_DUE
    elif due_ms < 0:
        due = 0
    else:
        due = due_ms  # compiled: a C integer from here (44 bits, and 20 of counter)
    return (due << _KEY_BITS) | (counter & _KEY_MASK)


def due_of(key: int) -> int:
    """The due time (ms since the epoch) of a store key."""
    return key >> _KEY_BITS


def released_headers(headers: dict[str, Any], delay: int) -> dict[str, Any]:
    """The headers a released message carries: ``x-delay`` rewritten to ``-delay``."""
    return {**headers, DELAY_HEADER: -delay}


def _text(value: object) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None
