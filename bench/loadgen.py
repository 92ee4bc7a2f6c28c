#!/usr/bin/env python3
"""Cheap AMQP 0-9-1 load generator for the Leveret/RabbitMQ comparison benchmarks.

Raw asyncio ``Protocol`` objects (uvloop when available).  pamqp is used only for
the handshake and for the rare non-hot frames; the hot paths are hand-rolled:

* publisher: one pre-encoded ``Basic.Publish + header + body`` triple, repeated
  ``--batch`` times into a single ``bytes``; the publish loop writes whole batches
  and stops writing while the transport is paused (asyncio's write-buffer
  high-water mark = backpressure, i.e. the same thing ``drain()`` waits for);
* consumer: walks the frame headers with ``struct.unpack_from``, only looks
  inside ``Basic.Deliver`` method frames (to read the delivery tag), skips the
  content header/body frames, and acks with pre-packed ``Basic.Ack`` frames,
  one write per ``data_received`` call.

Run standalone (prints one JSON object on the last stdout line)::

    python bench/loadgen.py --port 5672 --scenario transient --duration 10

``bench/run.py`` drives it as a subprocess, one process per round.

Adding a scenario: write ``async def scenario_<name>(cfg) -> dict`` and register
it in ``SCENARIOS``.  The returned dict should at least contain the keys produced
by :func:`measure` (``consumed_per_s`` is the headline figure).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import resource
import socket
import struct
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field

import pamqp.commands as cmd
import pamqp.frame
import pamqp.header
from pamqp import body as pbody

FRAME_END = 0xCE
_HDR = struct.Struct(">BHI")  # frame type, channel, payload size
_CLASS_METHOD = struct.Struct(">I")  # class-id << 16 | method-id
_U64 = struct.Struct(">Q")
# type=1 (method), channel, size=13, class 60, method 80 (Basic.Ack), tag, multiple, frame-end
_ACK = struct.Struct(">BHIHHQBB")
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
            _t, _ch, size = _HDR.unpack_from(data, pos)
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


# ---------------------------------------------------------------------------
# Publisher / consumer hot paths
# ---------------------------------------------------------------------------


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
            _t, _ch, size = _HDR.unpack_from(data, pos)
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
        pos, n = 0, len(data)
        unpack_hdr = _HDR.unpack_from
        unpack_cm = _CLASS_METHOD.unpack_from
        unpack_u64 = _U64.unpack_from
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
            pack = _ACK.pack
            self.conn.transport.write(b"".join([pack(1, ch, 13, 60, 80, t, 0, FRAME_END)
                                                for t in tags]))
            return
        self.unacked_since += count
        if self.unacked_since >= every:
            self.unacked_since = 0
            self.conn.transport.write(_ACK.pack(1, ch, 13, 60, 80, tags[-1], 1, FRAME_END))

    def flush_acks(self) -> None:
        if not self.no_ack and self.multi_ack_every > 0 and self.unacked_since:
            self.unacked_since = 0
            self.conn.transport.write(_ACK.pack(1, self.channel, 13, 60, 80, self.last_tag, 1,
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
        unpack_hdr = _HDR.unpack_from
        unpack_cm = _CLASS_METHOD.unpack_from
        unpack_u64 = _U64.unpack_from
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


# ---------------------------------------------------------------------------
# Measurement helpers
# ---------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(ppid, utime+stime seconds) of one process, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2:].split()
    # fields[0] is state (field 3); ppid is field 4, utime 14, stime 15
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _CLK_TCK


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (found by scanning /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        st = _proc_stat(pid)
        if st is not None:
            total += st[1]
    return total


def vm_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def tree_io_bytes(pids: list[int]) -> int | None:
    """Summed ``write_bytes`` (bytes sent to the block layer) of /proc/<pid>/io."""
    total, seen = 0, False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    if line.startswith("write_bytes:"):
                        total += int(line.split()[1])
                        seen = True
        except OSError:
            continue
    return total if seen else None


def vm_status(pid: int, keys: tuple[str, ...]) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in keys:
                    out[k] = int(line.split()[1])
    except OSError:
        pass
    return out


def host_cpu_ticks() -> list[int]:
    """Aggregate /proc/stat 'cpu' line: user nice system idle iowait irq softirq steal ..."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def host_cpu_breakdown(t0: list[int], t1: list[int], wall: float) -> dict:
    """Whole-machine CPU use between two host_cpu_ticks() samples, in cores."""
    d = [b - a for a, b in zip(t0, t1)]
    def cores(ticks):
        return round(ticks / _CLK_TCK / wall, 3)
    busy = sum(d[:3]) + sum(d[5:7])  # user nice system irq softirq
    return {"host_busy_cores": cores(busy), "host_idle_cores": cores(d[3] + d[4]),
            "host_steal_cores": cores(d[7]) if len(d) > 7 else None}


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def latency_stats(lats: list[float]) -> dict:
    """Median/p99/max (ms) of sorted latencies in seconds."""
    if not lats:
        return {}
    n = len(lats)
    return {"confirm_latency_samples": n,
            "confirm_latency_p50_ms": round(1e3 * lats[n // 2], 3),
            "confirm_latency_p99_ms": round(1e3 * lats[min(n - 1, int(n * 0.99))], 3),
            "confirm_latency_max_ms": round(1e3 * lats[-1], 3)}


def dir_size(path: str | None) -> dict | None:
    """Disk usage (st_blocks) and apparent size of a directory tree, or None if
    it does not exist / is unreadable (e.g. RabbitMQ's mnesia dir as non-root)."""
    if not path or not os.path.isdir(path):
        return None
    errors = []
    disk = apparent = files = 0
    for root, _dirs, names in os.walk(path, onerror=errors.append):
        for nm in names:
            try:
                st = os.lstat(os.path.join(root, nm))
            except OSError:
                continue
            disk += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    if errors and not files:
        return None
    return {"disk_bytes": disk, "apparent_bytes": apparent, "files": files,
            "unreadable_dirs": len(errors)}


class RssSampler:
    """Polls the summed VmRSS of the broker's process tree every ``interval`` s.
    ``peak_kib`` is the max seen since start; ``mark()`` returns and resets a
    per-phase peak."""

    def __init__(self, pids: list[int], interval: float = 0.2) -> None:
        self.pids = pids
        self.interval = interval
        self.peak_kib = 0
        self.phase_peak_kib = 0
        self.task: asyncio.Task | None = None

    anon_peak_kib = 0  # RssAnon (heap etc.; excludes mmapped files such as LMDB's data file)
    phase_anon_peak_kib = 0

    def sample(self) -> None:
        if self.pids:
            v = a = 0
            for p in self.pids:
                st = vm_status(p, ("VmRSS", "RssAnon"))
                v += st.get("VmRSS", 0)
                a += st.get("RssAnon", 0)
            self.peak_kib = max(self.peak_kib, v)
            self.phase_peak_kib = max(self.phase_peak_kib, v)
            self.anon_peak_kib = max(self.anon_peak_kib, a)
            self.phase_anon_peak_kib = max(self.phase_anon_peak_kib, a)

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self.pids:
            self.task = asyncio.create_task(self._run())

    def mark(self) -> tuple[int, int]:
        """(VmRSS peak, RssAnon peak) since the last mark."""
        self.sample()
        v, self.phase_peak_kib = self.phase_peak_kib, 0
        a, self.phase_anon_peak_kib = self.phase_anon_peak_kib, 0
        return v, a

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    scenario: str = "transient"
    duration: float = 10.0
    warmup: float = 3.0
    size: int = 256
    batch: int = 50
    prefetch: int = 0  # PerfTest default: 0 = unlimited
    multi_ack_every: int = 0  # PerfTest default: 0 = ack every message, multiple=false
    no_ack: bool = False
    max_backlog: int = 0  # 0 = publisher unthrottled (PerfTest default)
    queue_args: str = ""  # backlog: the queue's arguments, JSON ("" = none)
    priorities: int = 0  # confirm publishers: cycle through priorities 0..N-1 (0 = none set)
    broker_pid: int | None = None
    window: int = 1000  # confirm scenarios: max unconfirmed publishes
    messages: int = 1_000_000  # backlog: messages to publish then drain
    data_dir: str | None = None  # backlog: broker data dir to measure (optional)
    stall_timeout: float = 60.0  # abort when no confirm/delivery arrives for this long
    queues: int = 10  # fanout/topic: queues (one consumer each)
    consumer_conns: int = 0  # fanout/topic: connections the consumers share (0 = one each)
    bindings: int = 1000  # topic: wildcard bindings spread over the queues
    seed: int = 6  # topic: RNG seed for patterns and routing keys
    key_pool: int = 20000  # topic: pre-encoded messages (random keys) cycled by the publisher
    rate: float = 1000.0  # latency: paced publishes per second
    connections: int = 1000  # conns: idle connections to open
    connect_concurrency: int = 100  # conns: handshakes in flight at once
    consumers: int = 1000  # consumers: consumers of the one queue
    consumer_channels: str = "one"  # consumers: all on one channel, or one channel each
    extra: dict = field(default_factory=dict)


async def measure(cfg: Config, consumer: Consumer, publishers: list[Publisher]) -> dict:
    """Warm up, then sample counters every second for ``cfg.duration`` seconds."""
    broker_pids = process_tree(cfg.broker_pid) if cfg.broker_pid else []
    await asyncio.sleep(cfg.warmup)
    if consumer.count == 0:
        raise RuntimeError(f"no message consumed during {cfg.warmup}s warmup "
                           f"(published {sum(p.published for p in publishers)}, "
                           f"errors {[p.error for p in publishers if p.error]})")

    def sample():
        return (time.perf_counter(), consumer.count, sum(p.published for p in publishers),
                self_cpu_seconds(), tree_cpu_seconds(broker_pids) if broker_pids else None,
                host_cpu_ticks(), sum(getattr(p, "confirmed", 0) for p in publishers),
                tree_io_bytes(broker_pids) if broker_pids else None)

    s0 = sample()
    confirming = [p for p in publishers if hasattr(p, "confirmed")]
    lat_marks = [len(p.latencies) for p in confirming]
    per_second = []
    prev = s0
    deadline = s0[0] + cfg.duration
    while True:
        now = time.perf_counter()
        if now >= deadline:
            break
        await asyncio.sleep(min(1.0, deadline - now))
        cur = sample()
        per_second.append(round((cur[1] - prev[1]) / (cur[0] - prev[0]), 1))
        prev = cur
        errs = [p.error for p in publishers if p.error]
        if errs:
            raise RuntimeError(f"publisher failed: {errs}")
    s1 = prev
    wall = s1[0] - s0[0]
    consumed = s1[1] - s0[1]
    published = s1[2] - s0[2]
    res = {
        "wall_s": round(wall, 3),
        "consumed": consumed,
        "published": published,
        "consumed_per_s": round(consumed / wall, 1),
        "published_per_s": round(published / wall, 1),
        "per_second_consumed": per_second,
        "backlog_at_end": s1[2] - s1[1],  # published - consumed (includes unacked/in flight)
        "loadgen_cpu_s": round(s1[3] - s0[3], 3),
        "loadgen_cpu_share": round((s1[3] - s0[3]) / wall, 3),  # 1.0 = one full core
        **host_cpu_breakdown(s0[5], s1[5], wall),
        "loadgen_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
    }
    if confirming:
        confirmed = s1[6] - s0[6]
        lats = sorted(x for p, m in zip(confirming, lat_marks) for x in p.latencies[m:])
        res.update({
            "confirmed": confirmed,
            "confirms_per_s": round(confirmed / wall, 1),
            "nacked_total": sum(p.nacked for p in confirming),
            "in_flight_at_end": sum(p.published - p.settled for p in confirming),
            **latency_stats(lats),
        })
    if broker_pids:
        bcpu = s1[4] - s0[4]
        res.update({
            "broker_pid": cfg.broker_pid,
            "broker_pids": broker_pids,
            "broker_cpu_s": round(bcpu, 3),
            "broker_cpu_share": round(bcpu / wall, 3),
            "broker_cpu_us_per_msg": round(1e6 * bcpu / consumed, 3) if consumed else None,
            "broker_vmhwm_kib": sum(vm_kib(p, "VmHWM") or 0 for p in broker_pids),
            "broker_vmrss_kib": sum(vm_kib(p, "VmRSS") or 0 for p in broker_pids),
        })
        if s0[7] is not None and s1[7] is not None:
            res["broker_disk_write_bytes_per_msg"] = (round((s1[7] - s0[7]) / consumed, 1)
                                                      if consumed else None)
    return res


# ---------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------


async def scenario_transient(cfg: Config) -> dict:
    """1 producer + 1 consumer (separate connections), transient messages of
    ``cfg.size`` bytes to a non-durable queue via the default exchange.

    Consumer defaults follow RabbitMQ PerfTest's defaults: manual ack, one
    ``basic.ack(multiple=false)`` per message, no prefetch limit, no confirms,
    publisher not rate-limited.  ``--multi-ack-every``/``--prefetch``/``--no-ack``
    override them.
    """
    qname = f"leveret-bench-{uuid.uuid4().hex[:12]}"
    cconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-consumer")
    pconn = None
    try:
        await open_channel(cconn, 1)
        cconn.send(cmd.Queue.Declare(queue=qname, durable=False, exclusive=False,
                                     auto_delete=False), 1)
        await cconn.expect(cmd.Queue.DeclareOk)
        if cfg.prefetch:
            cconn.send(cmd.Basic.Qos(prefetch_count=cfg.prefetch), 1)
            await cconn.expect(cmd.Basic.QosOk)
        consumer = Consumer(cconn, 1, cfg.no_ack, cfg.multi_ack_every)
        consumer.install()
        cconn.send(cmd.Basic.Consume(queue=qname, consumer_tag="bench", no_ack=cfg.no_ack), 1)
        await cconn.expect(cmd.Basic.ConsumeOk)

        pconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                              "bench-producer")
        await open_channel(pconn, 1)
        body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
        pub = Publisher(pconn, encode_publish("", qname, body), cfg.batch)
        if cfg.max_backlog:
            async def gate(pub=pub):
                limit = cfg.max_backlog
                if pub.published - consumer.count > limit:
                    await consumer.wait_count(pub.published - limit // 2)
            pub.gate = gate
        task = asyncio.create_task(pub.run())
        try:
            res = await measure(cfg, consumer, [pub])
        finally:
            pub.stopped = True
            await asyncio.wait([task], timeout=2)
        res.update({"queue": qname, "message_size": cfg.size,
                    "server_product": _s(cconn.server_properties.get("product")),
                    "server_version": _s(cconn.server_properties.get("version"))})
        # clean up: cancel, ack what we hold, delete the queue
        consumer.flush_acks()
        try:
            cconn.send(cmd.Basic.Cancel(consumer_tag="bench"), 1)
            await cconn.expect(cmd.Basic.CancelOk, timeout=5)
            cconn.send(cmd.Queue.Delete(queue=qname), 1)
            await cconn.expect(cmd.Queue.DeleteOk, timeout=10)
        except Exception as exc:
            res["cleanup_error"] = repr(exc)
        return res
    finally:
        if pconn is not None:
            await pconn.close()
        await cconn.close()


class ChannelAckConsumer(Consumer):
    """Counts every channel's deliveries on one connection and acks each on its own channel
    (``Consumer`` acks on one channel only)."""

    def _on_data(self, data: bytes) -> bytes:
        pos, n = 0, len(data)
        acks = []
        count = 0
        while n - pos >= 7:
            ftype, ch, size = _HDR.unpack_from(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            if ftype == 1:
                if _CLASS_METHOD.unpack_from(data, pos + 7)[0] == BASIC_DELIVER:
                    tag = _U64.unpack_from(data, pos + 12 + data[pos + 11])[0]
                    count += 1
                    acks.append(_ACK.pack(1, ch, 13, 60, 80, tag, 0, FRAME_END))
                else:
                    self.conn.slow_frame(data[pos:end])
            pos = end
        if count:
            self.count += count
            if not self.no_ack:
                self.conn.transport.write(b"".join(acks))
            w = self.waiter
            if w is not None and self.count >= w[0]:
                self.waiter = None
                if not w[1].done():
                    w[1].set_result(None)
        return data[pos:]


async def scenario_consumers(cfg: Config) -> dict:
    """Issue 17.1: ``cfg.consumers`` consumers of one queue on one connection, with
    ``basic.qos(cfg.prefetch)`` each, on one channel (``--consumer-channels one``) or one
    channel each (``many``); one ack per message; 1 producer held to ``max_backlog``
    messages ahead, so that acks keep dispatching from a backlog."""
    qname = f"leveret-bench-{uuid.uuid4().hex[:12]}"
    cconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-consumer")
    pconn = None
    channels = 1 if cfg.consumer_channels == "one" else cfg.consumers
    try:
        for ch in range(1, channels + 1):
            await open_channel(cconn, ch)
            cconn.send(cmd.Basic.Qos(prefetch_count=cfg.prefetch), ch)
            await cconn.expect(cmd.Basic.QosOk)
        cconn.send(cmd.Queue.Declare(queue=qname, auto_delete=True), 1)
        await cconn.expect(cmd.Queue.DeclareOk)
        for i in range(cfg.consumers):
            cconn.send(cmd.Basic.Consume(queue=qname, consumer_tag=f"c{i}",
                                         no_ack=cfg.no_ack), i % channels + 1)
            await cconn.expect(cmd.Basic.ConsumeOk)
        consumer = ChannelAckConsumer(cconn, 1, cfg.no_ack, 0)
        cconn.fast = consumer._on_data  # all consumers are on (the queue is empty): fast parser
        pconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                              "bench-producer")
        await open_channel(pconn, 1)
        body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
        pub = Publisher(pconn, encode_publish("", qname, body), cfg.batch)
        limit = cfg.max_backlog or cfg.consumers * max(cfg.prefetch, 1) * 2

        async def gate(pub=pub):
            if pub.published - consumer.count > limit:
                await consumer.wait_count(pub.published - limit // 2)
        pub.gate = gate
        task = asyncio.create_task(pub.run())
        try:
            res = await measure(cfg, consumer, [pub])
        finally:
            pub.stopped = True
            await asyncio.wait([task], timeout=2)
        res.update({"queue": qname, "consumers": cfg.consumers, "channels": channels,
                    "prefetch": cfg.prefetch})
        return res
    finally:
        if pconn is not None:
            await pconn.close()
        await cconn.close()


def _s(v):
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


async def declare_durable(conn: Conn, qname: str, ch: int = 1,
                          arguments: dict | None = None) -> None:
    conn.send(cmd.Queue.Declare(queue=qname, durable=True, exclusive=False,
                                auto_delete=False, arguments=arguments or {}), ch)
    await conn.expect(cmd.Queue.DeclareOk)


async def confirm_publisher(cfg: Config, qname: str, limit: int | None = None):
    """New connection + channel 1 in confirm mode + a ConfirmPublisher of persistent
    (delivery_mode=2) ``cfg.size``-byte messages to ``qname`` via the default exchange."""
    pconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                          "bench-producer")
    await open_channel(pconn, 1)
    pconn.send(cmd.Confirm.Select(), 1)
    await pconn.expect(cmd.Confirm.SelectOk)
    body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
    # --priorities N: publishes cycle through priorities 0..N-1 (a priority queue's levels).
    props = [cmd.Basic.Properties(delivery_mode=2, priority=p) for p in range(cfg.priorities)]
    msgs = [encode_publish("", qname, body, properties=pr)
            for pr in props or [cmd.Basic.Properties(delivery_mode=2)]]
    return pconn, ConfirmPublisher(pconn, msgs, cfg.batch, cfg.window, limit=limit,
                                   stall_timeout=cfg.stall_timeout)


async def start_consumer(cfg: Config, conn: Conn, qname: str, ch: int = 1) -> Consumer:
    if cfg.prefetch:
        conn.send(cmd.Basic.Qos(prefetch_count=cfg.prefetch), ch)
        await conn.expect(cmd.Basic.QosOk)
    consumer = Consumer(conn, ch, cfg.no_ack, cfg.multi_ack_every)
    consumer.install()
    conn.send(cmd.Basic.Consume(queue=qname, consumer_tag="bench", no_ack=cfg.no_ack), ch)
    await conn.expect(cmd.Basic.ConsumeOk)
    return consumer


async def stop_consumer_and_delete(conn: Conn, consumer: Consumer, qname: str, res: dict) -> None:
    consumer.flush_acks()
    try:
        conn.send(cmd.Basic.Cancel(consumer_tag="bench"), 1)
        await conn.expect(cmd.Basic.CancelOk, timeout=10)
        res["queue_delete"] = await delete_queue(conn, qname, 3)
    except Exception as exc:
        res["cleanup_error"] = repr(exc)


def _check_prefetch(cfg: Config) -> None:
    if cfg.prefetch and not cfg.no_ack and cfg.multi_ack_every > cfg.prefetch:
        raise ValueError(f"--multi-ack-every {cfg.multi_ack_every} > --prefetch "
                         f"{cfg.prefetch} would deadlock")


async def scenario_confirmed(cfg: Config) -> dict:
    """Durable queue, persistent (delivery_mode=2) ``cfg.size``-byte messages.
    Publisher (own connection) in confirm mode with at most ``cfg.window``
    unconfirmed messages, written in pipelined batches of ``cfg.batch``; one
    consumer (own connection), manual ack (default: one ack per message, as
    PerfTest), prefetch ``cfg.prefetch`` (default 200).  Timed like
    ``transient``: warmup, then ``cfg.duration`` measured seconds.  Headline:
    consumed msg/s; also confirms/s and publish->confirm latency (per batch)."""
    _check_prefetch(cfg)
    qname = "leveret-bench-confirmed"
    cconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-consumer")
    pconn = None
    try:
        await open_channel(cconn, 1)
        pre = await delete_queue(cconn, qname, 2)  # leftovers of an aborted run
        await declare_durable(cconn, qname)
        consumer = await start_consumer(cfg, cconn, qname)
        pconn, pub = await confirm_publisher(cfg, qname)
        task = asyncio.create_task(pub.run())
        try:
            res = await measure(cfg, consumer, [pub])
        finally:
            pub.stopped = True
            await asyncio.wait([task], timeout=2)
        if pub.error:
            res["publisher_error"] = pub.error
        res.update({"queue": qname, "message_size": cfg.size, "window": pub.window,
                    "batch": pub.batch, "queue_delete_before": pre,
                    "server_product": _s(cconn.server_properties.get("product")),
                    "server_version": _s(cconn.server_properties.get("version"))})
        await pconn.close()
        pconn = None
        await stop_consumer_and_delete(cconn, consumer, qname, res)
        return res
    finally:
        if pconn is not None:
            await pconn.close()
        await cconn.close()


async def scenario_backlog(cfg: Config) -> dict:
    """Durable queue; publish ``cfg.messages`` persistent ``cfg.size``-byte
    messages (default 1 KB) with confirms (window ``cfg.window``) and no consumer;
    then one consumer (prefetch ``cfg.prefetch``, default 1000; manual ack with
    multiple=true every ``cfg.multi_ack_every``, default 100) drains the queue.

    Records the publish rate (confirmed msg/s), broker RSS peak during publish
    (sampled VmRSS every 0.2 s, and VmHWM at the end of the publish), the data dir
    size at the end of the publish, drain rate, total time, VmHWM at the end,
    broker CPU per message (publish + drain) and per phase."""
    _check_prefetch(cfg)
    n_msgs = cfg.messages
    qname = "leveret-bench-backlog"
    pids = process_tree(cfg.broker_pid) if cfg.broker_pid else []
    cconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-consumer")
    pconn = None
    consumer = None
    sampler = RssSampler(pids)
    res: dict = {"queue": qname, "message_size": cfg.size, "messages": n_msgs,
                 "server_product": _s(cconn.server_properties.get("product")),
                 "server_version": _s(cconn.server_properties.get("version"))}

    def snap():
        return (time.perf_counter(), self_cpu_seconds(),
                tree_cpu_seconds(pids) if pids else None, host_cpu_ticks(),
                tree_io_bytes(pids) if pids else None)

    def rss_kib():
        return sum(vm_kib(p, "VmRSS") or 0 for p in pids) if pids else None

    def anon_mib():
        return round(sum(vm_status(p, ("RssAnon",)).get("RssAnon", 0) for p in pids) / 1024, 1)

    def hwm_kib():
        return sum(vm_kib(p, "VmHWM") or 0 for p in pids) if pids else None

    try:
        await open_channel(cconn, 1)
        res["queue_delete_before"] = await delete_queue(cconn, qname, 2)
        queue_args = json.loads(cfg.queue_args) if cfg.queue_args else {}
        res["queue_args"] = queue_args
        res["priorities"] = cfg.priorities
        await declare_durable(cconn, qname, arguments=queue_args)
        res["data_dir"] = cfg.data_dir
        res["data_dir_before"] = dir_size(cfg.data_dir)
        res["broker_vmrss_before_kib"] = rss_kib()
        pconn, pub = await confirm_publisher(cfg, qname, limit=n_msgs)
        res.update({"window": pub.window, "batch": pub.batch})

        # ---- phase 1: publish with confirms, no consumer ----
        sampler.start()
        sampler.mark()
        s0 = snap()
        task = asyncio.create_task(pub.run())
        series, rss_series, anon_series = [], [], []
        prev_t, prev_c = s0[0], 0
        while not task.done():
            await asyncio.wait([task], timeout=1.0)
            now = time.perf_counter()
            series.append(round((pub.confirmed - prev_c) / (now - prev_t), 1))
            rss_series.append(round((rss_kib() or 0) / 1024, 1))
            anon_series.append(anon_mib())
            prev_t, prev_c = now, pub.confirmed
        if pub.error:
            raise RuntimeError(f"publish phase failed: {pub.error}")
        await pub.wait_all()
        s1 = snap()
        res["rss_peak_publish_kib"], res["rss_anon_peak_publish_kib"] = sampler.mark()
        res["vmhwm_after_publish_kib"] = hwm_kib()
        res["data_dir_after_publish"] = dir_size(cfg.data_dir)
        lats = sorted(pub.latencies)
        pub_wall = s1[0] - s0[0]
        res.update({
            "published": pub.published, "confirmed": pub.confirmed, "nacked": pub.nacked,
            "publish_s": round(pub_wall, 3),
            "publish_per_s": round(pub.confirmed / pub_wall, 1),
            "per_second_confirmed": series,
            "per_second_rss_mib_publish": rss_series,
            "per_second_rss_anon_mib_publish": anon_series,
            **latency_stats(lats),
        })
        await pconn.close()
        pconn = None

        # ---- phase 2: drain ----
        s2 = snap()
        consumer = await start_consumer(cfg, cconn, qname)
        series, rss_series, anon_series = [], [], []
        prev_t, prev_c = s2[0], 0
        last_change = s2[0]
        while consumer.count < n_msgs:
            fut = consumer.wait_count(n_msgs)
            try:
                await asyncio.wait_for(fut, 1.0)
            except TimeoutError:
                pass
            now = time.perf_counter()
            series.append(round((consumer.count - prev_c) / (now - prev_t), 1))
            rss_series.append(round((rss_kib() or 0) / 1024, 1))
            anon_series.append(anon_mib())
            if consumer.count != prev_c:
                last_change = now
            prev_t, prev_c = now, consumer.count
            if cconn.lost.done():
                raise RuntimeError(f"consumer connection lost after {consumer.count} deliveries")
            if now - last_change > cfg.stall_timeout:
                raise RuntimeError(f"drain stall: no delivery for {cfg.stall_timeout}s "
                                   f"({consumer.count}/{n_msgs} consumed)")
        consumer.flush_acks()
        s3 = snap()
        drain_wall = s3[0] - s2[0]
        total_wall = s3[0] - s0[0]
        res["rss_peak_drain_kib"], res["rss_anon_peak_drain_kib"] = sampler.mark()
        res.update({
            "consumed": consumer.count,
            "consumed_body_bytes": consumer.body_bytes,
            "drain_s": round(drain_wall, 3),
            "drain_per_s": round(consumer.count / drain_wall, 1),
            "per_second_consumed": series,
            "per_second_rss_mib_drain": rss_series,
            "per_second_rss_anon_mib_drain": anon_series,
            "total_s": round(total_wall, 3),
            "loadgen_cpu_s": round(s3[1] - s0[1], 3),
            "loadgen_cpu_share": round((s3[1] - s0[1]) / total_wall, 3),
            **host_cpu_breakdown(s0[3], s3[3], total_wall),
            "loadgen_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
        })
        if pids:
            res.update({
                "broker_pid": cfg.broker_pid, "broker_pids": pids,
                "broker_cpu_s": round(s3[2] - s0[2], 3),
                "broker_cpu_share": round((s3[2] - s0[2]) / total_wall, 3),
                # per message, publish + drain
                "broker_cpu_us_per_msg": round(1e6 * (s3[2] - s0[2]) / n_msgs, 3),
                "broker_publish_cpu_us_per_msg": round(1e6 * (s1[2] - s0[2]) / n_msgs, 3),
                "broker_drain_cpu_us_per_msg": round(1e6 * (s3[2] - s2[2]) / n_msgs, 3),
                "broker_vmhwm_kib": hwm_kib(),
                "broker_vmrss_kib": rss_kib(),
                "rss_peak_kib": sampler.peak_kib,
                "rss_anon_peak_kib": sampler.anon_peak_kib,
            })
            if s0[4] is not None and s3[4] is not None:
                res["broker_publish_disk_write_bytes_per_msg"] = round((s1[4] - s0[4]) / n_msgs, 1)
                res["broker_disk_write_bytes_per_msg"] = round((s3[4] - s0[4]) / n_msgs, 1)
        res["data_dir_after_drain"] = dir_size(cfg.data_dir)
        await stop_consumer_and_delete(cconn, consumer, qname, res)
        return res
    except BaseException as exc:
        # keep partial figures for the report, then clean up what we can
        res["partial"] = True
        res["error_detail"] = f"{type(exc).__name__}: {exc}"
        res["vmhwm_at_error_kib"] = hwm_kib()
        try:
            exc.partial_result = res  # picked up by main()
        except AttributeError:
            pass
        raise
    finally:
        sampler.stop()
        if pconn is not None:
            await pconn.close()
        if res.get("partial") and not cconn.lost.done():
            try:
                res["queue_delete_after_error"] = await delete_queue(cconn, qname, 4, timeout=60)
            except Exception:
                pass
        await cconn.close()


# ---------------------------------------------------------------------------
# Multi-queue scenarios: fanout, topic
# ---------------------------------------------------------------------------


class CountSum:
    """Looks like a Consumer to :func:`measure`: ``count`` sums several consumers."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers

    @property
    def count(self) -> int:
        return sum(c.count for c in self.consumers)


class PoolPublisher(Publisher):
    """Like :class:`Publisher`, but cycles through a list of pre-encoded batches
    (each batch = ``batch`` publishes with different routing keys)."""

    def __init__(self, conn: Conn, payloads: list[bytes], batch: int) -> None:
        super().__init__(conn, payloads[0], 1)
        self.payloads = payloads
        self.batch = batch

    async def run(self) -> None:
        conn, payloads, batch = self.conn, self.payloads, self.batch
        write = conn.transport.write
        sleep = asyncio.sleep
        i, n = 0, len(payloads)
        try:
            while not self.stopped:
                if conn.paused:
                    await conn.wait_writable()
                    continue
                if self.gate is not None:
                    await self.gate()
                if conn.lost.done():
                    raise BrokerClosed("publisher connection lost")
                write(payloads[i])
                i = i + 1 if i + 1 < n else 0
                self.published += batch
                await sleep(0)
        except Exception as exc:
            self.error = repr(exc)


async def declare_exchange(conn: Conn, name: str, kind: str, ch: int = 1) -> None:
    conn.send(cmd.Exchange.Declare(exchange=name, exchange_type=kind, durable=False,
                                   auto_delete=False), ch)
    await conn.expect(cmd.Exchange.DeclareOk)


async def declare_bound_queues(conn: Conn, exchange: str, qnames: list[str],
                               bindings: list[tuple[int, str]], ch: int = 1) -> float:
    """Declare non-durable ``qnames`` and bind them; ``bindings`` = (queue index,
    routing key).  Declares and binds are pipelined; returns the seconds it took."""
    t0 = time.perf_counter()
    for q in qnames:
        conn.send(cmd.Queue.Declare(queue=q, durable=False, exclusive=False,
                                    auto_delete=False), ch)
    for _ in qnames:
        await conn.expect(cmd.Queue.DeclareOk)
    for qi, key in bindings:
        conn.send(cmd.Queue.Bind(queue=qnames[qi], exchange=exchange, routing_key=key), ch)
    for _ in bindings:
        await conn.expect(cmd.Queue.BindOk, timeout=60)
    return time.perf_counter() - t0


async def multi_consumers(cfg: Config, qnames: list[str]) -> tuple[list[Conn], list[Consumer]]:
    """One consumer per queue.  ``cfg.consumer_conns`` connections (0 = one per
    consumer); consumer i uses connection i % n, channel i // n + 1.  With shared
    connections only no-ack works (one fast parser per connection counts every
    channel's deliveries; acks would go to the wrong channel)."""
    n = cfg.consumer_conns or len(qnames)
    n = min(n, len(qnames))
    if n < len(qnames) and not cfg.no_ack:
        raise ValueError("--consumer-conns < --queues needs --no-ack")
    conns = [await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                           f"bench-consumer-{i}") for i in range(n)]
    consumers = []
    for i, q in enumerate(qnames):
        conn, ch = conns[i % n], i // n + 1
        await open_channel(conn, ch)
        if cfg.prefetch:
            conn.send(cmd.Basic.Qos(prefetch_count=cfg.prefetch), ch)
            await conn.expect(cmd.Basic.QosOk)
        c = Consumer(conn, ch, cfg.no_ack, cfg.multi_ack_every)
        if ch == 1:
            c.install()  # this connection's parser (counts all its channels)
            consumers.append(c)
        conn.send(cmd.Basic.Consume(queue=q, consumer_tag="bench", no_ack=cfg.no_ack), ch)
        await conn.expect(cmd.Basic.ConsumeOk)
    return conns, consumers


async def _cleanup_multi(conn: Conn, exchange: str, qnames: list[str], res: dict) -> None:
    try:
        await open_channel(conn, 2)
        for q in qnames:
            conn.send(cmd.Queue.Delete(queue=q), 2)
        for _ in qnames:
            await conn.expect(cmd.Queue.DeleteOk, timeout=30)
        conn.send(cmd.Exchange.Delete(exchange=exchange), 2)
        await conn.expect(cmd.Exchange.DeleteOk, timeout=30)
    except Exception as exc:
        res["cleanup_error"] = repr(exc)


def _backlog_gate(cfg: Config, pub: Publisher, consumers: list[Consumer], fanout: int):
    """--max-backlog for multi-queue scenarios: published*fanout - delivered."""
    total = CountSum(consumers)

    async def gate():
        while pub.published * fanout - total.count > cfg.max_backlog:
            await asyncio.sleep(0.001)
    return gate


async def _run_multi(cfg: Config, kind: str, bindings: list[tuple[int, str]],
                     payloads: list[bytes] | None, one_msg: bytes | None,
                     exchange: str, qnames: list[str], res: dict) -> dict:
    setup = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-setup")
    conns: list[Conn] = []
    pconn = None
    try:
        await open_channel(setup, 1)
        await declare_exchange(setup, exchange, kind)
        res["setup_s"] = round(await declare_bound_queues(setup, exchange, qnames, bindings), 3)
        conns, consumers = await multi_consumers(cfg, qnames)
        pconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                              "bench-producer")
        await open_channel(pconn, 1)
        pub = (PoolPublisher(pconn, payloads, cfg.batch) if payloads is not None
               else Publisher(pconn, one_msg, cfg.batch))
        if cfg.max_backlog:
            pub.gate = _backlog_gate(cfg, pub, consumers, len(qnames) if kind == "fanout"
                                     else res.get("topic_expected_deliveries_per_msg", 1))
        task = asyncio.create_task(pub.run())
        try:
            m = await measure(cfg, CountSum(consumers), [pub])
        finally:
            pub.stopped = True
            await asyncio.wait([task], timeout=2)
        res.update(m)
        if m.get("broker_cpu_s") is not None and m["published"]:
            res["broker_cpu_us_per_published"] = round(1e6 * m["broker_cpu_s"] / m["published"], 3)
        res["deliveries_per_published"] = (round(m["consumed"] / m["published"], 3)
                                           if m["published"] else None)
        res["per_consumer_count"] = [c.count for c in consumers]
        # deliveries still owed at the end: published x deliveries-per-message - delivered
        per = len(qnames) if kind == "fanout" else res.get("topic_expected_deliveries_per_msg", 1)
        res["backlog_at_end"] = round(pub.published * per - sum(c.count for c in consumers))
        res["consumer_connections"] = len(conns)
        res.update({"server_product": _s(setup.server_properties.get("product")),
                    "server_version": _s(setup.server_properties.get("version"))})
        await pconn.close()
        pconn = None
        for c in conns:
            await c.close()
        conns = []
        await _cleanup_multi(setup, exchange, qnames, res)
        return res
    finally:
        if pconn is not None:
            await pconn.close()
        for c in conns:
            await c.close()
        await setup.close()


async def scenario_fanout(cfg: Config) -> dict:
    """1 producer -> fanout exchange -> ``cfg.queues`` (10) non-durable queues ->
    one consumer each (own connection by default, ``--consumer-conns`` to share),
    ``cfg.size``-byte transient messages, no-ack by default.  Headline:
    deliveries/s summed over the consumers; also published msg/s and broker CPU
    per delivery and per published message."""
    uid = uuid.uuid4().hex[:8]
    exchange = f"leveret-bench-fanout-{uid}"
    qnames = [f"leveret-bench-fanout-{uid}-{i}" for i in range(cfg.queues)]
    body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
    res: dict = {"exchange": exchange, "queues": cfg.queues, "message_size": cfg.size}
    return await _run_multi(cfg, "fanout", [(i, "") for i in range(cfg.queues)], None,
                            encode_publish(exchange, "", body), exchange, qnames, res)


# topic: routing keys have TOPIC_LEVELS words, word j of level l is "<letter l><j>"
TOPIC_LEVELS = 5
TOPIC_VOCAB = 10


def topic_workload(n_bindings: int, n_queues: int, n_keys: int, seed: int):
    """Deterministic (seeded) wildcard patterns and routing keys.

    Keys: 5 words, 10 choices per level (10^5 keys), drawn uniformly.  Patterns
    (each a random key with some words replaced) and the share of keys each
    matches: 40 % one ``*`` (1e-4), 30 % two ``*`` (1e-3), 15 % ``w.w.w.#``
    (1e-3), 10 % ``w.*.w.#`` (1e-2), 5 % ``w.#.w`` (1e-2), i.e. about two
    matching bindings per key on average.  Binding i goes to queue i % n_queues.
    Returns (bindings [(queue, pattern)], keys, stats)."""
    import random
    import re

    rng = random.Random(seed)
    words = [[f"{chr(97 + lv)}{j}" for j in range(TOPIC_VOCAB)] for lv in range(TOPIC_LEVELS)]

    def rand_key():
        return [rng.choice(words[lv]) for lv in range(TOPIC_LEVELS)]

    patterns: list[str] = []
    seen = set()
    while len(patterns) < n_bindings:
        k, r = rand_key(), rng.random()
        if r < 0.40:
            k[rng.randrange(TOPIC_LEVELS)] = "*"
        elif r < 0.70:
            for i in rng.sample(range(TOPIC_LEVELS), 2):
                k[i] = "*"
        elif r < 0.85:
            k = [*k[:3], "#"]
        elif r < 0.95:
            k = [k[0], "*", k[2], "#"]
        else:
            k = [k[0], "#", k[-1]]
        p = ".".join(k)
        if p not in seen:
            seen.add(p)
            patterns.append(p)
    bindings = [(i % n_queues, p) for i, p in enumerate(patterns)]
    keys = [".".join(rand_key()) for _ in range(n_keys)]

    def rx(p):
        parts = []
        for w in p.split("."):
            parts.append(r"(?:[^.]+\.)*" if w == "#" else
                         r"[^.]+\." if w == "*" else re.escape(w) + r"\.")
        return "".join(parts)

    per_queue = [re.compile("|".join(f"(?:{rx(p)})" for qi, p in bindings if qi == q))
                 for q in range(n_queues)]
    queues_hit = [sum(1 for r in per_queue if r.fullmatch(k + ".")) for k in keys]
    single = [re.compile(rx(p)) for _q, p in bindings]
    sample = keys[:500]
    bind_hits = [sum(1 for r in single if r.fullmatch(k + ".")) for k in sample]
    stats = {"topic_keys_in_pool": n_keys, "topic_distinct_keys": len(set(keys)),
             "topic_key_space": TOPIC_VOCAB ** TOPIC_LEVELS,
             "topic_expected_deliveries_per_msg": round(sum(queues_hit) / n_keys, 4),
             "topic_share_routed": round(sum(1 for x in queues_hit if x) / n_keys, 4),
             "topic_bindings_matched_per_msg": round(sum(bind_hits) / len(sample), 3),
             "topic_example_patterns": patterns[:6], "topic_example_keys": keys[:3]}
    return bindings, keys, stats


async def scenario_topic(cfg: Config) -> dict:
    """1 producer -> topic exchange with ``cfg.bindings`` (1,000) wildcard bindings
    over ``cfg.queues`` (10) queues -> one consumer per queue (no-ack).  The
    publisher cycles through ``cfg.key_pool`` pre-encoded messages whose routing
    keys come from a seeded RNG (``--seed``), so every broker sees the same key
    sequence.  Headline: published msg/s; also deliveries/s, broker CPU per
    published message, and deliveries per published message next to the value
    expected from the patterns (a routing-correctness check)."""
    uid = uuid.uuid4().hex[:8]
    exchange = f"leveret-bench-topic-{uid}"
    qnames = [f"leveret-bench-topic-{uid}-{i}" for i in range(cfg.queues)]
    bindings, keys, stats = topic_workload(cfg.bindings, cfg.queues, cfg.key_pool, cfg.seed)
    body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
    msgs = [encode_publish(exchange, k, body) for k in keys]
    b = max(1, cfg.batch)
    payloads = [b"".join(msgs[i:i + b]) for i in range(0, len(msgs) - b + 1, b)]
    res: dict = {"exchange": exchange, "queues": cfg.queues, "bindings": len(bindings),
                 "message_size": cfg.size, "seed": cfg.seed, **stats}
    return await _run_multi(cfg, "topic", bindings, payloads, None, exchange, qnames, res)


# ---------------------------------------------------------------------------
# latency
# ---------------------------------------------------------------------------


def _pcts_us(xs_ns: list[int], prefix: str) -> dict:
    if not xs_ns:
        return {}
    xs = sorted(xs_ns)
    n = len(xs)

    def q(p):
        return round(xs[min(n - 1, int(n * p))] / 1e3, 1)
    return {f"{prefix}_samples": n, f"{prefix}_p50_us": q(0.5), f"{prefix}_p99_us": q(0.99),
            f"{prefix}_p999_us": q(0.999), f"{prefix}_max_us": round(xs[-1] / 1e3, 1)}


class PacedPublisher:
    """Publishes at ``rate`` msg/s, one write per message, the body starting with
    the send time (``time.monotonic_ns()``, big-endian u64) taken right before
    the write.  ``late_ns``: how late each send was against its schedule."""

    def __init__(self, conn: Conn, exchange: str, routing_key: str, size: int,
                 rate: float) -> None:
        body = (b"leveret-bench" * (size // 13 + 1))[: max(size, 8)]
        whole = encode_publish(exchange, routing_key, body)
        # everything up to the body frame's payload, then payload[8:] + frame end
        head_len = len(whole) - len(body) - 1
        self.head, self.tail = whole[:head_len], whole[head_len + 8:]
        self.conn = conn
        self.rate = rate
        self.published = 0
        self.late_ns: list[int] = []
        self.stopped = False
        self.error: str | None = None
        self.resyncs = 0
        conn.fast = Publisher._on_data.__get__(self)  # Channel.Close etc. -> slow path

    async def run(self) -> None:
        conn = self.conn
        write = conn.transport.write
        head, tail = self.head, self.tail
        pack = _U64.pack
        mono = time.monotonic_ns
        interval = int(1e9 / self.rate)
        t0 = mono()
        i = 0
        try:
            while not self.stopped:
                now = mono()
                due = t0 + i * interval
                if now < due:
                    # uvloop timers have 1 ms resolution: a shorter sleep would spin
                    # the loop; sends that fall due meanwhile go out back to back
                    await asyncio.sleep(max((due - now) / 1e9, 0.001))
                    continue
                if now - due > 1_000_000_000:  # more than 1 s behind: don't burst
                    self.resyncs += 1
                    t0, i, due = now, 0, now
                if conn.paused:
                    await conn.wait_writable()
                    continue
                if conn.lost.done():
                    raise BrokerClosed("publisher connection lost")
                ts = mono()
                write(head + pack(ts) + tail)
                self.late_ns.append(ts - due)
                self.published += 1
                i += 1
        except Exception as exc:
            self.error = repr(exc)


class LatencyConsumer(Consumer):
    """Consumer that also reads the send timestamp from each body frame; the
    receive time is taken once per ``data_received`` (on entry)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.sent_ns: list[int] = []
        self.lat_ns: list[int] = []

    def _on_data(self, data: bytes) -> bytes:
        now = time.monotonic_ns()
        pos, n = 0, len(data)
        unpack_hdr = _HDR.unpack_from
        unpack_cm = _CLASS_METHOD.unpack_from
        unpack_u64 = _U64.unpack_from
        tags = []
        count = 0
        last_tag = self.last_tag
        want_ts = False
        while n - pos >= 7:
            ftype, _ch, size = unpack_hdr(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            if ftype == 1:
                if unpack_cm(data, pos + 7)[0] == BASIC_DELIVER:
                    off = pos + 12 + data[pos + 11]
                    last_tag = unpack_u64(data, off)[0]
                    count += 1
                    tags.append(last_tag)
                    want_ts = True
                else:
                    self.conn.slow_frame(data[pos:end])
            elif ftype == 3:
                if want_ts and size >= 8:
                    ts = unpack_u64(data, pos + 7)[0]
                    self.sent_ns.append(ts)
                    self.lat_ns.append(now - ts)
                want_ts = False
                self.body_bytes += size
            pos = end
        if count:
            self.count += count
            self.last_tag = last_tag
            if not self.no_ack:
                self._ack(tags, count)
        return data[pos:]


async def loop_lag_monitor(out: list[int], interval: float = 0.005) -> None:
    """Every ``interval`` s: how long a ``call_soon`` callback waits to run, i.e.
    how long a ready socket event would wait for this loop (ns)."""
    loop = asyncio.get_running_loop()
    perf = time.perf_counter_ns
    while True:
        await asyncio.sleep(interval)
        t = perf()
        loop.call_soon(lambda t=t: out.append(perf() - t))


async def scenario_latency(cfg: Config) -> dict:
    """Paced publisher at ``cfg.rate`` (1,000) msg/s, ``cfg.size``-byte transient
    messages via the default exchange to a non-durable queue; one consumer on its
    own connection, manual ack (one ack per message).  Each body carries its send
    time; latency = receive time (start of the consumer's ``data_received``) minus
    send time, over the messages sent in the measured window.  Also reports the
    loadgen's loop lag (``call_soon`` delay, sampled every 5 ms) and how late the
    pacer's sends were, so the loadgen's own scheduling can be judged."""
    qname = f"leveret-bench-latency-{uuid.uuid4().hex[:8]}"
    cconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-consumer")
    pconn = None
    lag: list[int] = []
    lag_task = None
    try:
        await open_channel(cconn, 1)
        cconn.send(cmd.Queue.Declare(queue=qname, durable=False, exclusive=False,
                                     auto_delete=False), 1)
        await cconn.expect(cmd.Queue.DeclareOk)
        if cfg.prefetch:
            cconn.send(cmd.Basic.Qos(prefetch_count=cfg.prefetch), 1)
            await cconn.expect(cmd.Basic.QosOk)
        consumer = LatencyConsumer(cconn, 1, cfg.no_ack, cfg.multi_ack_every)
        consumer.install()
        cconn.send(cmd.Basic.Consume(queue=qname, consumer_tag="bench", no_ack=cfg.no_ack), 1)
        await cconn.expect(cmd.Basic.ConsumeOk)
        pconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                              "bench-producer")
        await open_channel(pconn, 1)
        pub = PacedPublisher(pconn, "", qname, cfg.size, cfg.rate)
        lag_task = asyncio.create_task(loop_lag_monitor(lag))
        task = asyncio.create_task(pub.run())
        t_meas = time.monotonic_ns() + int(cfg.warmup * 1e9)
        lag_mark = None

        async def mark_lag():
            nonlocal lag_mark
            await asyncio.sleep(cfg.warmup)
            lag_mark = (len(lag), len(pub.late_ns))
        mark = asyncio.create_task(mark_lag())
        try:
            res = await measure(cfg, consumer, [pub])
        finally:
            pub.stopped = True
            await asyncio.wait([task], timeout=2)
        t_end = time.monotonic_ns()
        await mark
        await asyncio.sleep(0.1)  # let the last deliveries arrive
        lats = [lt for s, lt in zip(consumer.sent_ns, consumer.lat_ns) if t_meas <= s <= t_end]
        res.update(_pcts_us(lats, "latency"))
        lm, pm = lag_mark or (0, 0)
        res.update(_pcts_us(lag[lm:], "loop_lag"))
        res.update(_pcts_us(pub.late_ns[pm:], "send_late"))
        res.update({"queue": qname, "message_size": cfg.size, "rate": cfg.rate,
                    "pacer_resyncs": pub.resyncs,
                    "server_product": _s(cconn.server_properties.get("product")),
                    "server_version": _s(cconn.server_properties.get("version"))})
        await pconn.close()
        pconn = None
        try:
            cconn.send(cmd.Basic.Cancel(consumer_tag="bench"), 1)
            await cconn.expect(cmd.Basic.CancelOk, timeout=5)
            cconn.send(cmd.Queue.Delete(queue=qname), 1)
            await cconn.expect(cmd.Queue.DeleteOk, timeout=10)
        except Exception as exc:
            res["cleanup_error"] = repr(exc)
        return res
    finally:
        if lag_task is not None:
            lag_task.cancel()
        if pconn is not None:
            await pconn.close()
        await cconn.close()


# ---------------------------------------------------------------------------
# conns
# ---------------------------------------------------------------------------


def raise_nofile() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def proc_nofile(pid: int) -> list[str] | None:
    """[soft, hard] 'Max open files' of a process from /proc/<pid>/limits."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return line.split()[3:5]
    except OSError:
        return None
    return None


def proc_fd_count(pids: list[int]) -> int | None:
    try:
        return sum(len(os.listdir(f"/proc/{p}/fd")) for p in pids)
    except OSError:
        return None


async def scenario_conns(cfg: Config) -> dict:
    """Open ``cfg.connections`` (1,000) connections with one channel each
    (heartbeat 0, at most ``cfg.connect_concurrency`` handshakes in flight), time
    it, let them sit idle, take the broker's RSS increase per connection
    (VmRSS of its process tree after - before, / connections opened), then close
    them all.  Reports the fd limits of the loadgen and the broker."""
    n = cfg.connections
    pids = process_tree(cfg.broker_pid) if cfg.broker_pid else []
    res: dict = {"connections_wanted": n, "loadgen_fd_limit": list(raise_nofile()),
                 "broker_fd_limit": proc_nofile(cfg.broker_pid) if cfg.broker_pid else None}

    def rss():
        tot = {"VmRSS": 0, "RssAnon": 0}
        for p in pids:
            for k, v in vm_status(p, ("VmRSS", "RssAnon")).items():
                tot[k] += v
        return tot

    def cpu():
        return tree_cpu_seconds(pids) if pids else None

    await asyncio.sleep(1.0)
    before = rss()
    fds_before = proc_fd_count(pids) if pids else None
    sem = asyncio.Semaphore(cfg.connect_concurrency)
    per_timeout = max(5.0, min(30.0, cfg.stall_timeout))

    async def one(i):
        async with sem:
            c = await asyncio.wait_for(
                connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, f"bench-idle-{i}"),
                per_timeout)
            try:
                await asyncio.wait_for(open_channel(c, 1), per_timeout)
            except BaseException:
                c.transport.close()
                raise
            return c

    c0, h0, l0 = cpu(), host_cpu_ticks(), self_cpu_seconds()
    t0 = time.perf_counter()
    outs = await asyncio.gather(*[one(i) for i in range(n)], return_exceptions=True)
    t1 = time.perf_counter()
    c1, l1 = cpu(), self_cpu_seconds()
    conns = [c for c in outs if isinstance(c, Conn)]
    errs = [f"{type(e).__name__}: {e}" for e in outs if not isinstance(e, Conn)]
    res.update({"connections_ok": len(conns), "connections_failed": len(errs),
                "connect_errors": sorted(set(errs))[:5], "connect_s": round(t1 - t0, 3),
                "connects_per_s": round(len(conns) / (t1 - t0), 1)})
    if pids:
        res["broker_cpu_ms_per_connect"] = (round(1e3 * (c1 - c0) / len(conns), 3)
                                            if conns else None)
    # idle: let the broker settle, sample RSS; the last sample is the figure
    idle = max(2.0, min(cfg.duration, 5.0))
    c2 = cpu()
    series = []
    t2 = time.perf_counter()
    while time.perf_counter() - t2 < idle:
        await asyncio.sleep(0.5)
        series.append(round(rss()["VmRSS"] / 1024, 1))
    c3 = cpu()
    after = rss()
    alive = sum(1 for c in conns if not c.lost.done())
    res.update({"connections_alive_after_idle": alive,
                "broker_fds_before": fds_before,
                "broker_fds_open": proc_fd_count(pids) if pids else None,
                "broker_vmrss_before_kib": before["VmRSS"], "broker_vmrss_after_kib": after["VmRSS"],
                "broker_rssanon_before_kib": before["RssAnon"],
                "broker_rssanon_after_kib": after["RssAnon"],
                "per_half_second_rss_mib_idle": series})
    if pids and conns:
        res["rss_per_conn_kib"] = round((after["VmRSS"] - before["VmRSS"]) / len(conns), 2)
        res["rssanon_per_conn_kib"] = round((after["RssAnon"] - before["RssAnon"]) / len(conns), 2)
        res["broker_idle_cores"] = round((c3 - c2) / (time.perf_counter() - t2), 4)
    t3 = time.perf_counter()
    await asyncio.gather(*[c.close(timeout=10) for c in conns], return_exceptions=True)
    t4 = time.perf_counter()
    await asyncio.sleep(1.0)
    wall = t4 - t0
    res.update({"close_s": round(t4 - t3, 3),
                "broker_vmrss_after_close_kib": rss()["VmRSS"] if pids else None,
                "loadgen_cpu_s": round(self_cpu_seconds() - l0, 3),
                "loadgen_cpu_share": round((l1 - l0) / (t1 - t0), 3),  # during the connect
                **host_cpu_breakdown(h0, host_cpu_ticks(), wall),
                "broker_pid": cfg.broker_pid, "broker_pids": pids,
                "loadgen_loop": type(asyncio.get_running_loop()).__module__.split(".")[0]})
    if pids:
        res["broker_cpu_share"] = round((c1 - c0) / (t1 - t0), 3)  # during the connect
        res["broker_vmhwm_kib"] = sum(vm_kib(p, "VmHWM") or 0 for p in pids)
    if not conns:
        raise RuntimeError(f"no connection opened: {res['connect_errors']}")
    return res


# name -> coroutine function(cfg) -> result dict.
SCENARIOS = {
    "transient": scenario_transient,
    "confirmed": scenario_confirmed,
    "backlog": scenario_backlog,
    "fanout": scenario_fanout,
    "topic": scenario_topic,
    "latency": scenario_latency,
    "conns": scenario_conns,
    "consumers": scenario_consumers,
}

# Per-scenario defaults for options left unset on the command line (None).
SCENARIO_DEFAULTS = {
    "transient": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "max_backlog": 0},
    "confirmed": {"size": 256, "prefetch": 200, "multi_ack_every": 0, "max_backlog": 0},
    "backlog": {"size": 1024, "prefetch": 1000, "multi_ack_every": 100, "max_backlog": 0},
    # fanout/topic: the publisher pauses while more than max_backlog deliveries are
    # owed (published x deliveries per message - delivered), so that short runs
    # measure the steady state and not the drain of a warmup burst
    "fanout": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "no_ack": True,
               "max_backlog": 20000},
    "topic": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "no_ack": True,
              "max_backlog": 10000},
    "latency": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "max_backlog": 0},
    "conns": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "max_backlog": 0},
    "consumers": {"size": 256, "prefetch": 10, "multi_ack_every": 0, "max_backlog": 0},
}


