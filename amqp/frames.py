"""Frame buffer: turns a byte stream into (type, channel, payload) frames.

A frame is ``type:u8 channel:u16 size:u32 payload[size] 0xCE``. The buffer
never decodes payloads (that is the codec's job); it only checks the framing
itself, because a framing error is fatal to the connection (501 FRAME_ERROR)
and must be detected before anything is dispatched. Complete frames are
sliced out of one ``bytearray`` and the consumed prefix is dropped once per
``feed`` call, not once per frame. A publish is three frames; when its header and
body have arrived with it, ``feed`` hands the three over as one item
(``FRAME_PUBLISH``), so the hot path pays one dispatch per message, not three.

The connection reads frames with ``append``, ``next_frame`` and ``compact`` rather than
through ``feed``'s generator: the frame's type is the return value and its channel and
payloads are left on the buffer, so a frame costs no generator resume and no tuple.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from typing import Any

from leveret.model.errors import FRAME_ERROR, ConnectionError_

try:  # Compiled, ``cython.compiled`` is true at compile time; pure, Cython's shadow says False.
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

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
# Not a frame type: ``next_frame`` returns it when no complete frame is buffered.
NO_FRAME = 0
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
# The constants the frame reader compares with, again under names that frames.pxd makes C
# integers when compiled (a module's public names stay Python objects there).
_METHOD, _HEADER, _BODY, _HEARTBEAT = FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT
_PUBLISH, _NONE, _END = FRAME_PUBLISH, NO_FRAME, FRAME_END
_HEAD, _OVERHEAD = FRAME_HEADER_SIZE, FRAME_OVERHEAD


def erlang_binary(data: bytes | bytearray) -> str:
    """Bytes as RabbitMQ (Erlang's ``~p``) prints them in error texts: ``<<"abc">>`` or ``<<0,40>>``."""
    if data and all(32 <= b < 127 for b in data):
        text = bytes(data).decode("ascii").replace("\\", "\\\\").replace('"', '\\"')
        return f'<<"{text}">>'
    return "<<" + ",".join(str(b) for b in data) + ">>"


def _read_head(p: bytes | bytearray, at: int) -> tuple[int, int, int]:
    """The head of the frame at ``at``: type, channel, size. Compiled (``frames.pxd``), an
    inline C function over the buffer's pointer, its seven bytes read as C; pure Python
    calls ``_unpack_head`` instead (one ``unpack_from`` is cheaper there than these lines)."""
    size: int = p[at + 3]  # widened before the shift: a size with its top bit set is unsigned
    return (p[at], p[at + 1] << 8 | p[at + 2],
            size << 24 | p[at + 4] << 16 | p[at + 5] << 8 | p[at + 6])


class FrameBuffer:
    """Accumulates bytes and yields complete frames; ``frame_max`` bounds their size."""

    __slots__ = ("_at", "_buf", "_skip", "body", "channel", "frame_max", "header", "payload")

    def __init__(self, frame_max: int = INITIAL_FRAME_MAX) -> None:
        self._buf = bytearray()
        self._skip = 0  # feed_closing: bytes of a skipped frame still to come
        self._at = 0  # next_frame: where the next frame starts in the buffer
        self.frame_max = frame_max
        # The last frame's channel and payload (a FRAME_PUBLISH: the method's) ...
        self.channel = 0
        self.payload = b""
        # ... and for a FRAME_PUBLISH, the content header's and the body's payloads.
        self.header = b""
        self.body = b""

    def __len__(self) -> int:
        return len(self._buf)

    @property
    def content(self) -> tuple[bytes, bytes]:
        """The content header's and the body's payloads of the last FRAME_PUBLISH item."""
        return self.header, self.body

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
        self.append(data)
        try:
            while True:
                ftype = self.next_frame()
                if ftype == NO_FRAME:
                    return
                yield ftype, self.channel, self.payload
        finally:
            self.compact()

    def append(self, data: bytes) -> None:
        """Add ``data`` behind what is buffered; ``next_frame`` then reads from the start."""
        self._buf += data
        self._at = 0

    def compact(self) -> None:
        """Drop the frames ``next_frame`` has returned (once per read, not per frame)."""
        if self._at:
            del self._buf[:self._at]
            self._at = 0

    def next_frame(self) -> int:
        """The next complete frame's type (``FRAME_PUBLISH`` for a publish with its
        content), its channel and payload left in ``channel`` and ``payload``; else
        ``NO_FRAME``. The same checks and errors as ``feed``.

        Compiled (``frames.pxd``), ``p`` is a C pointer into the buffer: its bytes are read
        as C and a payload is copied straight into a new ``bytes``; pure, ``p`` is
        the bytearray and the same lines index and slice it. The head is read byte by byte
        compiled (``_read_head``), and with one ``unpack_from`` pure."""
        buf = self._buf
        pos = self._at
        avail = len(buf)
        if avail - pos < _HEAD:
            return _NONE
        # Any: compiled, a slice of it is a bytes; pure, a bytearray (then copied to one).
        p: Any = buf
        if COMPILED:
            ftype, channel, size = _read_head(p, pos)
        else:
            ftype, channel, size = _unpack_head(buf, pos)
        limit = self.frame_max
        if limit and size + _HEAD + 1 > limit:
            raise ConnectionError_(
                FRAME_ERROR,
                f"type {ftype}, all octets = <<>>: "
                f"{{frame_too_large,{size},{limit - _HEAD - 1}}}",
            )
        start = pos + _HEAD
        stop = start + size
        if stop >= avail:
            return _NONE
        if p[stop] != _END:
            raise ConnectionError_(
                FRAME_ERROR,
                f"type {ftype}, first 16 octets = "
                f"{erlang_binary(buf[start:min(stop, start + 16)])}"
                f": {{invalid_frame_end_marker,{buf[stop]}}}",
            )
        self.channel = channel
        if (ftype == _METHOD and size >= _PUBLISH_MIN and p[pos + 8] == 60
                and p[pos + 10] == 40 and not p[pos + 7] and not p[pos + 9]):
            body = self._content(buf, stop + 1, channel)
            if body:  # _content moved _at past the body frame
                if COMPILED:  # a slice of the C pointer is a new bytes already
                    self.header = p[stop + 1 + _HEAD : body - 1]
                    self.body = p[body + _HEAD : self._at - 1]
                    self.payload = p[start:stop]
                else:
                    self.header = bytes(p[stop + 1 + _HEAD : body - 1])
                    self.body = bytes(p[body + _HEAD : self._at - 1])
                    self.payload = bytes(p[start:stop])
                return _PUBLISH
        if ftype != _METHOD and ftype != _HEADER and ftype != _BODY \
                and ftype != _HEARTBEAT:
            # Checked on the whole frame, as RabbitMQ: the text does not depend
            # on how much of the stream had arrived.
            raise ConnectionError_(
                FRAME_ERROR,
                f"type {ftype}, all octets = {erlang_binary(bytes(p[start:stop]))}: "
                "unknown_frame",
            )
        self.payload = p[start:stop] if COMPILED else bytes(p[start:stop])
        self._at = stop + 1
        return ftype

    def _content(self, buf: bytearray, at: int, channel: int) -> int:
        """Where the body frame starts, if the frames from ``at`` (after a basic.publish)
        are a content header and one body frame of its announced size on ``channel``,
        complete and well framed (``_at`` then moves past the body frame); else 0 (they go
        one by one, through every check of ``feed``)."""
        end = len(buf)
        if end - at < _HEAD + _HEADER_MIN:
            return 0
        p = buf
        if COMPILED:
            ftype, number, size = _read_head(p, at)
        else:
            ftype, number, size = _unpack_head(buf, at)
        limit = self.frame_max
        stop = at + _HEAD + size
        if (ftype != _HEADER or number != channel
                or size < _HEADER_MIN or stop >= end or p[stop] != _END
                or (limit and size + _OVERHEAD > limit)):
            return 0
        if COMPILED:
            body_size = 0
            for i in range(at + _HEAD + 4, at + _HEAD + 12):
                body_size = body_size << 8 | p[i]
        else:
            (body_size,) = _unpack_u64(buf, at + _HEAD + 4)
        at = stop + 1
        if not body_size or end - at < _HEAD:
            return 0
        if COMPILED:
            ftype, number, size = _read_head(p, at)
        else:
            ftype, number, size = _unpack_head(buf, at)
        stop = at + _HEAD + size
        if (ftype != _BODY or number != channel
                or size != body_size or stop >= end or p[stop] != _END
                or (limit and size + _OVERHEAD > limit)):
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
