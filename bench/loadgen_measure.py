"""A load-generator run's settings (``Config``) and the steady-state measurement
(``measure``) that most scenarios share: a warm-up, then the counters sampled every second.

``measure`` reports the rates the bench tables print (``consumed_per_s`` is the headline),
the broker's and the load generator's CPU, the broker's RSS and disk writes per message,
and confirm latencies when the publishers confirm.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from loadgen_peers import Consumer, Publisher
from loadgen_proc import (
    host_cpu_breakdown,
    host_cpu_ticks,
    process_tree,
    self_cpu_seconds,
    tree_cpu_seconds,
    tree_io_bytes,
    vm_kib,
)


def latency_stats(lats: list[float]) -> dict:
    """Median/p99/max (ms) of sorted latencies in seconds."""
    if not lats:
        return {}
    n = len(lats)
    return {"confirm_latency_samples": n,
            "confirm_latency_p50_ms": round(1e3 * lats[n // 2], 3),
            "confirm_latency_p99_ms": round(1e3 * lats[min(n - 1, int(n * 0.99))], 3),
            "confirm_latency_max_ms": round(1e3 * lats[-1], 3)}


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
    queue_args: str = ""  # backlog, confirmed: the queue's arguments, JSON ("" = none)
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
