"""A tiny in-memory AMQP client that drives a sans-IO ``Connection``.

No sockets and no event loop: the client marshals frames with pamqp, feeds
them to ``Connection.receive_data`` (in one chunk, or byte by byte when
``byte_by_byte`` is set, to prove the core does not care how the stream is
cut), and parses everything ``data_to_send()`` returns back into pamqp
frame objects. ``wire_out`` keeps the raw server bytes so two runs can be
compared byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pamqp import body as pbody
from pamqp import commands, frame
from pamqp import header as pheader
from pamqp.exceptions import UnmarshalingException

from leveret.amqp.connection import Connection
from leveret.broker.broker import Broker
from leveret.config import Config

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HARD_ERROR_CODES = frozenset({320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541})

Frame = tuple[int, Any]  # (channel, pamqp frame object)


def parse_frames(data: bytes) -> list[Frame]:
    """Every frame in ``data``; raises ``AssertionError`` on trailing garbage or bad framing."""
    frames: list[Frame] = []
    pos = 0
    while pos < len(data):
        try:
            used, channel, obj = frame.unmarshal(data[pos:])
        except UnmarshalingException as exc:
            relayed = _relayed_header(data, pos, exc)
            if relayed is not None:
                used, channel, obj = relayed
                frames.append((channel, obj))
                pos += used
                continue
            raise AssertionError(f"server wrote a malformed frame at {pos}: {exc}; "
                                 f"{data[pos:pos + 32]!r}") from exc
        frames.append((channel, obj))
        pos += used
    return frames


def _relayed_header(data: bytes, pos: int, exc: Exception) -> tuple[int, int, Any] | None:
    """A content header pamqp refuses only because a shortstr is not UTF-8.

    AMQP's shortstr is bytes and RabbitMQ relays such properties unchanged (so does Leveret);
    pamqp decodes them as UTF-8. The frame's framing is still checked here: its size and
    frame-end octet; its properties are not returned."""
    if data[pos] != 2 or not isinstance(exc.__cause__ or exc.__context__, UnicodeDecodeError):
        return None
    size = int.from_bytes(data[pos + 3:pos + 7], "big")
    end = pos + 7 + size
    if end >= len(data) or data[end] != 0xCE or size < 14:
        return None
    channel = int.from_bytes(data[pos + 1:pos + 3], "big")
    body_size = int.from_bytes(data[pos + 11:pos + 19], "big")
    return end + 1 - pos, channel, pheader.ContentHeader(0, body_size, commands.Basic.Properties())


def content_frames(channel: int, body: bytes, frame_max: int = 131072,
                   properties: commands.Basic.Properties | None = None) -> bytes:
    """Content header + body frames for ``body``, split as a client must by ``frame_max``."""
    props = properties or commands.Basic.Properties()
    out = [frame.marshal(pheader.ContentHeader(0, len(body), props), channel)]
    chunk = frame_max - 8
    for start in range(0, len(body), chunk):
        out.append(frame.marshal(pbody.ContentBody(body[start:start + chunk]), channel))
    return b"".join(out)


class Client:
    """Drives one ``Connection``; every ``send`` returns the frames the server wrote."""

    def __init__(
        self,
        broker: Broker | None = None,
        config: Config | None = None,
        byte_by_byte: bool = False,
        clock: Callable[[], float] | None = None,
        peer: tuple[str, int] = ("127.0.0.1", 5000),
    ) -> None:
        self.config = config or Config()
        self.broker = broker or Broker(self.config)
        self.byte_by_byte = byte_by_byte
        kwargs: dict[str, Any] = {"peer": peer, "on_output": self._on_output}
        if clock is not None:
            kwargs["clock"] = clock
        self.conn = Connection(self.broker, self.config, **kwargs)
        self.frame_max = 131072
        self.wire_out = bytearray()  # everything the server wrote, in order
        self.chunks: list[bytes] = []  # one entry per data_to_send() call that returned bytes
        self.output_signals = 0

    def _on_output(self) -> None:
        self.output_signals += 1

    # -- raw I/O ----------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self.byte_by_byte:
            for i in range(len(data)):
                self.conn.receive_data(data[i:i + 1])
        else:
            self.conn.receive_data(data)
        while self.conn.input_pending:  # what the asyncio adapter does on the next turns
            self.conn.receive_data(b"")

    def drain_raw(self) -> bytes:
        out = b"".join(self.conn.data_to_send())
        if out:
            self.chunks.append(out)
            self.wire_out += out
        return out

    def drain(self) -> list[Frame]:
        out = self.drain_raw()
        if out == PROTOCOL_HEADER:
            return [(0, pheader.ProtocolHeader())]
        return parse_frames(out)

    def send(self, data: bytes) -> list[Frame]:
        """Feed ``data`` and return every frame the server wrote in reply."""
        self.feed(data)
        return self.drain()

    # -- helpers ----------------------------------------------------------------

    @staticmethod
    def method(channel: int, cmd: Any) -> bytes:
        return frame.marshal(cmd, channel)

    def call(self, channel: int, cmd: Any) -> list[Frame]:
        return self.send(self.method(channel, cmd))

    def publish_bytes(self, channel: int, body: bytes, exchange: str = "",
                      routing_key: str = "", mandatory: bool = False,
                      properties: commands.Basic.Properties | None = None) -> bytes:
        return (self.method(channel, commands.Basic.Publish(exchange=exchange,
                                                            routing_key=routing_key,
                                                            mandatory=mandatory))
                + content_frames(channel, body, self.frame_max, properties))

    def publish(self, channel: int, body: bytes, exchange: str = "", routing_key: str = "",
                **kw: Any) -> list[Frame]:
        return self.send(self.publish_bytes(channel, body, exchange, routing_key, **kw))

    def handshake(self, frame_max: int = 0, heartbeat: int = 0, channel_max: int = 0,
                  vhost: str = "/") -> list[Frame]:
        """Protocol header → start-ok (PLAIN guest/guest) → tune-ok → open; all replies."""
        frames = self.send(PROTOCOL_HEADER)
        frames += self.call(0, commands.Connection.StartOk(
            client_properties={"product": "wire", "capabilities": {
                "consumer_cancel_notify": True, "publisher_confirms": True}},
            mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))
        fm = frame_max or self.config.frame_max
        self.frame_max = fm
        frames += self.call(0, commands.Connection.TuneOk(
            channel_max=channel_max or self.config.channel_max, frame_max=fm,
            heartbeat=heartbeat))
        frames += self.call(0, commands.Connection.Open(virtual_host=vhost))
        assert isinstance(frames[-1][1], commands.Connection.OpenOk), frames
        return frames

    def open_channel(self, channel: int = 1) -> list[Frame]:
        frames = self.call(channel, commands.Channel.Open())
        assert [type(f) for _, f in frames] == [commands.Channel.OpenOk], frames
        return frames
