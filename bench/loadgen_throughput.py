"""Scenarios of one transient queue: ``transient`` (one publisher, one consumer, no confirms:
the broker's plain throughput) and ``consumers`` (many consumers of one queue, each with a
prefetch: the cost of dispatching across consumers).
"""

from __future__ import annotations

import asyncio
import uuid

import pamqp.commands as cmd
from loadgen_client import (
    ACK_FRAME,
    BASIC_DELIVER,
    CLASS_METHOD,
    FRAME_END,
    FRAME_HEADER,
    U64,
    as_text,
    connect,
    open_channel,
)
from loadgen_measure import Config, measure
from loadgen_peers import Consumer, Publisher, encode_publish


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
                    "server_product": as_text(cconn.server_properties.get("product")),
                    "server_version": as_text(cconn.server_properties.get("version"))})
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
            ftype, ch, size = FRAME_HEADER.unpack_from(data, pos)
            end = pos + 8 + size
            if end > n:
                break
            if ftype == 1:
                if CLASS_METHOD.unpack_from(data, pos + 7)[0] == BASIC_DELIVER:
                    tag = U64.unpack_from(data, pos + 12 + data[pos + 11])[0]
                    count += 1
                    acks.append(ACK_FRAME.pack(1, ch, 13, 60, 80, tag, 0, FRAME_END))
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
    """``cfg.consumers`` consumers of one queue on one connection, with
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
