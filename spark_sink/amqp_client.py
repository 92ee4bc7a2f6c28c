"""A small blocking AMQP 0-9-1 client: one connection, one channel, bulk I/O.

Theory of operation
-------------------
The Spark bridge calls the broker from plain synchronous code (Spark invokes
the reader's and writer's methods one at a time), so this client is a socket,
a receive buffer and a frame loop, with no event loop or thread. The
handshake and the rare methods go through pamqp; the hot frames through
:mod:`wire`. Two things make it fast where naive clients are not:

* **bulk reads**: ``recv`` takes up to ``RECV_SIZE`` bytes at a time and every
  complete frame in it is parsed before the next system call, so a full
  prefetch window of deliveries costs a handful of ``recv`` calls;
* **pipelined writes**: publishes are appended to an output buffer flushed in
  ``FLUSH_BYTES`` chunks, and publisher confirms are collected as they come
  (``multiple=true`` settles a range), up to ``window`` unconfirmed messages.

* **raw deliveries** (``raw_deliveries=True``, the streaming source's driver):
  a delivered message is kept as the bytes of its frames (method, content
  header, body), one ``bytes`` slice and its delivery tag, without decoding
  the method, the properties or copying the body apart. The driver only
  numbers, holds and ships them; the executors decode them
  (:class:`.deliveries.RawMessages`), in parallel and off the driver's one core.

It speaks only what the bridge needs (declare, qos, consume, ack, confirm
mode, publish, returns) and works against Leveret and RabbitMQ alike.
Heartbeats are turned off (we propose 0): the bridge's connections are either
busy or closed, and a blocked Spark task would otherwise miss beats.
"""

from __future__ import annotations

import select
import socket
import struct
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from . import wire

RECV_SIZE = 1 << 20  # one recv takes up to ~1,000 1 KB deliveries
FLUSH_BYTES = 1 << 18  # publishes are written in chunks of about this size
PUBLISH_OVERHEAD = 64  # method + header frame bytes besides properties and body (about)
DEFAULT_FRAME_MAX = 131072
CHANNEL = 1
_DELIVER_ID = wire.BASIC_DELIVER.to_bytes(4, "big")
_U64 = struct.Struct(">Q")
_HEADER_BODY_SIZE_END = 12  # class id (2), weight (2), body size (8)
CLIENT_PROPERTIES: dict[str, Any] = {
    "product": "leveret-spark",
    "capabilities": {
        "publisher_confirms": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
    },
}


