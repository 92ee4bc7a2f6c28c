"""The ``x-stream-offset`` header every stream delivery carries, spliced into raw properties.

RabbitMQ adds ``x-stream-offset`` (a signed 64-bit ``l``) to the headers of each
message a stream delivers over 0-9-1. Leveret keeps properties as the
publisher's bytes, so instead of decoding and re-encoding them per delivery it
appends one field to the headers table in place (or inserts a one-field table
when there is none): a copy of the property bytes, nothing decoded. An
``x-stream-offset`` the publisher set itself is left in the table before
ours; clients decoding into a dict keep the last one, the broker's.
"""

from __future__ import annotations

import struct

from leveret.model.message import FLAG_CONTENT_ENCODING, FLAG_CONTENT_TYPE, FLAG_HEADERS

_NAME = b"x-stream-offset"
_FIELD = struct.Struct(f">B{len(_NAME)}sbq")  # shortstr name, type 'l', signed 64-bit value
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")


def offset_field(offset: int) -> bytes:
    """The table field ``x-stream-offset: long <offset>``."""
    return _FIELD.pack(len(_NAME), _NAME, ord("l"), offset)


def with_stream_offset(raw: bytes, offset: int) -> bytes:
    """``raw`` (flags + property list) with ``x-stream-offset`` added to its headers.

    Raises ValueError for a property list too short for the flags it declares
    (the caller falls back to the message as it is)."""
    field = offset_field(offset)
    if len(raw) < 2:
        return _u16.pack(FLAG_HEADERS) + _u32.pack(len(field)) + field
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
            return b"".join((raw[:pos], _u32.pack(length + len(field)), raw[pos + 4:end],
                             field, raw[end:]))
    except (IndexError, struct.error) as exc:
        raise ValueError(str(exc)) from None
    return b"".join((_u16.pack(flags | FLAG_HEADERS), raw[2:pos], _u32.pack(len(field)),
                     field, raw[pos:]))
