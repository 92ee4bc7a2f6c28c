"""Checks on field tables and strings before pamqp decodes them.

Theory of operation
-------------------
pamqp decodes a field table recursively (``field_table`` → ``embedded_value``
→ ``field_table``) and takes string lengths on trust: a long string whose
length runs past the end of its table or frame comes back silently
truncated, and a table nested a thousand deep overflows Python's stack
(``RecursionError``), which surfaced as 541 INTERNAL_ERROR with a
3,000-line traceback per 14 KB frame. ``check_table`` walks the wire form
once, iteratively (an explicit stack, no recursion), before pamqp sees it:

* every length (tables, arrays, long strings, byte arrays, keys) must end
  inside the enclosing table or array, and the outermost inside the data;
* nesting (tables and arrays together) is at most ``MAX_DEPTH``;
* a value type pamqp does not know is refused here too.

Failures raise ``ValueError``, which the callers already map to 501
FRAME_ERROR "cannot decode ..." for methods (``codec.decode_method``) and to
a malformed-properties error for content headers (``fastpath``).

Where we differ from RabbitMQ 3.10 (checked against it with raw frames):
RabbitMQ accepts any nesting a frame can hold (a 128 KB queue.declare with
18,000 nested tables gets declare-ok), because Erlang recursion is cheap.
Python's is not, and more than the decoder walks tables recursively (pamqp's
encoder, argument equivalence checks, the store's records, JSON for the
management API), so Leveret stops at ``MAX_DEPTH``, far beyond what clients
use (``x-death`` is three levels deep). For a long string running past its
table inside an otherwise well-framed method RabbitMQ 3.10 crashes the
connection without a close method (the socket just closes), and for one in
a content header it answers 541 INTERNAL_ERROR; Leveret answers 501
FRAME_ERROR "cannot decode", as RabbitMQ does when a method's own fields run
past the frame. Content properties stay the publisher's bytes (STYLE.md §3),
so a malformed header table is found only when something decodes it.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import decode

# Tables and arrays nested deeper than this are refused (see above for why it is not unlimited).
MAX_DEPTH = 100

_u32 = struct.Struct(">I")

# Value types of fixed size (RabbitMQ's errata types, as pamqp decodes them), by tag byte.
_FIXED = {ord(tag): size for tag, size in (
    ("t", 1), ("b", 1), ("B", 1), ("s", 2), ("u", 2), ("I", 4), ("i", 4), ("l", 8), ("L", 8),
    ("f", 4), ("d", 8), ("D", 5), ("T", 8), ("V", 0), ("\x00", 0))}
_LONG_STRINGS = frozenset((ord("S"), ord("x")))  # longstr, byte array: u32 length + bytes
_TABLE, _ARRAY = ord("F"), ord("A")


def _sized_end(data: bytes, pos: int, limit: int, what: str) -> int:
    """End offset of the u32-length-prefixed value at ``pos``; it must end by ``limit``."""
    if pos + 4 > limit:
        raise ValueError(f"{what} length runs past the end of its container")
    end = pos + 4 + _u32.unpack_from(data, pos)[0]
    if end > limit:
        raise ValueError(f"{what} length runs past the end of its container")
    return end


def check_long_string(data: bytes, pos: int = 0) -> int:
    """Offset after the long string at ``data[pos]``; ValueError if it runs past the data."""
    return _sized_end(data, pos, len(data), "long string")


def check_short_string(data: bytes, pos: int = 0) -> int:
    """Offset after the short string at ``data[pos]``; ValueError if it runs past the data."""
    if pos >= len(data) or pos + 1 + data[pos] > len(data):
        raise ValueError("short string runs past the end of the data")
    return pos + 1 + data[pos]


def check_table(data: bytes, pos: int = 0, max_depth: int = MAX_DEPTH) -> int:
    """Offset after the field table at ``data[pos]``; ValueError if it is malformed or too deep."""
    end = _sized_end(data, pos, len(data), "field table")
    pos += 4
    # (end offset, holds key/value pairs) for each open table or array, innermost last.
    stack: list[tuple[int, bool]] = [(end, True)]
    while stack:
        end, keyed = stack[-1]
        if pos == end:
            stack.pop()
            continue
        if keyed:
            pos += 1 + data[pos]  # the key, a short string
            if pos >= end:
                raise ValueError("field table key or value runs past the end of its table")
        tag = data[pos]
        pos += 1
        size = _FIXED.get(tag)
        if size is not None:
            pos += size
        elif tag in _LONG_STRINGS:
            pos = _sized_end(data, pos, end, "long string")
        elif tag == _TABLE or tag == _ARRAY:
            if len(stack) >= max_depth:
                raise ValueError(f"field tables nested deeper than {max_depth}")
            stack.append((_sized_end(data, pos, end, "field table"), tag == _TABLE))
            pos += 4
            continue
        else:
            raise ValueError(f"unknown field type {bytes([tag])!r}")
        if pos > end:
            raise ValueError("field value runs past the end of its table")
    return pos


def _check(data: bytes, data_type: str) -> None:
    if data_type == "table":
        check_table(data)
    elif data_type == "longstr":
        check_long_string(data)
    elif data_type == "shortstr":
        check_short_string(data)


def unmarshal_method(method: Any, data: bytes) -> None:
    """pamqp's ``Frame.unmarshal``, with every string and table checked before it is decoded."""
    bit_offset, in_bits = 0, False
    for argument in method.__slots__:
        data_type = method.amqp_type(argument)
        if in_bits and (data_type != "bit" or bit_offset == 8):
            data = data[1:]
            bit_offset, in_bits = 0, False
        if data_type == "bit":
            _, value = decode.bit(data, bit_offset)
            bit_offset += 1
            in_bits = True
        else:
            _check(data, data_type)
            consumed, value = decode.by_type(data, data_type)
            data = data[consumed:]
        setattr(method, argument, value)


def unmarshal_properties(props: Any, flags: int, data: bytes) -> None:
    """pamqp's ``Basic.Properties.unmarshal``, with strings and the headers table checked first."""
    for name in props.__slots__:
        if flags & props.flags[name]:
            data_type = getattr(props.__class__, "_" + name)
            _check(data, data_type)
            consumed, value = decode.by_type(data, data_type)
            setattr(props, name, value)
            data = data[consumed:]
