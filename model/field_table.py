"""AMQP field tables that keep their wire types, end to end.

A field table is a map of names to typed values; the same number can travel as
a byte (``b``), a short (``s``), a signed int (``I``), a long (``l``) and more.
pamqp decodes every integer to a plain ``int`` and re-encodes it in the
smallest type that holds it, so a header a Java publisher sent as ``I`` would
reach a consumer as ``b`` after dead-lettering, and RabbitMQ's error texts,
which name the wire type ("invalid type 'signedint' ..."), could not be
reproduced. Here:

* decoding yields ``int``/``float`` subclasses that remember their type code
  (:class:`Byte`, :class:`SignedInt`, :class:`Long`, :class:`Float`, ...): they
  compare, hash and compute like plain numbers, so code that reads values is
  unchanged, and re-encoding a decoded table reproduces its bytes exactly
  (key order included; pamqp sorts keys);
* values the broker adds say their type explicitly (``x-death``'s ``count`` is
  a :class:`Long`, as RabbitMQ writes it); a plain ``int`` is encoded in the
  smallest type, as pamqp does;
* nesting is bounded (:data:`MAX_DEPTH`), so a hostile 1,000-deep table is a
  clean ``ValueError`` (the caller's 501), never a ``RecursionError``; every
  length must end inside its container (pamqp silently truncates a long string
  that runs past its frame).

:func:`unmarshal_method` and :func:`unmarshal_properties` are pamqp's own
decode loops with the method's and properties' string fields checked the same
way before pamqp reads them. Where RabbitMQ 3.10 differs (checked with raw
frames): for a long string running past its table it drops the socket without
a close method (a content header: 541); Leveret answers 501 FRAME_ERROR
"cannot decode", as RabbitMQ does when a method's own fields run past the frame.

:func:`install` makes pamqp use these functions for every ``table`` field
(method arguments, ``client_properties``, message ``headers``), so the one
pamqp-based codec keeps doing all method and property work. Strings stay as
pamqp gives them: ``str`` when the bytes are UTF-8, else ``bytes``; both
re-encode to the same ``S`` bytes.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

# Tables and arrays nested deeper than this are refused. RabbitMQ 3.10 accepts any depth a
# frame can hold (18,000 levels got declare-ok); Python recursion is not that cheap, and
# more than the decoder walks tables (the encoder, equivalence checks, the store, JSON for
# the HTTP API), so Leveret stops here, far beyond what clients send (x-death is 3 deep).
MAX_DEPTH = 100


class TypedInt(int):
    """An integer that remembers the field-table type code it arrived as."""

    __slots__ = ()
    code: ClassVar[bytes] = b"l"
    name: ClassVar[str] = "long"
    fmt: ClassVar[str] = ">q"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"

    # Printed (error texts, logs, ctl output) as the plain number it is.
    __str__ = int.__repr__


class Byte(TypedInt):
    __slots__ = ()
    code, name, fmt = b"b", "byte", ">b"


class UnsignedByte(TypedInt):
    __slots__ = ()
    code, name, fmt = b"B", "unsignedbyte", ">B"


class Short(TypedInt):
    __slots__ = ()
    code, name, fmt = b"s", "short", ">h"


class UnsignedShort(TypedInt):
    __slots__ = ()
    code, name, fmt = b"u", "unsignedshort", ">H"


class SignedInt(TypedInt):
    __slots__ = ()
    code, name, fmt = b"I", "signedint", ">i"


class UnsignedInt(TypedInt):
    __slots__ = ()
    code, name, fmt = b"i", "unsignedint", ">I"


class Long(TypedInt):
    __slots__ = ()
    code, name, fmt = b"l", "long", ">q"


class UnsignedLong(TypedInt):
    """``L``: not in RabbitMQ's errata table, but sent by some clients (pamqp reads it signed)."""

    __slots__ = ()
    code, name, fmt = b"L", "long", ">q"