class AmqpError(Exception):
    """The broker closed the channel or connection (reply code and text as sent)."""

    def __init__(self, reply_code: int, reply_text: str, where: str = "channel") -> None:
        super().__init__(f"{where} closed by broker: {reply_code} {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text


# (delivery tag, the message's Basic.Deliver, content header and body frames); a plain
# tuple, as building a NamedTuple costs the driver about 0.4 us a message.
RawDelivery = tuple[int, bytes]


class Delivery(NamedTuple):
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    raw_properties: bytes  # property flags + list, as the publisher sent them
    body: bytes


@dataclass
class Returned:
    reply_code: int
    reply_text: str
    exchange: str
    routing_key: str


@dataclass
class ConfirmState:
    """Publisher-confirm bookkeeping: which publish sequence numbers are settled."""

    published: int = 0  # highest sequence number sent
    settled_upto: int = 0  # every seq <= this is acked or nacked
    singles: set[int] = field(default_factory=set)  # settled above settled_upto
    nacked: int = 0

    def settle(self, tag: int, multiple: bool, nack: bool) -> None:
        if multiple:
            if nack:
                self.nacked += max(0, tag - self.settled_upto) - sum(
                    1 for s in self.singles if s <= tag
                )
            self.settled_upto = max(self.settled_upto, tag)
            self.singles = {s for s in self.singles if s > tag}
        else:
            self.nacked += nack
            self.singles.add(tag)
        while self.settled_upto + 1 in self.singles:
            self.settled_upto += 1
            self.singles.discard(self.settled_upto)

    @property
    def outstanding(self) -> int:
        return self.published - self.settled_upto - len(self.singles)


def parse_url(url: str) -> dict[str, Any]:
    """``amqp://user:pass@host:port/vhost`` (vhost percent-encoded, default ``/``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("amqp", ""):
        raise ValueError(f"only amqp:// URLs are supported, got {url!r}")
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return {
        "host": parts.hostname or "localhost",
        "port": parts.port or 5672,
        "user": urllib.parse.unquote(parts.username or "guest"),
        "password": urllib.parse.unquote(parts.password or "guest"),
        "vhost": urllib.parse.unquote(path) if path else "/",
    }


class Connection:
    """One AMQP connection with a single channel (number 1)."""

    def __init__(self, url: str, timeout: float = 30.0, raw_deliveries: bool = False) -> None:
        self.params = parse_url(url)
        self.raw_deliveries = raw_deliveries  # deliveries go to ``raw``, undecoded
        self.timeout = timeout
        self.frame_max = DEFAULT_FRAME_MAX
        self.sock: socket.socket | None = None
        self._inbuf = bytearray()
        self._out: list[bytes | memoryview] = []
        self._out_size = 0
        self._replies: deque[Any] = deque()
        self.deliveries: deque[Delivery] = deque()
        self.raw: deque[RawDelivery] = deque()
        self.returned: list[Returned] = []
        self.confirms: ConfirmState | None = None
        self._content: list[Any] | None = None  # [kind, method info, props, size, chunks]
        self._publish_prefix: dict[tuple[str, str, bool], bytes] = {}
        self.consumer_tag: str | None = None

    # --- lifecycle -------------------------------------------------------------

    def open(self) -> Connection:
        p = self.params
        self.sock = socket.create_connection((p["host"], p["port"]), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(pframe.marshal(pheader.ProtocolHeader(), 0))
        start = self._wait_reply(commands.Connection.Start)
        mechanisms = start.mechanisms
        if "PLAIN" not in (mechanisms.decode() if isinstance(mechanisms, bytes) else mechanisms):
            raise AmqpError(403, "broker does not offer PLAIN authentication", "connection")
        self._send_method(
            commands.Connection.StartOk(
                client_properties=CLIENT_PROPERTIES,
                mechanism="PLAIN",
                response=f"\0{p['user']}\0{p['password']}",
                locale="en_US",
            ),
            channel=0,
        )
        tune = self._wait_reply(commands.Connection.Tune)
        self.frame_max = min(tune.frame_max or DEFAULT_FRAME_MAX, DEFAULT_FRAME_MAX)
        self._send_method(
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=self.frame_max, heartbeat=0
            ),
            channel=0,
        )
        self._send_method(commands.Connection.Open(virtual_host=p["vhost"]), channel=0)
        self._wait_reply(commands.Connection.OpenOk)
        self.rpc(commands.Channel.Open(), commands.Channel.OpenOk)
        return self

    def close(self) -> None:
        """Close politely if possible; unacked deliveries go back to their queues."""
        sock, self.sock = self.sock, None
        if sock is None:
            return
        try:
            sock.settimeout(2.0)
            sock.sendall(
                pframe.marshal(commands.Connection.Close(200, "bye", 0, 0), 0)
            )
            deadline_reads = 64
            while deadline_reads:
                deadline_reads -= 1
                data = sock.recv(RECV_SIZE)
                if not data or b"\x00\x0a\x00\x33" in data:  # Connection.CloseOk
                    break
        except OSError:
            pass
        finally:
            sock.close()

    def __enter__(self) -> Connection:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- synchronous methods -----------------------------------------------------

    def rpc(self, method: Any, reply: type) -> Any:
        self._send_method(method)
        return self._wait_reply(reply)

    def queue_declare(self, queue: str, passive: bool = False, durable: bool = True,
                      arguments: dict[str, Any] | None = None) -> Any:
        return self.rpc(
            commands.Queue.Declare(queue=queue, passive=passive, durable=durable,
                                   arguments=arguments or {}),
            commands.Queue.DeclareOk,
        )

    def exchange_declare(self, exchange: str, kind: str = "direct", durable: bool = True) -> None:
        self.rpc(
            commands.Exchange.Declare(exchange=exchange, exchange_type=kind, durable=durable),
            commands.Exchange.DeclareOk,
        )

    def queue_bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        self.rpc(
            commands.Queue.Bind(queue=queue, exchange=exchange, routing_key=routing_key),
            commands.Queue.BindOk,
        )

    def queue_delete(self, queue: str) -> None:
        self.rpc(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)

    def qos(self, prefetch_count: int) -> None:
        self.rpc(commands.Basic.Qos(prefetch_count=prefetch_count), commands.Basic.QosOk)

    def consume(self, queue: str, arguments: dict[str, Any] | None = None) -> str:
        ok = self.rpc(commands.Basic.Consume(queue=queue, arguments=arguments or {}),
                      commands.Basic.ConsumeOk)
        self.consumer_tag = ok.consumer_tag
        return str(ok.consumer_tag)

    def confirm_select(self) -> None:
        self.rpc(commands.Confirm.Select(), commands.Confirm.SelectOk)
        self.confirms = ConfirmState()

    # --- consuming -----------------------------------------------------------------

    def ack(self, delivery_tag: int, multiple: bool = True) -> None:
        self._write(wire.encode_ack(CHANNEL, delivery_tag, multiple))
        self.flush()

    def pump(self, timeout: float | None) -> bool:
        """Read what the socket has (waiting up to ``timeout`` for the first byte).

        Returns whether anything was read. ``timeout=0`` only takes what is there.
        """
        assert self.sock is not None, "connection is not open"
        self.flush()
        if timeout is not None:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return False
        self.sock.settimeout(self.timeout)
        data = self.sock.recv(RECV_SIZE)
        if not data:
            raise AmqpError(320, "connection closed by the broker (socket EOF)", "connection")
        self._feed(data)
        return True

    # --- publishing ----------------------------------------------------------------

    def publish(
        self,
        exchange: str,
        routing_key: str,
        raw_properties: bytes,
        body: bytes,
        mandatory: bool = False,
    ) -> None:
        """Queue one publish; written in chunks, confirmed asynchronously."""
        prefix = self.publish_prefix(exchange, routing_key, mandatory)
        self._out.extend(wire.encode_publish(prefix, CHANNEL, raw_properties, body, self.frame_max))
        self._out_size += len(body) + len(raw_properties) + PUBLISH_OVERHEAD
        if self.confirms is not None:
            self.confirms.published += 1
        if self._out_size >= FLUSH_BYTES:
            self.flush()

    def publish_prefix(self, exchange: str, routing_key: str, mandatory: bool = False) -> bytes:
        """The Basic.Publish method frame for this channel (cached)."""
        key = (exchange, routing_key, mandatory)
        prefix = self._publish_prefix.get(key)
        if prefix is None:
            if len(self._publish_prefix) > 10000:
                self._publish_prefix.clear()
            prefix = self._publish_prefix[key] = wire.publish_prefix(
                CHANNEL, exchange, routing_key, mandatory
            )
        return prefix

    def publish_encoded(self, frames: bytes | memoryview, count: int) -> None:
        """Queue ``count`` publishes already encoded as ``frames`` (the method frames from
        :meth:`publish_prefix`, joined with :func:`wire.encode_publishes`): a batch of rows
        costs one join and no call per message."""
        self._out.append(frames)
        self._out_size += len(frames)
        if self.confirms is not None:
            self.confirms.published += count
        if self._out_size >= FLUSH_BYTES:
            self.flush()

    def wait_window(self, window: int) -> None:
        """Block until at most ``window`` publishes are unconfirmed."""
        assert self.confirms is not None, "confirm_select() first"
        self.flush()
        while self.confirms.outstanding > window:
            if not self.pump(self.timeout):
                raise TimeoutError(
                    f"no publisher confirm within {self.timeout}s "
                    f"({self.confirms.outstanding} outstanding)"
                )
        # Take confirms that already arrived without blocking, to keep the window open.
        while self.pump(0):
            pass

    # --- internals -----------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)

    def flush(self) -> None:
        if self._out and self.sock is not None:
            # One buffer (a chunk of encoded publishes) goes out as it is, without a copy.
            data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self._out_size = 0
            self.sock.settimeout(self.timeout)
            self._sendall_reading(data)

    def _sendall_reading(self, data: bytes | memoryview) -> None:
        """sendall that keeps reading, so neither side blocks on a full socket buffer."""
        assert self.sock is not None
        view = memoryview(data)
        while view:
            readable, writable, _ = select.select([self.sock], [self.sock], [], self.timeout)
            if not readable and not writable:
                raise TimeoutError(f"socket not writable within {self.timeout}s")
            if readable:
                chunk = self.sock.recv(RECV_SIZE)
                if not chunk:
                    raise AmqpError(320, "connection closed by the broker", "connection")
                self._feed(chunk)
            if writable:
                sent = self.sock.send(view[: 1 << 18])
                view = view[sent:]

    def _send_method(self, method: Any, channel: int = CHANNEL) -> None:
        self._write(pframe.marshal(method, channel))
        self.flush()

    def _wait_reply(self, reply: type) -> Any:
        while not self._replies:
            if not self.pump(self.timeout):
                raise TimeoutError(f"no {reply.__name__} within {self.timeout}s")
        got = self._replies.popleft()
        if not isinstance(got, reply):
            raise AmqpError(504, f"expected {reply.__name__}, got {type(got).__name__}")
        return got

    def _feed(self, data: bytes) -> None:
        buf = self._inbuf
        buf += data
        pos = 0
        end = len(buf)
        unpack = wire.FRAME_HEADER_STRUCT.unpack_from
        raw = self.raw_deliveries
        view = memoryview(buf)
        try:
            while end - pos >= 7:
                ftype, channel, size = unpack(buf, pos)
                stop = pos + 7 + size
                if stop >= end:
                    break
                if buf[stop] != wire.FRAME_END:
                    raise AmqpError(501, "frame end octet missing", "connection")
                if raw and ftype == wire.FRAME_METHOD and buf[pos + 7 : pos + 11] == _DELIVER_ID:
                    taken = self._take_raw(buf, view, pos, stop + 1, end)
                    if taken == pos:
                        break  # the rest of this message has not arrived yet
                    pos = taken
                    continue
                if ftype == wire.FRAME_BODY:
                    self._on_body(bytes(view[pos + 7 : stop]))
                elif ftype == wire.FRAME_METHOD:
                    self._on_method(channel, view[pos + 7 : stop], view[pos : stop + 1])
                elif ftype == wire.FRAME_HEADER:
                    self._on_header(view[pos + 7 : stop])
                pos = stop + 1
        finally:
            view.release()
            del buf[:pos]

    def _take_raw(self, buf: bytearray, view: memoryview, pos: int, at: int, end: int) -> int:
        """Keep the whole message starting at ``pos`` (its method frame ends before ``at``)
        as one ``RawDelivery``; returns where the next frame starts, or ``pos`` if
        the message is not complete in ``buf`` yet."""
        unpack = wire.FRAME_HEADER_STRUCT.unpack_from
        if end - at < 7 + _HEADER_BODY_SIZE_END:
            return pos
        ftype, _channel, size = unpack(buf, at)
        if ftype != wire.FRAME_HEADER:
            raise AmqpError(505, f"expected a content header after Basic.Deliver, got frame "
                            f"type {ftype}", "connection")
        (remaining,) = _U64.unpack_from(buf, at + 11)  # class id, weight, then body size
        at += 8 + size
        while remaining > 0:
            if end - at < 7:
                return pos
            ftype, _channel, size = unpack(buf, at)
            if ftype != wire.FRAME_BODY:
                raise AmqpError(505, f"expected a content body frame, got frame type {ftype}",
                                "connection")
            remaining -= size
            at += 8 + size
        if at > end:
            return pos
        (tag,) = _U64.unpack_from(buf, pos + 12 + buf[pos + 11])  # after the consumer tag
        self.raw.append((tag, bytes(view[pos:at])))
        return at

    def _on_method(self, channel: int, payload: memoryview, whole: memoryview) -> None:
        mid = wire.method_id(payload)
        if mid == wire.BASIC_DELIVER:
            tag, redelivered, exchange, rk = wire.decode_deliver(payload)
            self._content = ["deliver", (tag, redelivered, exchange, rk), b"", 0, []]
            return
        if mid in (wire.BASIC_ACK, wire.BASIC_NACK) and self.confirms is not None:
            tag, multiple = wire.decode_confirm(payload)
            self.confirms.settle(tag, multiple, nack=mid == wire.BASIC_NACK)
            return
        _, _, method = pframe.unmarshal(bytes(whole))
        if isinstance(method, commands.Basic.Return):
            info = Returned(method.reply_code or 0, method.reply_text or "",
                            method.exchange or "", method.routing_key or "")
            self._content = ["return", info, b"", 0, []]
        elif isinstance(method, commands.Channel.Close):
            self._write(pframe.marshal(commands.Channel.CloseOk(), channel))
            raise AmqpError(method.reply_code or 0, method.reply_text or "", "channel")
        elif isinstance(method, commands.Connection.Close):
            self._write(pframe.marshal(commands.Connection.CloseOk(), 0))
            raise AmqpError(method.reply_code or 0, method.reply_text or "", "connection")
        elif isinstance(method, commands.Basic.Cancel):
            raise AmqpError(313, f"consumer {method.consumer_tag} cancelled by the broker")
        elif isinstance(method, (commands.Connection.Blocked, commands.Connection.Unblocked)):
            pass  # the broker stops reading our socket while blocked; writes just wait
        else:
            self._replies.append(method)

    def _on_header(self, payload: memoryview) -> None:
        content = self._content
        if content is None:
            raise AmqpError(505, "content header without a method", "connection")
        size, props = wire.decode_content_header(payload)
        content[2] = props
        content[3] = size
        if size == 0:
            self._finish_content(b"")

    def _on_body(self, chunk: bytes) -> None:
        content = self._content
        if content is None:
            raise AmqpError(505, "content body without a method", "connection")
        if not content[4] and len(chunk) == content[3]:
            self._finish_content(chunk)
            return
        content[4].append(chunk)
        if sum(map(len, content[4])) >= content[3]:
            self._finish_content(b"".join(content[4]))

    def _finish_content(self, body: bytes) -> None:
        content = self._content
        assert content is not None
        self._content = None
        if content[0] == "deliver":
            tag, redelivered, exchange, rk = content[1]
            self.deliveries.append(Delivery(tag, redelivered, exchange, rk, content[2], body))
        else:
            self.returned.append(content[1])
