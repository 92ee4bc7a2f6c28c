"""Client-side AMQP 0-9-1 codec for the Spark bridge's hot paths.

Theory of operation
-------------------
The bridge moves tens of thousands of small messages a second through one
Python process per side, so the per-message cost has to be a few
microseconds. pamqp walks attribute lists and dispatches on type names (tens of
microseconds a frame), which is fine for the handshake, declares and the
occasional Basic.Return, but not for the four frames that carry the load:

* out: ``Basic.Publish`` + content header + body (publisher), ``Basic.Ack``
  (consumer);
* in:  ``Basic.Deliver`` + content header + body (consumer), ``Basic.Ack`` /
  ``Basic.Nack`` (publisher confirms).

Those are packed and unpacked here with precompiled ``struct.Struct`` objects.
The one field type that stays with pamqp is the field table (``headers``): it
is recursive and typed, and rows rarely carry one. Everything here is pure:
bytes in, values out. ``tests/unit/test_spark_wire.py`` checks the output
against pamqp byte for byte.

The client mirrors the broker's ``amqp/fastpath.py`` but lives apart on
purpose: the broker decodes publishes and encodes deliveries, a client does the
reverse, and the bridge must work against RabbitMQ without importing the broker.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from pamqp import decode as pdecode
from pamqp import encode as pencode

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_HEADER_STRUCT = struct.Struct(">BHI")  # type, channel, payload size
FRAME_OVERHEAD = 8

BASIC_CLASS = 60
BASIC_PUBLISH = 0x003C0028
BASIC_RETURN = 0x003C0032
BASIC_DELIVER = 0x003C003C
BASIC_ACK = 0x003C0050
BASIC_NACK = 0x003C0078

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_METHOD_ID = struct.Struct(">I")
_CONTENT_HEADER = struct.Struct(">HHQH")  # class, weight, body size, property flags
_TAG_BITS = struct.Struct(">QB")

# Basic property flags, highest bit first, in wire order (spec 0-9-1, class basic).
PROPERTY_FLAGS: tuple[tuple[str, int, str], ...] = (
    ("content_type", 1 << 15, "s"),
    ("content_encoding", 1 << 14, "s"),
    ("headers", 1 << 13, "t"),
    ("delivery_mode", 1 << 12, "o"),
    ("priority", 1 << 11, "o"),
    ("correlation_id", 1 << 10, "s"),
    ("reply_to", 1 << 9, "s"),
    ("expiration", 1 << 8, "s"),
    ("message_id", 1 << 7, "s"),
    ("timestamp", 1 << 6, "T"),
    ("type", 1 << 5, "s"),
    ("user_id", 1 << 4, "s"),
    ("app_id", 1 << 3, "s"),
    ("cluster_id", 1 << 2, "s"),
)
PROPERTY_NAMES = tuple(name for name, _flag, _kind in PROPERTY_FLAGS)


def shortstr(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"short string longer than 255 bytes: {value[:40]!r}...")
    return _U8.pack(len(raw)) + raw


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return FRAME_HEADER_STRUCT.pack(frame_type, channel, len(payload)) + payload + b"\xce"


# --- properties --------------------------------------------------------------


def encode_properties(props: Mapping[str, Any]) -> bytes:
    """Property flags + property list for a content header (absent or None = not set).

    ``timestamp`` is whole seconds since the epoch (an int); ``headers`` a dict.
    """
    flags = 0
    parts: list[bytes] = []
    for name, flag, kind in PROPERTY_FLAGS:
        value = props.get(name)
        if value is None:
            continue
        flags |= flag
        if kind == "s":
            parts.append(shortstr(str(value)))
        elif kind == "o":
            parts.append(_U8.pack(int(value)))
        elif kind == "T":
            parts.append(_U64.pack(int(value)))
        else:
            parts.append(pencode.field_table(dict(value)))
    return _U16.pack(flags) + b"".join(parts)


def decode_properties(data: bytes | memoryview, offset: int = 0) -> dict[str, Any]:
    """Inverse of :func:`encode_properties`; only the properties that are set appear."""
    (flags,) = _U16.unpack_from(data, offset)
    pos = offset + 2
    out: dict[str, Any] = {}
    if flags & 1:
        raise ValueError("continuation property flags are not used by class basic")
    for name, flag, kind in PROPERTY_FLAGS:
        if not flags & flag:
            continue
        if kind == "s":
            size = data[pos]
            end = pos + 1 + size
            if end > len(data):
                raise ValueError(f"property {name} runs past the content header")
            out[name] = bytes(data[pos + 1 : end]).decode()
            pos = end
        elif kind == "o":
            out[name] = data[pos]
            pos += 1
        elif kind == "T":
            (out[name],) = _U64.unpack_from(data, pos)
            pos += 8
        else:
            used, table = pdecode.field_table(bytes(data[pos:]))
            out[name] = table
            pos += used
    return out


# --- publish (client -> broker) ---------------------------------------------


def publish_prefix(channel: int, exchange: str, routing_key: str, mandatory: bool) -> bytes:
    """The Basic.Publish method frame (cache it per exchange/routing key)."""
    payload = (
        _METHOD_ID.pack(BASIC_PUBLISH)
        + b"\x00\x00"  # reserved-1 (ticket)
        + shortstr(exchange)
        + shortstr(routing_key)
        + (b"\x01" if mandatory else b"\x00")
    )
    return frame(FRAME_METHOD, channel, payload)


def encode_content(channel: int, raw_properties: bytes, body: bytes, frame_max: int) -> bytes:
    """Content header + body frames, the body split so no frame exceeds ``frame_max``."""
    header_payload = _CONTENT_HEADER.pack(BASIC_CLASS, 0, len(body), 0)[:-2] + raw_properties
    out = [frame(FRAME_HEADER, channel, header_payload)]
    chunk = frame_max - FRAME_OVERHEAD
    if len(body) <= chunk:
        if body:
            out.append(FRAME_HEADER_STRUCT.pack(FRAME_BODY, channel, len(body)))
            out.append(body)
            out.append(b"\xce")
    else:
        for start in range(0, len(body), chunk):
            out.append(frame(FRAME_BODY, channel, body[start : start + chunk]))
    return b"".join(out)


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    return frame(
        FRAME_METHOD, channel, _METHOD_ID.pack(BASIC_ACK) + _TAG_BITS.pack(delivery_tag, multiple)
    )


# --- incoming hot frames -----------------------------------------------------


def decode_deliver(payload: bytes | memoryview) -> tuple[int, bool, str, str]:
    """Basic.Deliver payload (method id included) -> (delivery_tag, redelivered, exchange, rk)."""
    pos = 4
    pos += 1 + payload[pos]  # consumer tag
    tag, bits = _TAG_BITS.unpack_from(payload, pos)
    pos += 9
    size = payload[pos]
    exchange = bytes(payload[pos + 1 : pos + 1 + size]).decode()
    pos += 1 + size
    size = payload[pos]
    routing_key = bytes(payload[pos + 1 : pos + 1 + size]).decode()
    return tag, bool(bits & 1), exchange, routing_key


def decode_confirm(payload: bytes | memoryview) -> tuple[int, bool]:
    """Basic.Ack / Basic.Nack payload -> (delivery_tag, multiple)."""
    tag, bits = _TAG_BITS.unpack_from(payload, 4)
    return tag, bool(bits & 1)


def decode_content_header(payload: bytes | memoryview) -> tuple[int, bytes]:
    """Content header payload -> (body size, raw property bytes: flags + list)."""
    (body_size,) = _U64.unpack_from(payload, 4)
    return body_size, bytes(payload[12:])


def method_id(payload: bytes | memoryview) -> int:
    return int(_METHOD_ID.unpack_from(payload, 0)[0])
