"""Hand-written codecs for the hot Basic methods, checked against pamqp.

Theory of operation
-------------------
pamqp encodes every method by walking its attribute list and dispatching on
type names, which costs tens of microseconds per frame.  Almost all broker
traffic is a handful of methods: Publish, Ack, Nack and Reject coming in, and
Deliver, GetOk, Return and publisher-confirm Ack/Nack going out, each followed
(for content) by a header frame and body frames.  This module encodes and
decodes exactly those with precompiled ``struct.Struct`` objects; everything
else goes through pamqp.  ``tests/unit/test_fastpath.py`` checks byte for byte
that the output equals pamqp's, and ``bench/codec_micro.py`` measures the gain.

Conventions
-----------
* Decoders take the payload of one frame (``bytes`` or ``memoryview``): for a
  method frame it starts with the 4-byte class/method id, which is checked;
  for a content header it starts with class-id, weight, body-size.  They
  return plain tuples and raise ``ValueError`` on truncated or malformed input
  (never ``struct.error`` or ``IndexError``).  Bytes after the last field are
  ignored, as pamqp ignores them.
* Short strings are decoded as strict UTF-8, like ``pamqp.decode.short_str``;
  invalid UTF-8 raises ``UnicodeDecodeError`` (a ``ValueError``).  Unlike
  pamqp, a short string running past the end of the payload is an error, not
  silently shortened.
* Encoders return complete wire frames (7-byte header, payload, 0xCE).  They
  raise ``ValueError`` when a short string exceeds 255 bytes of UTF-8 or an
  integer does not fit its field.  They do not re-validate exchange names:
  the broker validated them when the exchange was declared.
* Delivery tags are unsigned 64-bit, as the spec says.  pamqp packs
  ``longlong`` as *signed*, so the two agree on 0 .. 2**63-1 (the only tags a
  broker ever issues); a client-sent tag with the top bit set decodes here as
  the large positive number RabbitMQ would see, and as negative in pamqp.
* Message properties stay in the publisher's wire form (``raw_properties``:
  the property-flag words followed by the property list) and are relayed to
  consumers unchanged; ``leveret.model.properties`` decodes them (via pamqp)
  for the slow paths that need TTL, priority, headers or dead-lettering.
"""

from __future__ import annotations

import struct

from leveret.amqp.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_END_BYTE,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
)

# --- method ids: (class_id << 16) | method_id, as pamqp's ``index`` ---------

BASIC_QOS = 0x003C000A
BASIC_QOS_OK = 0x003C000B
BASIC_CONSUME = 0x003C0014
BASIC_CONSUME_OK = 0x003C0015
BASIC_CANCEL = 0x003C001E
BASIC_CANCEL_OK = 0x003C001F
BASIC_PUBLISH = 0x003C0028
BASIC_RETURN = 0x003C0032
BASIC_DELIVER = 0x003C003C
BASIC_GET = 0x003C0046
BASIC_GET_OK = 0x003C0047
BASIC_GET_EMPTY = 0x003C0048
BASIC_ACK = 0x003C0050
BASIC_REJECT = 0x003C005A
BASIC_RECOVER_ASYNC = 0x003C0064
BASIC_RECOVER = 0x003C006E
BASIC_RECOVER_OK = 0x003C006F
BASIC_NACK = 0x003C0078

_BASIC_CLASS_ID = 60

# --- precompiled structs ---------------------------------------------------

_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, payload size
_METHOD_HEAD = struct.Struct(">BHII")  # type, channel, size, method id
_PUBLISH_HEAD = struct.Struct(">IHB")  # method id, ticket, exchange length
_ID_TAG_BITS = struct.Struct(">IQB")  # method id, delivery tag, bit byte
_TAG_BITS = struct.Struct(">QB")  # delivery tag, bit byte
_UINT32 = struct.Struct(">I")
_UINT16 = struct.Struct(">H")
# Whole Basic.Ack / Basic.Nack frame: 13-byte payload, then the frame end.
_ACKISH_FRAME = struct.Struct(">BHIIQBB")
_ACKISH_PAYLOAD_SIZE = 13
# Content header: frame head + class id, weight, body size (12 bytes).
_CONTENT_HEADER_HEAD = struct.Struct(">BHIHHQ")
_CONTENT_HEADER_PREFIX = 12
_CONTENT_HEADER_DECODE = struct.Struct(">HHQ")
# End of the previous frame followed by the head of a body frame, or of a content header.
_END_THEN_BODY_HEAD = struct.Struct(">BBHI")
_END_THEN_HEADER_HEAD = struct.Struct(">BBHIHHQ")

