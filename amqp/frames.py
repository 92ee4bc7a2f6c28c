"""Frame buffer: turns a byte stream into (type, channel, payload) frames.

A frame is ``type:u8 channel:u16 size:u32 payload[size] 0xCE``. The buffer
never decodes payloads (that is the codec's job); it only checks the framing
itself, because a framing error is fatal to the connection (501 FRAME_ERROR)
and must be detected before anything is dispatched. Complete frames are
sliced out of one ``bytearray`` and the consumed prefix is dropped once per
``feed`` call, not once per frame. A publish is three frames; when its header and
body have arrived with it, ``feed`` hands the three over as one item
(``FRAME_PUBLISH``), so the hot path pays one dispatch per message, not three.
"""

from __future__ import annotations

import struct
from collections.abc import Generator

from leveret.model.errors import FRAME_ERROR, ConnectionError_

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7
# Bytes a frame adds around its payload: type(1) channel(2) size(4) end(1).
FRAME_OVERHEAD = 8
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
FRAME_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))
# Not a wire type: ``feed`` yields it for a basic.publish method frame whose content header
# and single body frame are complete and well framed too; the item's payload is the
# method's, and ``FrameBuffer.content`` holds the other two until the next item.
FRAME_PUBLISH = -1

# Before connection.tune-ok the peer may not send frames larger than this (RabbitMQ's initial_frame_max).
INITIAL_FRAME_MAX = 8192

_frame_head = struct.Struct(">BHI")
# Bound once: a frame's head (type, channel, size) at an offset, without a method lookup;
# and a content header's body size.
_unpack_head = _frame_head.unpack_from
_unpack_u64 = struct.Struct(">Q").unpack_from
# A method payload starts with class and method ids; basic.publish is (60, 40). Its payload
# holds at least those, a u16, two short strings and a bit field.
_PUBLISH_MIN = 9
# A content header payload: class, weight, body size (u64), then at least one flag word.
_HEADER_MIN = 14


def erlang_binary(data: bytes | bytearray) -> str:
    """Bytes as RabbitMQ (Erlang's ``~p``) prints them in error texts: ``<<"abc">>`` or ``<<0,40>>``."""
    if data and all(32 <= b < 127 for b in data):
        text = bytes(data).decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


