"""The ``x-stream-offset`` header every stream delivery carries, spliced into raw properties.

RabbitMQ adds ``x-stream-offset`` (a signed 64-bit ``l``) to the headers of each
message a stream delivers over 0-9-1. Leveret keeps properties as the
publisher's bytes, so instead of decoding and re-encoding them per delivery it
appends one field to the headers table in place (or inserts a one-field table
when there is none): a copy of the property bytes, nothing decoded. An
``x-stream-offset`` the publisher set itself is left in the table before
ours; clients decoding into a dict keep the last one, the broker's. Only the
offset's 8 bytes differ between two entries with the same properties, so a page is
spliced with an ``OffsetSplicer``, which parses the properties again only when they
change.
"""

from __future__ import annotations

import struct

from leveret.model.message import FLAG_CONTENT_ENCODING, FLAG_CONTENT_TYPE, FLAG_HEADERS

_NAME = b"x-stream-offset"
_FIELD = struct.Struct(f">B{len(_NAME)}sbq")  # shortstr name, type 'l', signed 64-bit value
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")


_VALUE = struct.Struct(">q")
_pack_value = _VALUE.pack  # bound once: a per-entry lookup of ``pack`` costs as much as packing
_FIELD_HEAD = _FIELD.pack(len(_NAME), _NAME, ord("l"), 0)[:-_VALUE.size]  # before the value


def offset_field(offset: int) -> bytes:
    """The table field ``x-stream-offset: long <offset>``."""
    return _FIELD.pack(len(_NAME), _NAME, ord("l"), offset)


def with_stream_offset(raw: bytes, offset: int) -> bytes:
    """``raw`` (flags + property list) with ``x-stream-offset`` added to its headers.

    Raises ValueError for a property list too short for the flags it declares
    (the caller falls back to the message as it is)."""
    head, tail = spliced(raw)
    return b"".join((head, _VALUE.pack(offset), tail))


def spliced(raw: bytes) -> tuple[bytes, bytes]:
    """The bytes of ``with_stream_offset(raw, offset)`` before and after the offset's
    8-byte value, which alone depends on the offset (ValueError as there)."""
    field = _FIELD.size
    if len(raw) < 2:
        return _u16.pack(FLAG_HEADERS) + _u32.pack(field) + _FIELD_HEAD, b""
    flags = _u16.unpack_from(raw, 0)[0]
    if flags & 1:
        raise ValueError("property flags with a continuation word")
    try:
        pos = 2
        if flags & FLAG_CONTENT_TYPE:
            pos += 1 + raw[pos]
        if flags & FLAG_CONTENT_ENCODING:
            pos += 1 + raw[pos]
        if flags & FLAG_HEADERS:
            length = _u32.unpack_from(raw, pos)[0]
            end = pos + 4 + length
            if end > len(raw):
                raise ValueError("headers table longer than the properties")
            return b"".join((raw[:pos], _u32.pack(length + field), raw[pos + 4:end],
                             _FIELD_HEAD)), raw[end:]
    except (IndexError, struct.error) as exc:
        raise ValueError(str(exc)) from None
    return b"".join((_u16.pack(flags | FLAG_HEADERS), raw[2:pos], _u32.pack(field),
                     _FIELD_HEAD)), raw[pos:]


class OffsetSplicer:
    """``with_stream_offset`` for a run of entries. A stream's messages mostly carry the
    same properties (one publisher, one kind of message), so the bytes around the offset
    are cut once and reused while the properties repeat: a comparison, a pack and a join
    an entry instead of parsing the flags and headers of each."""

    __slots__ = ("_head", "_raw", "_tail")

    def __init__(self) -> None:
        self._raw: bytes | None = None
        self._head = self._tail = b""

    def splice(self, raw: bytes, offset: int) -> bytes:
        """``with_stream_offset(raw, offset)`` (ValueError as there)."""
        if raw != self._raw:
            self._head, self._tail = spliced(raw)
            self._raw = raw
        return b"".join((self._head, _pack_value(offset), self._tail))