# --- short string cache ----------------------------------------------------

# Encoded shortstrs (length byte + UTF-8) for consumer tags, exchange names
# and routing keys, which repeat across deliveries.  Bounded so that unique
# routing keys cannot grow it without limit; when full it is simply cleared
# (cheaper than LRU bookkeeping, and the working set refills in one pass).
SHORTSTR_CACHE_MAX = 4096
_shortstr_cache: dict[str, bytes] = {}
_LENGTH_BYTE = [bytes((n,)) for n in range(256)]


def _shortstr(value: str) -> bytes:
    """Return ``value`` as an AMQP shortstr (length byte + UTF-8), cached."""
    encoded = _shortstr_cache.get(value)
    if encoded is not None:
        return encoded
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise ValueError(f"short string exceeds 255 bytes: {len(raw)}")
    encoded = _LENGTH_BYTE[len(raw)] + raw
    if len(_shortstr_cache) >= SHORTSTR_CACHE_MAX:
        _shortstr_cache.clear()
    _shortstr_cache[value] = encoded
    return encoded


# --- decoders (client -> broker) ------------------------------------------


def decode_publish(payload: bytes | memoryview) -> tuple[str, str, bool, bool]:
    """Basic.Publish payload -> (exchange, routing_key, mandatory, immediate)."""
    try:
        method_id, _ticket, length = _PUBLISH_HEAD.unpack_from(payload)
        end = 7 + length
        exchange = str(payload[7:end], "utf-8")
        start = end + 1
        end = start + payload[end]
        routing_key = str(payload[start:end], "utf-8")
        # Indexing the bit byte also proves neither string was truncated.
        bits = payload[end]
    except (struct.error, IndexError) as exc:
        raise ValueError("truncated Basic.Publish") from exc
    if method_id != BASIC_PUBLISH:
        raise ValueError(f"not a Basic.Publish payload: method id {method_id:#010x}")
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def _decode_tag_bits(payload: bytes | memoryview, expected: int, name: str) -> tuple[int, int]:
    try:
        method_id, tag, bits = _ID_TAG_BITS.unpack_from(payload)
    except struct.error as exc:
        raise ValueError(f"truncated {name}") from exc
    if method_id != expected:
        raise ValueError(f"not a {name} payload: method id {method_id:#010x}")
    return tag, bits


def decode_ack(payload: bytes | memoryview) -> tuple[int, bool]:
    """Basic.Ack payload -> (delivery_tag, multiple).

    ``_decode_tag_bits`` written out: a consumer acks every message, and the call is a
    tenth of this decoder's cost."""
    try:
        method_id, tag, bits = _ID_TAG_BITS.unpack_from(payload)
    except struct.error as exc:
        raise ValueError("truncated Basic.Ack") from exc
    if method_id != BASIC_ACK:
        raise ValueError(f"not a Basic.Ack payload: method id {method_id:#010x}")
    return tag, bool(bits & 1)


def decode_nack(payload: bytes | memoryview) -> tuple[int, bool, bool]:
    """Basic.Nack payload -> (delivery_tag, multiple, requeue)."""
    tag, bits = _decode_tag_bits(payload, BASIC_NACK, "Basic.Nack")
    return tag, bool(bits & 1), bool(bits & 2)


def decode_reject(payload: bytes | memoryview) -> tuple[int, bool]:
    """Basic.Reject payload -> (delivery_tag, requeue)."""
    tag, bits = _decode_tag_bits(payload, BASIC_REJECT, "Basic.Reject")
    return tag, bool(bits & 1)


def decode_content_header(payload: bytes | memoryview) -> tuple[int, int, bytes]:
    """Content header payload -> (class_id, body_size, raw_properties).

    ``raw_properties`` is everything after the 12-byte prefix: the property
    flag words and property list exactly as sent.  Only the presence of the
    first flag word is checked here; the list is decoded lazily, if at all.
    The weight field is ignored (the spec requires 0; RabbitMQ ignores it).
    """
    if len(payload) < _CONTENT_HEADER_PREFIX + 2:
        raise ValueError("truncated content header")
    class_id, _weight, body_size = _CONTENT_HEADER_DECODE.unpack_from(payload)
    return class_id, body_size, bytes(payload[_CONTENT_HEADER_PREFIX:])


# --- encoders (broker -> client) ------------------------------------------


