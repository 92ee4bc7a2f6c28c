"""The ``latency`` scenario: a paced publisher (``rate`` a second) and a manual-ack consumer;
each message carries its send time, and the consumer reports publish-to-delivery p50, p99
and p99.9, with the load generator's own event-loop lag beside them (a late loop would
show up as broker latency).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pamqp.commands as cmd
from loadgen_client import (
    BASIC_DELIVER,
    CLASS_METHOD,
    FRAME_HEADER,
    U64,
    BrokerClosed,
    Conn,
    as_text,
    connect,
    open_channel,
)
from loadgen_measure import Config, measure
from loadgen_peers import Consumer, Publisher, encode_publish


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
        pack = U64.pack
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
        unpack_hdr = FRAME_HEADER.unpack_from
        unpack_cm = CLASS_METHOD.unpack_from
        unpack_u64 = U64.unpack_from
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
                    "server_product": as_text(cconn.server_properties.get("product")),
                    "server_version": as_text(cconn.server_properties.get("version"))})
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
