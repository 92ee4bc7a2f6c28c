"""Scenarios of one durable queue and persistent messages with publisher confirms:
``confirmed`` (publish and consume at once) and ``backlog`` (publish a backlog with no
consumer, then drain it: the store's write and read rates and the broker's memory).
"""

from __future__ import annotations

import asyncio
import json
import time

import pamqp.commands as cmd
from loadgen_client import Conn, as_text, connect, delete_queue, open_channel
from loadgen_measure import Config, latency_stats, measure
from loadgen_peers import ConfirmPublisher, Consumer, encode_publish
from loadgen_proc import (
    RssSampler,
    dir_size,
    host_cpu_breakdown,
    host_cpu_ticks,
    process_tree,
    self_cpu_seconds,
    tree_cpu_seconds,
    tree_io_bytes,
    vm_kib,
    vm_status,
)


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
        # e.g. '{"x-queue-type": "quorum"}': RabbitMQ's replicated queue, for comparison
        await declare_durable(cconn, qname, arguments=json.loads(cfg.queue_args or "{}"))
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
                    "server_product": as_text(cconn.server_properties.get("product")),
                    "server_version": as_text(cconn.server_properties.get("version"))})
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
                 "server_product": as_text(cconn.server_properties.get("product")),
                 "server_version": as_text(cconn.server_properties.get("version"))}

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