def encode_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
) -> bytes:
    """Complete Basic.Deliver method frame."""
    cache = _shortstr_cache
    ctag = cache.get(consumer_tag) or _shortstr(consumer_tag)
    exch = cache.get(exchange) or _shortstr(exchange)
    rkey = cache.get(routing_key) or _shortstr(routing_key)
    try:
        return b"".join(
            (
                _METHOD_HEAD.pack(
                    FRAME_METHOD, channel, 13 + len(ctag) + len(exch) + len(rkey), BASIC_DELIVER
                ),
                ctag,
                _TAG_BITS.pack(delivery_tag, 1 if redelivered else 0),
                exch,
                rkey,
                FRAME_END_BYTE,
            )
        )
    except struct.error as exc:
        raise ValueError(f"Basic.Deliver field out of range: {exc}") from exc


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
) -> bytes:
    """Complete Basic.GetOk method frame."""
    cache = _shortstr_cache
    exch = cache.get(exchange) or _shortstr(exchange)
    rkey = cache.get(routing_key) or _shortstr(routing_key)
    try:
        return b"".join(
            (
                _METHOD_HEAD.pack(FRAME_METHOD, channel, 17 + len(exch) + len(rkey), BASIC_GET_OK),
                _TAG_BITS.pack(delivery_tag, 1 if redelivered else 0),
                exch,
                rkey,
                _UINT32.pack(message_count),
                FRAME_END_BYTE,
            )
        )
    except struct.error as exc:
        raise ValueError(f"Basic.GetOk field out of range: {exc}") from exc


def encode_return(
    channel: int, reply_code: int, reply_text: str, exchange: str, routing_key: str
) -> bytes:
    """Complete Basic.Return method frame."""
    cache = _shortstr_cache
    text = cache.get(reply_text) or _shortstr(reply_text)
    exch = cache.get(exchange) or _shortstr(exchange)
    rkey = cache.get(routing_key) or _shortstr(routing_key)
    try:
        return b"".join(
            (
                _METHOD_HEAD.pack(
                    FRAME_METHOD, channel, 6 + len(text) + len(exch) + len(rkey), BASIC_RETURN
                ),
                _UINT16.pack(reply_code),
                text,
                exch,
                rkey,
                FRAME_END_BYTE,
            )
        )
    except struct.error as exc:
        raise ValueError(f"Basic.Return field out of range: {exc}") from exc


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """Complete Basic.Ack method frame (publisher confirm)."""
    try:
        return _ACKISH_FRAME.pack(
            FRAME_METHOD,
            channel,
            _ACKISH_PAYLOAD_SIZE,
            BASIC_ACK,
            delivery_tag,
            1 if multiple else 0,
            FRAME_END,
        )
    except struct.error as exc:
        raise ValueError(f"Basic.Ack field out of range: {exc}") from exc


def encode_nack(channel: int, delivery_tag: int, multiple: bool, requeue: bool) -> bytes:
    """Complete Basic.Nack method frame (publisher confirm)."""
    try:
        return _ACKISH_FRAME.pack(
            FRAME_METHOD,
            channel,
            _ACKISH_PAYLOAD_SIZE,
            BASIC_NACK,
            delivery_tag,
            (1 if multiple else 0) | (2 if requeue else 0),
            FRAME_END,
        )
    except struct.error as exc:
        raise ValueError(f"Basic.Nack field out of range: {exc}") from exc


def _max_chunk(frame_max: int) -> int:
    """Body bytes per frame for a negotiated ``frame_max`` (0 = no limit)."""
    if frame_max == 0:
        return 0
    if frame_max <= FRAME_OVERHEAD:
        raise ValueError(f"frame_max too small to carry a body: {frame_max}")
    return frame_max - FRAME_OVERHEAD


def _content_parts(
    channel: int,
    raw_properties: bytes,
    body: bytes | memoryview,
    frame_max: int,
    class_id: int,
) -> list[bytes | memoryview]:
    """Header frame then body frames, as pieces to join (fewest possible)."""
    size = len(body)
    chunk = _max_chunk(frame_max)
    head = _CONTENT_HEADER_HEAD.pack(
        FRAME_HEADER,
        channel,
        _CONTENT_HEADER_PREFIX + len(raw_properties),
        class_id,
        0,
        size,
    )
    if size == 0:
        return [head, raw_properties, FRAME_END_BYTE]
    if chunk == 0 or size <= chunk:
        return [
            head,
            raw_properties,
            _END_THEN_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel, size),
            body,
            FRAME_END_BYTE,
        ]
    parts: list[bytes | memoryview] = [head, raw_properties]
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start : start + chunk]
        parts.append(_END_THEN_BODY_HEAD.pack(FRAME_END, FRAME_BODY, channel, len(piece)))
        parts.append(piece)
    parts.append(FRAME_END_BYTE)
    return parts


