"""The load generator's AMQP 0-9-1 connection: a raw asyncio ``Protocol`` (``Conn``).

pamqp encodes and decodes the handshake and the rare frames (declares, binds, closes); the
hot frames are walked by hand in ``loadgen_peers``, with the frame layouts named here. A
client of our own, not pika or aiormq, so that the load generator's CPU per message stays
well under the broker's and the figures measure the broker, not the client.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys

import pamqp.commands as cmd
import pamqp.frame
import pamqp.header

FRAME_END = 0xCE
FRAME_HEADER = struct.Struct(">BHI")  # frame type, channel, payload size
CLASS_METHOD = struct.Struct(">I")  # class-id << 16 | method-id
U64 = struct.Struct(">Q")
# type=1 (method), channel, size=13, class 60, method 80 (Basic.Ack), tag, multiple, frame-end
ACK_FRAME = struct.Struct(">BHIHHQBB")
BASIC_DELIVER = (60 << 16) | 60
CONN_BLOCKED = (10 << 16) | 60
CONN_UNBLOCKED = (10 << 16) | 61

CLIENT_PROPERTIES = {
    "product": "leveret-bench-loadgen",
    "platform": "Python " + sys.version.split()[0],
    "capabilities": {
        "basic.nack": True,
        "publisher_confirms": True,
        "consumer_cancel_notify": True,
        "connection.blocked": True,
        "authentication_failure_close": True,
    },
}


class BrokerClosed(Exception):
    """The broker closed the channel or connection (or the socket went away)."""


# ---------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------


class Conn(asyncio.Protocol):
    """One AMQP connection.  Slow path (pamqp) until ``fast`` is installed."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.fast = None  # callable(data: bytes) -> bytes (unconsumed tail)
        self.switch_on: type | None = None  # switch to `fast` right after this frame type
        self.switch_fast = None
        self.paused = False
        self._resume: asyncio.Future | None = None
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self.blocked = False
        self.server_properties: dict = {}
        self.frame_max = 131072

    # -- asyncio.Protocol -------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        if self.buf:
            data = self.buf + data
        if self.fast is not None:
            self.buf = self.fast(data)
        else:
            self.buf = self._slow(data)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)
        self._resume = None

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        self.inbox.put_nowait((0, BrokerClosed(f"connection lost: {exc!r}")))
        self.resume_writing()

    # -- slow path ---------------------------------------------------------
    def _slow(self, data: bytes) -> bytes:
        pos, n = 0, len(data)
        while n - pos >= 7:
            _t, _ch, size = FRAME_HEADER.unpack_from(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            self.slow_frame(data[pos:end])
            pos = end
            if self.fast is None and self.switch_fast is not None and self._switch_now:
                self.fast, self.switch_fast = self.switch_fast, None
                return self.fast(data[pos:])
        return data[pos:]

    _switch_now = False

    def slow_frame(self, raw: bytes) -> None:
        """Decode one complete frame with pamqp and hand it to ``expect``."""
        try:
            _n, ch, frame = pamqp.frame.unmarshal(raw)
        except Exception as exc:
            self.inbox.put_nowait((0, BrokerClosed(f"undecodable frame {raw[:32]!r}: {exc}")))
            return
        if isinstance(frame, cmd.Connection.Blocked):
            self.blocked = True
            return
        if isinstance(frame, cmd.Connection.Unblocked):
            self.blocked = False
            return
        if frame.__class__.__name__ == "Heartbeat":
            self.send(frame, 0)
            return
        if self.switch_on is not None and isinstance(frame, self.switch_on):
            self._switch_now = True
        self.inbox.put_nowait((ch, frame))

    # -- helpers -----------------------------------------------------------
    def send(self, frame, channel: int = 0) -> None:
        self.transport.write(pamqp.frame.marshal(frame, channel))

    async def expect(self, kind, timeout: float = 10.0):
        while True:
            ch, frame = await asyncio.wait_for(self.inbox.get(), timeout)
            if isinstance(frame, Exception):
                raise frame
            if isinstance(frame, cmd.Connection.Close):
                self.send(cmd.Connection.CloseOk(), 0)
                raise BrokerClosed(f"connection closed by broker: {frame.reply_code} {frame.reply_text}")
            if isinstance(frame, cmd.Channel.Close):
                self.send(cmd.Channel.CloseOk(), ch)
                raise BrokerClosed(f"channel {ch} closed by broker: {frame.reply_code} {frame.reply_text}")
            if isinstance(frame, kind):
                return frame
            # anything else on the slow path (e.g. Basic.CancelOk races) is ignored

    async def wait_writable(self) -> None:
        if self.paused:
            if self._resume is None:
                self._resume = asyncio.get_running_loop().create_future()
            await self._resume

    async def close(self, timeout: float = 3.0) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        try:
            self.send(cmd.Connection.Close(reply_code=200, reply_text="bye"), 0)
            await asyncio.wait_for(self.expect(cmd.Connection.CloseOk), timeout)
        except Exception:
            pass
        finally:
            self.transport.close()


async def connect(host: str, port: int, user: str, password: str, vhost: str = "/",
                  name: str = "loadgen") -> Conn:
    loop = asyncio.get_running_loop()
    _t, conn = await loop.create_connection(Conn, host, port)
    conn.transport.write(pamqp.header.ProtocolHeader().marshal())
    start = await conn.expect(cmd.Connection.Start)
    conn.server_properties = dict(start.server_properties or {})
    props = dict(CLIENT_PROPERTIES, connection_name=name)
    conn.send(cmd.Connection.StartOk(client_properties=props, mechanism="PLAIN",
                                     response=f"\0{user}\0{password}", locale="en_US"))
    tune = await conn.expect(cmd.Connection.Tune)
    conn.frame_max = tune.frame_max or 131072
    conn.send(cmd.Connection.TuneOk(channel_max=tune.channel_max or 2047,
                                    frame_max=conn.frame_max, heartbeat=0))
    conn.send(cmd.Connection.Open(virtual_host=vhost))
    await conn.expect(cmd.Connection.OpenOk)
    return conn


async def open_channel(conn: Conn, ch: int = 1) -> None:
    conn.send(cmd.Channel.Open(), ch)
    await conn.expect(cmd.Channel.OpenOk)


def as_text(v):
    return v.decode() if isinstance(v, bytes) else v


async def delete_queue(conn: Conn, qname: str, ch: int, timeout: float = 300.0) -> str:
    """Delete ``qname`` on a throwaway channel ``ch`` (closed afterwards).
    Idempotent: a 404 from a broker that refuses to delete a missing queue is fine.
    The timeout is long because RabbitMQ deletes 1M persistent messages slowly."""
    await open_channel(conn, ch)
    try:
        conn.send(cmd.Queue.Delete(queue=qname), ch)
        ok = await conn.expect(cmd.Queue.DeleteOk, timeout=timeout)
        conn.send(cmd.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), ch)
        await conn.expect(cmd.Channel.CloseOk, timeout=10)
        return f"deleted ({ok.message_count} messages)"
    except BrokerClosed as exc:  # channel closed by the broker (e.g. 404) - CloseOk sent
        return f"not deleted: {exc}"