class Float(float):
    """A 32-bit ``f`` float (a plain ``float`` is a 64-bit ``d`` double)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Float({float(self)!r})"

    __str__ = float.__repr__


class Timestamp(int):
    """A ``T`` timestamp too large for ``datetime``: kept as its raw seconds."""

    __slots__ = ()


_INTS: dict[bytes, type[TypedInt]] = {
    cls.code: cls for cls in (Byte, UnsignedByte, Short, UnsignedShort, SignedInt,
                              UnsignedInt, Long, UnsignedLong)
}
_STRUCTS = {code: struct.Struct(cls.fmt) for code, cls in _INTS.items()}
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_DECIMAL = struct.Struct(">Bi")


def type_name(value: object) -> str:
    """RabbitMQ's name for a value's field-table type, as its error texts print it."""
    if isinstance(value, TypedInt):
        return value.name
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        # A plain int (not decoded from the wire) goes out in the smallest type.
        return _smallest_int(value).name
    if isinstance(value, Float):
        return "float"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bytearray):
        return "binary"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, (datetime.datetime, Timestamp)):
        return "timestamp"
    if value is None:
        return "void"
    return type(value).__name__


# -- decoding ---------------------------------------------------------------------


def _container(data: bytes | memoryview, depth: int, what: str) -> tuple[memoryview, int]:
    """A table's or array's bytes and where it ends: its length must fit, its depth too."""
    if depth >= MAX_DEPTH:  # the outermost table is level 1
        raise ValueError(f"{what} nested deeper than {MAX_DEPTH} levels")
    view = memoryview(data)
    if len(view) < 4:
        raise ValueError(f"{what} length is truncated")
    (length,) = _U32.unpack_from(view, 0)
    end: int = 4 + length
    if end > len(view):
        raise ValueError(f"{what} length exceeds available data")
    return view, end


def decode_table(data: bytes | memoryview, depth: int = 0) -> tuple[int, dict[str, Any]]:
    """``(bytes consumed, table)`` from a 4-byte length and the table's entries."""
    view, end = _container(data, depth, "field table")
    table: dict[str, Any] = {}
    pos = 4
    while pos < end:
        key_len = view[pos]
        pos += 1
        if pos + key_len > end:
            raise ValueError("field table key length exceeds data")
        try:
            key = bytes(view[pos:pos + key_len]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"field table key is not UTF-8: {exc}") from exc
        pos += key_len
        pos, table[key] = _decode_value(view, pos, end, depth)
    return end, table


def decode_array(data: bytes | memoryview, depth: int = 0) -> tuple[int, list[Any]]:
    view, end = _container(data, depth, "field array")
    items: list[Any] = []
    pos = 4
    while pos < end:
        pos, value = _decode_value(view, pos, end, depth)
        items.append(value)
    return end, items


def _decode_value(view: memoryview, pos: int, end: int, depth: int) -> tuple[int, Any]:
    if pos >= end:
        raise ValueError("field value type is missing")
    code = bytes(view[pos:pos + 1])
    pos += 1
    try:
        if code in _STRUCTS:
            size = _STRUCTS[code].size
            _need(pos + size, end)
            return pos + size, _INTS[code](_STRUCTS[code].unpack_from(view, pos)[0])
        if code == b"S" or code == b"x":
            _need(pos + 4, end)
            (length,) = _U32.unpack_from(view, pos)
            stop = pos + 4 + length
            _need(stop, end)
            raw = bytes(view[pos + 4:stop])
            if code == b"x":
                return stop, bytearray(raw)
            try:
                return stop, raw.decode("utf-8")
            except UnicodeDecodeError:
                return stop, raw
        if code == b"t":
            _need(pos + 1, end)
            return pos + 1, bool(view[pos])
        if code == b"F":
            used, table = decode_table(view[pos:end], depth + 1)
            return pos + used, table
        if code == b"A":
            used, items = decode_array(view[pos:end], depth + 1)
            return pos + used, items
        if code == b"d":
            _need(pos + 8, end)
            return pos + 8, _F64.unpack_from(view, pos)[0]
        if code == b"f":
            _need(pos + 4, end)
            return pos + 4, Float(_F32.unpack_from(view, pos)[0])
        if code == b"T":
            _need(pos + 8, end)
            (seconds,) = _U64.unpack_from(view, pos)
            try:
                return pos + 8, datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
            except (OverflowError, OSError, ValueError):
                return pos + 8, Timestamp(seconds)
        if code == b"D":
            _need(pos + 5, end)
            scale, mantissa = _DECIMAL.unpack_from(view, pos)
            return pos + 5, decimal.Decimal(mantissa).scaleb(-scale)
        if code == b"V":
            return pos, None
    except struct.error as exc:
        raise ValueError(f"cannot decode field value of type {code!r}: {exc}") from exc
    raise ValueError(f"unknown field value type {code!r}")


def _need(stop: int, end: int) -> None:
    if stop > end:
        raise ValueError("field value runs past the end of its table")


# -- encoding ---------------------------------------------------------------------


def encode_table(table: Mapping[str, Any] | None, depth: int = 0) -> bytes:
    """A field table's bytes (length included), entries in the mapping's order."""
    if not table:
        return b"\x00\x00\x00\x00"
    if not isinstance(table, Mapping):
        raise TypeError(f"dict required, received {type(table)}")
    if depth > MAX_DEPTH:
        raise ValueError(f"field table nested deeper than {MAX_DEPTH} levels")
    parts: list[bytes] = []
    for key, value in table.items():
        raw_key = key.encode("utf-8")
        if len(raw_key) > 255:
            raise TypeError(f"field table key longer than 255 bytes: {key[:40]!r}...")
        parts.append(_U8.pack(len(raw_key)) + raw_key)
        parts.append(encode_value(value, depth))
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


def encode_array(items: list[Any], depth: int = 0) -> bytes:
    if depth > MAX_DEPTH:
        raise ValueError(f"field array nested deeper than {MAX_DEPTH} levels")
    body = b"".join(encode_value(item, depth) for item in items)
    return _U32.pack(len(body)) + body