def apply_scenario_defaults(args) -> None:
    """Fill options the user left as None with the scenario's defaults."""
    for k, v in SCENARIO_DEFAULTS.get(args.scenario, {}).items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if getattr(args, "no_ack", None) is None:
        args.no_ack = False


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Config()
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port)
    p.add_argument("--user", default=d.user)
    p.add_argument("--password", default=d.password)
    p.add_argument("--vhost", default=d.vhost)
    p.add_argument("--scenario", default=d.scenario, choices=sorted(SCENARIOS))
    p.add_argument("--duration", type=float, default=d.duration, help="measured seconds")
    p.add_argument("--warmup", type=float, default=d.warmup, help="unmeasured seconds first")
    p.add_argument("--size", type=int, default=None,
                   help="message body bytes (default: 256; backlog: 1024)")
    p.add_argument("--batch", type=int, default=d.batch, help="publishes per socket write")
    p.add_argument("--prefetch", type=int, default=None,
                   help="basic.qos; 0 = unlimited (default: 0; confirmed: 200; backlog: 1000)")
    p.add_argument("--multi-ack-every", type=int, default=None,
                   help="ack with multiple=true every N deliveries; 0 = one ack per message "
                        "(default: 0; backlog: 100)")
    p.add_argument("--window", type=int, default=d.window,
                   help="confirm scenarios: max unconfirmed publishes in flight")
    p.add_argument("--messages", type=int, default=d.messages,
                   help="backlog: messages to publish, then drain")
    p.add_argument("--data-dir", default=None,
                   help="backlog: broker data dir whose size is reported (if readable)")
    p.add_argument("--stall-timeout", type=float, default=d.stall_timeout,
                   help="fail when no confirm/delivery arrives for this many seconds")
    p.add_argument("--delete-queue", default=None, metavar="NAME",
                   help="only delete queue NAME and exit (cleanup after an aborted run)")
    p.add_argument("--no-ack", action="store_true", default=None,
                   help="consume with no-ack (auto ack); default for fanout and topic")
    p.add_argument("--ack", dest="no_ack", action="store_false",
                   help="manual ack (the default except for fanout and topic)")
    p.add_argument("--queues", type=int, default=d.queues,
                   help="fanout/topic: queues, one consumer each")
    p.add_argument("--consumer-conns", type=int, default=d.consumer_conns,
                   help="fanout/topic: connections shared by the consumers (0 = one each)")
    p.add_argument("--bindings", type=int, default=d.bindings,
                   help="topic: wildcard bindings over the queues")
    p.add_argument("--seed", type=int, default=d.seed, help="topic: RNG seed")
    p.add_argument("--key-pool", type=int, default=d.key_pool,
                   help="topic: pre-encoded messages (random routing keys) cycled")
    p.add_argument("--rate", type=float, default=d.rate, help="latency: publishes per second")
    p.add_argument("--connections", type=int, default=d.connections,
                   help="conns: idle connections to open")
    p.add_argument("--connect-concurrency", type=int, default=d.connect_concurrency,
                   help="conns: handshakes in flight at once")
    p.add_argument("--consumers", type=int, default=d.consumers,
                   help="consumers: consumers of the one queue")
    p.add_argument("--consumer-channels", choices=["one", "many"], default=d.consumer_channels,
                   help="consumers: all on one channel, or one channel each")
    p.add_argument("--max-backlog", type=int, default=None,
                   help="pause publishing while published-consumed exceeds N; 0 = off "
                        "(default 0; fanout 20,000 and topic 10,000 deliveries owed)")
    p.add_argument("--queue-args", default="",
                   help="backlog: the queue's arguments as JSON, e.g. '{\"x-message-ttl\": 86400000}'")
    p.add_argument("--priorities", type=int, default=d.priorities,
                   help="confirmed/backlog: publishes cycle through priorities 0..N-1 (0: none)")
    p.add_argument("--broker-pid", type=int, default=None,
                   help="broker pid for CPU/RSS accounting (its descendants are included)")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    apply_scenario_defaults(args)
    if args.delete_queue:
        async def _delete():
            conn = await connect(args.host, args.port, args.user, args.password, args.vhost,
                                 "bench-cleanup")
            try:
                return await delete_queue(conn, args.delete_queue, 1)
            finally:
                await conn.close()
        try:
            out = {"ok": True, "queue_delete": asyncio.run(_delete())}
        except Exception as exc:
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out))
        return 0 if out["ok"] else 1
    cfg = Config(**{k: v for k, v in vars(args).items() if k in Config.__dataclass_fields__})
    raise_nofile()  # conns needs > 1,024 fds; harmless elsewhere
    if args.loop == "uvloop":
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
    try:
        res = asyncio.run(SCENARIOS[cfg.scenario](cfg))
        res["ok"] = True
    except Exception as exc:
        res = {**getattr(exc, "partial_result", {}), "ok": False,
               "error": f"{type(exc).__name__}: {exc}"}
    res["config"] = asdict(cfg)
    print(json.dumps(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