class FrameBuffer:
    """Accumulates bytes and yields complete frames; ``frame_max`` bounds their size."""

    __slots__ = ("_at", "_buf", "_skip", "content", "frame_max")

    def __init__(self, frame_max: int = INITIAL_FRAME_MAX) -> None:
        self._buf = bytearray()
        self._skip = 0  # feed_closing: bytes of a skipped frame still to come
        self._at = 0  # feed: where the next frame starts in the buffer
        self.frame_max = frame_max
        # The content header's and the body's payloads of the last FRAME_PUBLISH item.
        self.content: tuple[bytes, bytes] = (b"", b"")

    def __len__(self) -> int:
        return len(self._buf)

    def take(self, n: int) -> bytes:
        """Remove and return the first ``n`` buffered bytes (used for the protocol header)."""
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def feed(self, data: bytes) -> Generator[tuple[int, int, bytes], None, None]:
        """Add ``data``; yield every frame now complete, in order.

        Lazy on purpose: the caller handles each frame before the next one is
        parsed, so a ``frame_max`` negotiated by connection.tune-ok bounds the
        very next frame, and the frames before a bad one are handled exactly as
        when the stream arrives byte by byte. Reaching a bad type, an oversized
        frame or a missing end octet raises ``ConnectionError_(FRAME_ERROR)``;
        callers should treat that as terminating the stream. The consumed
        prefix is dropped once, when the iteration ends (or is abandoned).
        """
        buf = self._buf
        buf += data
        self._at = 0
        try:
            while True:
                frame = self._next_frame(buf)
                if frame is None:
                    return
                yield frame
        finally:
            if self._at:
                del buf[:self._at]
                self._at = 0

    def _next_frame(self, buf: bytearray) -> tuple[int, int, bytes] | None:
        """The frame at ``_at`` if it is complete (``_at`` moves past it), else None.

        Compiled (``frames.pxd``), ``p`` is a C pointer into the buffer: its bytes are read
        as C and a payload is copied straight into a new ``bytes``; pure, ``p`` is
        the bytearray and the same lines index and slice it. The head is one ``unpack_from``
        in both: cheaper in the pure build than reading its bytes one by one."""
        pos = self._at
        avail = len(buf)
        if avail - pos < FRAME_HEADER_SIZE:
            return None
        p = buf
        ftype, channel, size = _unpack_head(buf, pos)
        limit = self.frame_max
        if limit and size + FRAME_HEADER_SIZE + 1 > limit:
            raise ConnectionError_(
                FRAME_ERROR,
                f"type {ftype}, all octets = <<>>: "
                f"{{frame_too_large,{size},{limit - FRAME_HEADER_SIZE - 1}}}",
            )
        start = pos + FRAME_HEADER_SIZE
        stop = start + size
        if stop >= avail:
            return None
        if p[stop] != FRAME_END:
            raise ConnectionError_(
                FRAME_ERROR,
                f"type {ftype}, first 16 octets = "
                f"{erlang_binary(buf[start:min(stop, start + 16)])}"
                f": {{invalid_frame_end_marker,{buf[stop]}}}",
            )
        if (ftype == FRAME_METHOD and size >= _PUBLISH_MIN and p[pos + 8] == 60
                and p[pos + 10] == 40 and not p[pos + 7] and not p[pos + 9]):
            body = self._content(buf, stop + 1, channel)
            if body:  # _content moved _at past the body frame
                self.content = (bytes(p[stop + 1 + FRAME_HEADER_SIZE : body - 1]),
                                bytes(p[body + FRAME_HEADER_SIZE : self._at - 1]))
                return FRAME_PUBLISH, channel, bytes(p[start:stop])
        payload = bytes(p[start:stop])
        if ftype not in FRAME_TYPES:
            # Checked on the whole frame, as RabbitMQ: the text does not depend
            # on how much of the stream had arrived.
            raise ConnectionError_(
                FRAME_ERROR,
                f"type {ftype}, all octets = {erlang_binary(payload)}: unknown_frame",
            )
        self._at = stop + 1
        return ftype, channel, payload

    def _content(self, buf: bytearray, at: int, channel: int) -> int:
        """Where the body frame starts, if the frames from ``at`` (after a basic.publish)
        are a content header and one body frame of its announced size on ``channel``,
        complete and well framed (``_at`` then moves past the body frame); else 0 (they go
        one by one, through every check of ``feed``)."""
        end = len(buf)
        if end - at < FRAME_HEADER_SIZE + _HEADER_MIN:
            return 0
        p = buf
        ftype, number, size = _unpack_head(buf, at)
        limit = self.frame_max
        stop = at + FRAME_HEADER_SIZE + size
        if (ftype != FRAME_HEADER or number != channel
                or size < _HEADER_MIN or stop >= end or p[stop] != FRAME_END
                or (limit and size + FRAME_OVERHEAD > limit)):
            return 0
        (body_size,) = _unpack_u64(buf, at + FRAME_HEADER_SIZE + 4)
        at = stop + 1
        if not body_size or end - at < FRAME_HEADER_SIZE:
            return 0
        ftype, number, size = _unpack_head(buf, at)
        stop = at + FRAME_HEADER_SIZE + size
        if (ftype != FRAME_BODY or number != channel
                or size != body_size or stop >= end or p[stop] != FRAME_END
                or (limit and size + FRAME_OVERHEAD > limit)):
            return 0
        self._at = stop + 1
        return at

    def feed_closing(self, data: bytes) -> Generator[tuple[int, int, bytes], None, None]:
        """After we sent connection.close: yield only channel-0 method frames (close, close-ok).

        Every other frame is skipped as its bytes arrive, without being kept, so a
        peer that goes on publishing costs no memory; at most one channel-0 frame
        (bounded by ``frame_max``) is buffered. Framing is still checked, and a
        framing error raises ``ConnectionError_(FRAME_ERROR)`` as in ``feed``.
        """
        skip = self._skip
        if skip:
            if len(data) <= skip:
                self._skip = skip - len(data)
                return
            data = bytes(memoryview(data)[skip:])
            self._skip = 0
        buf = self._buf
        buf += data
        pos = 0
        try:
            while len(buf) - pos >= FRAME_HEADER_SIZE:
                ftype, channel, size = _frame_head.unpack_from(buf, pos)
                limit = self.frame_max
                if ftype not in FRAME_TYPES or (limit and size + FRAME_HEADER_SIZE + 1 > limit):
                    raise ConnectionError_(FRAME_ERROR, f"type {ftype}: bad frame while closing")
                stop = pos + FRAME_HEADER_SIZE + size
                if ftype != FRAME_METHOD or channel != 0:
                    if stop + 1 > len(buf):
                        self._skip = stop + 1 - len(buf)
                        pos = len(buf)
                        break
                    pos = stop + 1
                    continue
                if stop >= len(buf):
                    break
                if buf[stop] != FRAME_END:
                    raise ConnectionError_(FRAME_ERROR, f"type {ftype}: invalid frame end marker")
                frame = (ftype, channel, bytes(buf[pos + FRAME_HEADER_SIZE : stop]))
                pos = stop + 1
                yield frame
        finally:
            if pos:
                del buf[:pos]