def encode_value(value: Any, depth: int = 0) -> bytes:
    """One typed field value: its type code, then its bytes."""
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, TypedInt):
        return value.code + _STRUCTS[value.code].pack(value)
    if isinstance(value, Timestamp):
        return b"T" + _U64.pack(value)
    if isinstance(value, int):
        cls = _smallest_int(value)
        return cls.code + _STRUCTS[cls.code].pack(value)
    if isinstance(value, Float):
        return b"f" + _F32.pack(value)
    if isinstance(value, float):
        return b"d" + _F64.pack(value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return b"S" + _U32.pack(len(raw)) + raw
    if isinstance(value, bytes):
        return b"S" + _U32.pack(len(value)) + value
    if isinstance(value, bytearray):
        return b"x" + _U32.pack(len(value)) + bytes(value)
    if isinstance(value, Mapping):
        return b"F" + encode_table(value, depth + 1)
    if isinstance(value, (list, tuple)):
        return b"A" + encode_array(list(value), depth + 1)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return b"T" + _U64.pack(int(value.timestamp()))
    if isinstance(value, decimal.Decimal):
        return b"D" + _encode_decimal(value)
    if value is None:
        return b"V"
    raise TypeError(f"cannot encode {type(value).__name__} in a field table: {value!r}")


def _smallest_int(value: int) -> type[TypedInt]:
    """pamqp's choice for a plain int: the smallest signed type (then unsigned) that holds it."""
    if -(2**7) <= value < 2**7:
        return Byte
    if -(2**15) <= value < 2**15:
        return Short
    if 0 <= value < 2**16:
        return UnsignedShort
    if -(2**31) <= value < 2**31:
        return SignedInt
    if 0 <= value < 2**32:
        return UnsignedInt
    if -(2**63) <= value < 2**63:
        return Long
    raise TypeError(f"integer out of range for a field table: {value}")


def _encode_decimal(value: decimal.Decimal) -> bytes:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise TypeError(f"cannot encode {value} as a decimal")
    scale = max(0, -exponent)
    mantissa = int(value.scaleb(scale))
    if scale > 255 or not -(2**31) <= mantissa < 2**31:
        raise TypeError(f"decimal out of range for a field table: {value}")
    return _DECIMAL.pack(scale, mantissa)


# -- pamqp --------------------------------------------------------------------------


def _decode_for_pamqp(value: bytes) -> tuple[int, dict[str, Any]]:
    return decode_table(value)


def install() -> None:
    """Make pamqp encode and decode every ``table`` field with these functions.

    pamqp looks table codecs up by type name in ``decode.METHODS`` and
    ``encode.METHODS`` for method arguments and content properties alike;
    replacing those two entries (idempotent) is the whole hook.
    """
    decoders: dict[str, Callable[..., Any]] = pamqp_decode.METHODS
    encoders: dict[str, Callable[..., Any]] = pamqp_encode.METHODS
    decoders["table"] = _decode_for_pamqp
    encoders["table"] = encode_table


# -- checked unmarshalling (pamqp's loops, strings checked first) ---------------------


def check_long_string(data: bytes, pos: int = 0) -> int:
    """Offset after the long string at ``data[pos]``; ValueError if it runs past the data."""
    if pos + 4 > len(data):
        raise ValueError("long string length runs past the end of its container")
    end: int = pos + 4 + _U32.unpack_from(data, pos)[0]
    if end > len(data):
        raise ValueError("long string length runs past the end of its container")
    return end


def check_short_string(data: bytes, pos: int = 0) -> int:
    """Offset after the short string at ``data[pos]``; ValueError if it runs past the data."""
    if pos >= len(data) or pos + 1 + data[pos] > len(data):
        raise ValueError("short string runs past the end of the data")
    return pos + 1 + data[pos]


def _check(data: bytes, data_type: str) -> None:
    if data_type == "longstr":
        check_long_string(data)
    elif data_type == "shortstr":
        check_short_string(data)
    # tables: decode_table checks every length itself.


def unmarshal_method(method: Any, data: bytes) -> None:
    """pamqp's ``Frame.unmarshal``, with every string checked before it is decoded."""
    bit_offset, in_bits = 0, False
    value: Any
    for argument in method.__slots__:
        data_type = method.amqp_type(argument)
        if in_bits and (data_type != "bit" or bit_offset == 8):
            data = data[1:]
            bit_offset, in_bits = 0, False
        if data_type == "bit":
            _, value = pamqp_decode.bit(data, bit_offset)
            bit_offset += 1
            in_bits = True
        else:
            _check(data, data_type)
            consumed, value = pamqp_decode.by_type(data, data_type)
            data = data[consumed:]
        setattr(method, argument, value)


def unmarshal_properties(props: Any, flags: int, data: bytes) -> None:
    """pamqp's ``Basic.Properties.unmarshal``, with strings checked before they are decoded."""
    for name in props.__slots__:
        if flags & props.flags[name]:
            data_type = getattr(props.__class__, "_" + name)
            _check(data, data_type)
            consumed, value = pamqp_decode.by_type(data, data_type)
            setattr(props, name, value)
            data = data[consumed:]
