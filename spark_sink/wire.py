"""Client-side AMQP 0-9-1 codec for the Spark bridge's hot paths.

Theory of operation
-------------------
The bridge moves tens of thousands of small messages a second through one
Python process per side, so the per-message cost has to be a few
microseconds. pamqp walks attribute lists and dispatches on type names (tens of
microseconds a frame), which is fine for the handshake, declares and the
occasional Basic.Return, but not for the frames that carry the load:

* out: ``Basic.Publish`` + content header + body (publisher), ``Basic.Ack``
  (consumer);
* in:  ``Basic.Deliver`` + content header + body (consumer), ``Basic.Ack`` /
  ``Basic.Nack`` (publisher confirms).

One wire vocabulary: the frame and method constants, the
``Basic.Ack`` encoder, the confirm and content-header decoders and the content
encoder are the broker's own, from :mod:`leveret.amqp.fastpath` (pure
``struct`` code importing nothing of the broker, so the bridge still runs
against RabbitMQ with no broker started). What stays here is what only a
client does, each checked byte for byte against pamqp in
``tests/unit/test_spark_wire.py``:

* encoding ``Basic.Publish`` (the broker only decodes it), fused with its
  content frames into one tuple of pieces per message (:func:`encode_publish`);
* decoding ``Basic.Deliver`` (the broker only encodes it);
* properties as a plain ``dict`` walked with a flag table: the broker's
  :mod:`leveret.model.properties` builds pamqp ``Basic.Properties`` objects,
  right for its slow paths but several times slower for a column of 50,000
  rows. The one field type that stays with pamqp is the field table
  (``headers``): it is recursive and typed, and rows rarely carry one.

Everything here is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from pamqp import decode as pdecode
from pamqp import encode as pencode

from leveret.amqp.fastpath import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    BASIC_PUBLISH,
    BASIC_RETURN,
    decode_ack,
    decode_nack,
    encode_ack,
)
from leveret.amqp.fastpath import decode_content_header as _decode_content_header
from leveret.amqp.fastpath import encode_content as _encode_content_frames
from leveret.amqp.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
)

__all__ = [
    "BASIC_ACK", "BASIC_DELIVER", "BASIC_NACK", "BASIC_PUBLISH", "BASIC_RETURN", "FRAME_BODY",
    "FRAME_END", "FRAME_HEADER", "FRAME_HEARTBEAT", "FRAME_METHOD", "FRAME_OVERHEAD",
    "PROPERTY_FLAGS", "PROPERTY_NAMES", "decode_ack", "decode_confirm", "decode_content_header",
    "decode_deliver", "decode_nack", "decode_properties", "encode_ack", "encode_content",
    "encode_properties", "encode_publish", "encode_publishes", "method_id", "publish_prefix", "shortstr",
]

FRAME_HEADER_STRUCT = struct.Struct(">BHI")  # type, channel, payload size (the client's reader)
BASIC_CLASS = 60

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_METHOD_ID = struct.Struct(">I")
_TAG_BITS = struct.Struct(">QB")
_CONTENT_HEAD = struct.Struct(">BHIHHQ")  # header frame: type, channel, size, class, weight, body size
_END_THEN_BODY = struct.Struct(">BBHI")  # header frame's end octet, body frame's type, channel, size
_END = b"\xce"

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
    return FRAME_HEADER_STRUCT.pack(FRAME_METHOD, channel, len(payload)) + payload + _END


def encode_content(channel: int, raw_properties: bytes, body: bytes, frame_max: int) -> bytes:
    """Content header + body frames in one buffer (the broker's encoder, joined)."""
    return b"".join(_encode_content_frames(channel, raw_properties, body, frame_max))


def encode_publish(
    prefix: bytes, channel: int, raw_properties: bytes, body: bytes, frame_max: int
) -> tuple[bytes, ...]:
    """One whole publish as pieces to write: ``prefix`` (:func:`publish_prefix`), the
    content header and the body frame(s). A body that fits one frame (the usual case)
    costs two ``struct`` packs and no copy of the body."""
    size = len(body)
    head = _CONTENT_HEAD.pack(FRAME_HEADER, channel, 12 + len(raw_properties), BASIC_CLASS, 0, size)
    if size == 0:
        return (prefix, head, raw_properties, _END)
    if size <= frame_max - FRAME_OVERHEAD:
        return (prefix, head, raw_properties,
                _END_THEN_BODY.pack(FRAME_END, FRAME_BODY, channel, size), body, _END)
    return (prefix, encode_content(channel, raw_properties, body, frame_max))


def encode_publishes(
    prefix: bytes | Sequence[bytes], channel: int, raw_properties: Sequence[bytes],
    bodies: Sequence[bytes], frame_max: int,
) -> list[bytes]:
    """Many publishes as one list of pieces to join and write: for each message, what
    :func:`encode_publish` gives it, without a Python call per message where its body
    fits one frame. ``prefix`` is one method frame for all, or one per message."""
    out: list[bytes] = []
    prefixes = [prefix] * len(bodies) if isinstance(prefix, bytes) else prefix
    limit = frame_max - FRAME_OVERHEAD
    head, tail = _CONTENT_HEAD.pack, _END_THEN_BODY.pack
    for pre, raw, body in zip(prefixes, raw_properties, bodies, strict=True):
        size = len(body)
        if 0 < size <= limit:
            out += (pre, head(FRAME_HEADER, channel, 12 + len(raw), BASIC_CLASS, 0, size), raw,
                    tail(FRAME_END, FRAME_BODY, channel, size), body, _END)
        else:
            out += encode_publish(pre, channel, raw, body, frame_max)
    return out


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
    if method_id(payload) == BASIC_NACK:
        tag, multiple, _requeue = decode_nack(payload)
        return tag, multiple
    return decode_ack(payload)


def decode_content_header(payload: bytes | memoryview) -> tuple[int, bytes]:
    """Content header payload -> (body size, raw property bytes: flags + list)."""
    _class_id, size, raw = _decode_content_header(payload)
    return size, raw


def method_id(payload: bytes | memoryview) -> int:
    return int(_METHOD_ID.unpack_from(payload, 0)[0])