def encode_content(
    channel: int,
    raw_properties: bytes,
    body: bytes | memoryview,
    frame_max: int,
    class_id: int = _BASIC_CLASS_ID,
) -> list[bytes]:
    """Content header frame and body frames, one ``bytes`` per frame.

    Each body frame carries at most ``frame_max - 8`` bytes (``frame_max`` 0
    means no limit); an empty body sends no body frame, as RabbitMQ does.
    The header carries weight 0 and ``body_size = len(body)``, then
    ``raw_properties`` unchanged.  The list suits ``transport.writelines``.
    """
    size = len(body)
    chunk = _max_chunk(frame_max)
    try:
        frames = [
            b"".join(
                (
                    _CONTENT_HEADER_HEAD.pack(
                        FRAME_HEADER,
                        channel,
                        _CONTENT_HEADER_PREFIX + len(raw_properties),
                        class_id,
                        0,
                        size,
                    ),
                    raw_properties,
                    FRAME_END_BYTE,
                )
            )
        ]
        if size == 0:
            return frames
        if chunk == 0 or size <= chunk:
            frames.append(
                b"".join((_FRAME_HEAD.pack(FRAME_BODY, channel, size), body, FRAME_END_BYTE))
            )
            return frames
        view = memoryview(body)
        for start in range(0, size, chunk):
            piece = view[start : start + chunk]
            frames.append(
                b"".join((_FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)), piece, FRAME_END_BYTE))
            )
        return frames
    except struct.error as exc:
        raise ValueError(f"content header field out of range: {exc}") from exc


def encode_deliver_with_content(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    raw_properties: bytes,
    body: bytes | memoryview,
    frame_max: int,
    class_id: int = _BASIC_CLASS_ID,
) -> bytes:
    """Basic.Deliver + content header + body frames joined into one ``bytes``.

    Same bytes as ``encode_deliver(...) + b"".join(encode_content(...))`` but
    built with a single join, which is what a consumer delivery wants. Compiled, it is a
    C function the channel calls directly (``fastpath.pxd``).
    """
    size = len(body)
    try:
        heads = _deliver_heads.get((channel, consumer_tag, exchange, routing_key))
        if heads is None:
            heads = _new_deliver_heads(channel, consumer_tag, exchange, routing_key)
        head, names = heads
        tag_bits = _pack_tag_bits(delivery_tag, 1 if redelivered else 0)
        if size and (not frame_max or size <= frame_max - FRAME_OVERHEAD):
            # The usual delivery, a body in one frame: one join, no list of parts.
            return b"".join((
                head, tag_bits, names,
                _pack_end_then_header_head(FRAME_END, FRAME_HEADER, channel,
                                           _CONTENT_HEADER_PREFIX + len(raw_properties),
                                           class_id, 0, size),
                raw_properties,
                _pack_end_then_body_head(FRAME_END, FRAME_BODY, channel, size),
                body,
                FRAME_END_BYTE,
            ))
        parts = _content_parts(channel, raw_properties, body, frame_max, class_id)
        return b"".join((head, tag_bits, names, FRAME_END_BYTE, *parts))
    except struct.error as exc:
        raise ValueError(f"Basic.Deliver field out of range: {exc}") from exc


# Basic.Deliver's bytes before its delivery tag (frame head, method id, consumer tag) and
# after its redelivered bit (exchange, routing key), by (channel, consumer tag, exchange,
# routing key): they repeat across a consumer's deliveries, so the usual delivery packs
# only its tag and its content heads. Bounded and cleared as the shortstr cache is.
_deliver_heads: dict[tuple[int, str, str, str], tuple[bytes, bytes]] = {}
# Bound once: a struct's ``pack`` looked up per call costs as much as the packing.
_pack_tag_bits = _TAG_BITS.pack
_pack_end_then_header_head = _END_THEN_HEADER_HEAD.pack
_pack_end_then_body_head = _END_THEN_BODY_HEAD.pack


def _new_deliver_heads(channel: int, consumer_tag: str, exchange: str,
                       routing_key: str) -> tuple[bytes, bytes]:
    ctag, exch, rkey = _shortstr(consumer_tag), _shortstr(exchange), _shortstr(routing_key)
    heads = (_METHOD_HEAD.pack(FRAME_METHOD, channel, 13 + len(ctag) + len(exch) + len(rkey),
                               BASIC_DELIVER) + ctag, exch + rkey)
    if len(_deliver_heads) >= SHORTSTR_CACHE_MAX:
        _deliver_heads.clear()
    _deliver_heads[(channel, consumer_tag, exchange, routing_key)] = heads
    return heads
