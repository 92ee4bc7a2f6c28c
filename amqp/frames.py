"""Frame buffer: turns a byte stream into (type, channel, payload) frames.

A frame is ``type:u8 channel:u16 size:u32 payload[size] 0xCE``. The buffer
never decodes payloads (that is the codec's job); it only checks the framing
itself, because a framing error is fatal to the connection (501 FRAME_ERROR)
and must be detected before anything is dispatched. Complete frames are
sliced out of one ``bytearray`` and the consumed prefix is dropped once per
``feed`` call, not once per frame.
"""

from __future__ import annotations

import struct

from leveret.amqp.errors import FRAME_ERROR, ConnectionError_

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_HEADER_SIZE = 7
FRAME_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))

# Before connection.tune-ok the peer may not send frames larger than this (RabbitMQ's initial_frame_max).
INITIAL_FRAME_MAX = 8192

_frame_head = struct.Struct(">BHI")


class FrameBuffer:
    """Accumulates bytes and yields complete frames; ``frame_max`` bounds their size."""

    __slots__ = ("_buf", "frame_max")

    def __init__(self, frame_max: int = INITIAL_FRAME_MAX) -> None:
        self._buf = bytearray()
        self.frame_max = frame_max

    def __len__(self) -> int:
        return len(self._buf)

    def take(self, n: int) -> bytes:
        """Remove and return the first ``n`` buffered bytes (used for the protocol header)."""
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """Add ``data``; return every frame now complete, in order.

        Raises ``ConnectionError_(FRAME_ERROR)`` on a bad type, an oversized
        frame or a missing end octet; frames before the bad one are returned
        first by the caller's loop only if it processes them: callers should
        treat the exception as terminating the stream.
        """
        buf = self._buf
        buf += data
        frames: list[tuple[int, int, bytes]] = []
        pos = 0
        end = len(buf)
        limit = self.frame_max
        while end - pos >= FRAME_HEADER_SIZE:
            ftype, channel, size = _frame_head.unpack_from(buf, pos)
            if ftype not in FRAME_TYPES:
                del buf[:pos]
                raise ConnectionError_(
                    FRAME_ERROR, f"type {ftype}, first 16 octets = {bytes(buf[:16])!r}: unknown frame type"
                )
            if limit and size + FRAME_HEADER_SIZE + 1 > limit:
                del buf[:pos]
                raise ConnectionError_(
                    FRAME_ERROR,
                    f"type {ftype}, all octets = <<>>: frame_too_large, {size} > {limit - FRAME_HEADER_SIZE - 1}",
                )
            stop = pos + FRAME_HEADER_SIZE + size
            if stop >= end:
                break
            if buf[stop] != FRAME_END:
                del buf[:pos]
                raise ConnectionError_(
                    FRAME_ERROR, f"type {ftype}, invalid frame end octet {buf[stop]:#04x}"
                )
            frames.append((ftype, channel, bytes(buf[pos + FRAME_HEADER_SIZE : stop])))
            pos = stop + 1
        if pos:
            del buf[:pos]
        return frames
