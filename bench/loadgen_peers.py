"""The load generator's hot paths: publishers and consumers on a ``Conn``.

* ``Publisher``: one pre-encoded ``basic.publish`` + header + body, repeated ``batch`` times
  into one ``bytes``; it writes whole batches and stops while the transport is paused
  (asyncio's write-buffer high-water mark: the same backpressure ``drain()`` waits for).
* ``ConfirmPublisher``: the same in confirm mode, with at most ``window`` publishes
  unconfirmed, and each confirm's latency.
* ``Consumer``: walks frame headers with ``struct.unpack_from``, looks inside
  ``basic.deliver`` only (for the delivery tag), skips content frames (or, with ``bodies``
  set, keeps each body with the time its read began), and acks with pre-packed
  ``basic.ack`` frames, one write per ``data_received``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time

import pamqp.commands as cmd
import pamqp.frame
import pamqp.header
from loadgen_client import (
    ACK_FRAME,
    BASIC_DELIVER,
    CLASS_METHOD,
    FRAME_END,
    FRAME_HEADER,
    U64,
    BrokerClosed,
    Conn,
)
from pamqp import body as pbody


def encode_publish(exchange: str, routing_key: str, body: bytes, channel: int = 1,
                   properties: cmd.Basic.Properties | None = None,
                   mandatory: bool = False) -> bytes:
    """Method + content header + body frame(s) of one publish, pre-encoded."""
    frames = [
        pamqp.frame.marshal(cmd.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                              mandatory=mandatory), channel),
        pamqp.frame.marshal(pamqp.header.ContentHeader(0, len(body),
                                                       properties or cmd.Basic.Properties()),
                            channel),
    ]
    if body:
        frames.append(pamqp.frame.marshal(pbody.ContentBody(body), channel))
    return b"".join(frames)


class Publisher:
    """Pipelined publisher writing pre-encoded batches, honouring backpressure."""

    def __init__(self, conn: Conn, one_msg: bytes, batch: int) -> None:
        self.conn = conn
        self.batch = batch
        self.payload = one_msg * batch
        self.published = 0
        self.stopped = False
        self.error: str | None = None
        self.gate = None  # optional async callable: awaited before each batch
        # Frames the broker sends on a publish-only connection (Channel.Close, ...)
        conn.fast = self._on_data

    def _on_data(self, data: bytes) -> bytes:
        pos, n = 0, len(data)
        while n - pos >= 7:
            _t, _ch, size = FRAME_HEADER.unpack_from(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            self.conn.slow_frame(data[pos:end])
            pos = end
        return data[pos:]

    async def run(self) -> None:
        conn, payload, batch = self.conn, self.payload, self.batch
        write = conn.transport.write
        sleep = asyncio.sleep
        try:
            while not self.stopped:
                if conn.paused:
                    await conn.wait_writable()
                    continue
                if self.gate is not None:
                    await self.gate()
                if conn.lost.done():
                    raise BrokerClosed("publisher connection lost")
                write(payload)
                self.published += batch
                await sleep(0)  # let the consumer's data_received run
        except Exception as exc:
            self.error = repr(exc)


class Consumer:
    """Counts deliveries on one channel; acks per PerfTest semantics."""

    def __init__(self, conn: Conn, channel: int, no_ack: bool, multi_ack_every: int) -> None:
        self.conn = conn
        self.channel = channel
        self.no_ack = no_ack
        self.multi_ack_every = multi_ack_every
        self.count = 0
        self.body_bytes = 0
        self.last_tag = 0
        self.unacked_since = 0  # deliveries since the last (multiple) ack
        self.waiter: tuple[int, asyncio.Future] | None = None  # (count threshold, future)
        # When a list: each body frame's bytes, with time.time() when its read began.
        self.bodies: list[tuple[float, bytes]] | None = None

    def install(self) -> None:
        """Switch the connection to the fast parser right after Basic.ConsumeOk."""
        self.conn.switch_on = cmd.Basic.ConsumeOk
        self.conn.switch_fast = self._on_data

    def wait_count(self, n: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if self.count >= n:
            fut.set_result(None)
        else:
            self.waiter = (n, fut)
        return fut

    def _on_data(self, data: bytes) -> bytes:
        bodies = self.bodies
        now = time.time() if bodies is not None else 0.0
        pos, n = 0, len(data)
        unpack_hdr = FRAME_HEADER.unpack_from
        unpack_cm = CLASS_METHOD.unpack_from
        unpack_u64 = U64.unpack_from
        tags = []
        count = 0
        last_tag = self.last_tag
        while n - pos >= 7:
            ftype, _ch, size = unpack_hdr(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            if ftype == 1:
                if unpack_cm(data, pos + 7)[0] == BASIC_DELIVER:
                    # payload: class(2) method(2) consumer-tag(shortstr) delivery-tag(u64) ...
                    off = pos + 12 + data[pos + 11]
                    last_tag = unpack_u64(data, off)[0]
                    count += 1
                    tags.append(last_tag)
                else:
                    self.conn.slow_frame(data[pos:end])
            elif ftype == 3:
                self.body_bytes += size
                if bodies is not None:
                    bodies.append((now, data[pos + 7:end - 1]))
            elif ftype == 8:
                pass
            pos = end
        if count:
            self.count += count
            self.last_tag = last_tag
            if not self.no_ack:
                self._ack(tags, count)
            w = self.waiter
            if w is not None and self.count >= w[0]:
                self.waiter = None
                if not w[1].done():
                    w[1].set_result(None)
        return data[pos:]

    def _ack(self, tags: list[int], count: int) -> None:
        ch = self.channel
        every = self.multi_ack_every
        if every <= 0:  # PerfTest default: one basic.ack(multiple=false) per message
            pack = ACK_FRAME.pack
            self.conn.transport.write(b"".join([pack(1, ch, 13, 60, 80, t, 0, FRAME_END)
                                                for t in tags]))
            return
        self.unacked_since += count
        if self.unacked_since >= every:
            self.unacked_since = 0
            self.conn.transport.write(ACK_FRAME.pack(1, ch, 13, 60, 80, tags[-1], 1, FRAME_END))

    def flush_acks(self) -> None:
        if not self.no_ack and self.multi_ack_every > 0 and self.unacked_since:
            self.unacked_since = 0
            self.conn.transport.write(ACK_FRAME.pack(1, self.channel, 13, 60, 80, self.last_tag, 1,
                                                FRAME_END))


BASIC_ACK = (60 << 16) | 80
BASIC_NACK = (60 << 16) | 120


class ConfirmPublisher:
    """Pipelined publisher on a channel in confirm mode, with a window of at most
    ``window`` unconfirmed messages.

    Publishes go out in pre-encoded batches of ``batch`` (the window is checked
    before each batch, so in flight never exceeds ``window``).  ``Basic.Ack`` /
    ``Basic.Nack`` frames are read on a fast path; ``multiple=true`` settles every
    tag up to the one given, out-of-order single acks are kept in a set until the
    gap closes.  ``confirmed`` / ``nacked`` / ``settled`` count messages.

    Latency: for each batch (one socket write), the time from the write to the
    moment every message of the batch (and all before it) is settled is appended
    to ``latencies`` (seconds) - i.e. publish->confirm latency of the batch's
    last message.  One sample per batch keeps it cheap.
    """

    def __init__(self, conn: Conn, one_msg: bytes | list[bytes], batch: int, window: int,
                 limit: int | None = None, stall_timeout: float = 60.0) -> None:
        batch = min(batch, window)
        self.conn = conn
        # One pre-encoded publish, or several sent in turn (e.g. one per priority).
        self.cycle = [one_msg] if isinstance(one_msg, bytes) else one_msg
        self.batch = batch
        self.payload = self._frames(batch)
        self.window = window
        self.limit = limit  # stop after this many publishes (None = until stopped)
        self.stall_timeout = stall_timeout
        self.published = 0
        self.settled = 0
        self.confirmed = 0
        self.nacked = 0
        self.low = 0  # every tag <= low is settled
        self.ooo: set[int] = set()  # settled tags > low (out-of-order single acks)
        self.batches: collections.deque = collections.deque()  # (last seq, t written)
        self.latencies: list[float] = []
        self.stopped = False
        self.error: str | None = None
        self.gate = None
        self._room: asyncio.Future | None = None
        self._room_need = 0
        conn.fast = self._on_data
        conn.lost.add_done_callback(lambda _f: self._wake(force=True))

    # -- incoming ---------------------------------------------------------
    def _on_data(self, data: bytes) -> bytes:
        pos, n = 0, len(data)
        unpack_hdr = FRAME_HEADER.unpack_from
        unpack_cm = CLASS_METHOD.unpack_from
        unpack_u64 = U64.unpack_from
        got = False
        while n - pos >= 7:
            ftype, _ch, size = unpack_hdr(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            if ftype == 1:
                cm = unpack_cm(data, pos + 7)[0]
                if cm in (BASIC_ACK, BASIC_NACK):
                    tag = unpack_u64(data, pos + 11)[0]
                    self._settle(tag, bool(data[pos + 19] & 1), cm == BASIC_NACK)
                    got = True
                else:
                    self._other(data[pos:end])
            pos = end
        if got:
            low, batches = self.low, self.batches
            if batches and batches[0][0] <= low:
                now = time.perf_counter()
                lat = self.latencies
                while batches and batches[0][0] <= low:
                    lat.append(now - batches.popleft()[1])
            self._wake()
        return data[pos:]

    def _other(self, raw: bytes) -> None:
        try:
            _n, ch, frame = pamqp.frame.unmarshal(raw)
        except Exception:
            frame = None
        if isinstance(frame, cmd.Channel.Close):
            self.conn.send(cmd.Channel.CloseOk(), ch)
            self.error = f"channel closed by broker: {frame.reply_code} {frame.reply_text}"
            self._wake(force=True)
        elif isinstance(frame, cmd.Connection.Close):
            self.conn.send(cmd.Connection.CloseOk(), 0)
            self.error = f"connection closed by broker: {frame.reply_code} {frame.reply_text}"
            self._wake(force=True)
        else:
            self.conn.slow_frame(raw)  # Blocked/Unblocked, heartbeats, ...

    def _frames(self, n: int) -> bytes:
        """``n`` publishes, cycling through ``self.cycle`` (a batch starts at its start)."""
        return b"".join(itertools.islice(itertools.cycle(self.cycle), n))

    def _settle(self, tag: int, multiple: bool, nack: bool) -> None:
        low, ooo = self.low, self.ooo
        if tag <= low or tag in ooo:
            return  # duplicate
        if multiple:
            k = tag - low
            if ooo:
                below = [t for t in ooo if t <= tag]
                k -= len(below)
                ooo.difference_update(below)
            low = tag
        else:
            k = 1
            if tag == low + 1:
                low = tag
            else:
                ooo.add(tag)
        while ooo and low + 1 in ooo:
            low += 1
            ooo.discard(low)
        self.low = low
        self.settled += k
        if nack:
            self.nacked += k
        else:
            self.confirmed += k

    def _wake(self, force: bool = False) -> None:
        f = self._room
        if f is not None and not f.done() and (force or self.settled >= self._room_need):
            self._room = None
            f.set_result(None)

    async def _wait_settled(self, need: int) -> None:
        """Wait until ``settled >= need``; raise on stall (no confirm for stall_timeout)."""
        while self.settled < need:
            if self.error:
                raise BrokerClosed(self.error)
            if self.conn.lost.done():
                raise BrokerClosed("publisher connection lost")
            before = self.settled
            self._room_need = need
            self._room = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._room, self.stall_timeout)
            except TimeoutError:
                if self.settled == before:
                    raise RuntimeError(
                        f"confirm stall: no confirm for {self.stall_timeout}s "
                        f"(published {self.published}, confirmed {self.confirmed}, "
                        f"nacked {self.nacked})") from None

    async def wait_all(self) -> None:
        await self._wait_settled(self.published)

    # -- outgoing ---------------------------------------------------------
    async def run(self) -> None:
        conn, batch, window = self.conn, self.batch, self.window
        write = conn.transport.write
        sleep = asyncio.sleep
        perf = time.perf_counter
        limit = self.limit
        try:
            while not self.stopped:
                n = batch
                if limit is not None:
                    n = min(batch, limit - self.published)
                    if n <= 0:
                        break
                if self.published + n - self.settled > window:
                    await self._wait_settled(self.published + n - window)
                    continue
                if conn.paused:
                    await conn.wait_writable()
                    continue
                if self.gate is not None:
                    await self.gate()
                if conn.lost.done():
                    raise BrokerClosed("publisher connection lost")
                if self.error:
                    raise BrokerClosed(self.error)
                write(self.payload if n == batch else self._frames(n))
                self.published += n
                self.batches.append((self.published, perf()))
                await sleep(0)
        except Exception as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
