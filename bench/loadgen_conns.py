"""The ``conns`` scenario: many idle connections, one channel each; what each costs the broker
(RSS per connection) and how long opening them all takes.
"""

from __future__ import annotations

import asyncio
import time

from loadgen_client import Conn, connect, open_channel
from loadgen_measure import Config
from loadgen_proc import (
    host_cpu_breakdown,
    host_cpu_ticks,
    proc_fd_count,
    proc_nofile,
    process_tree,
    raise_nofile,
    self_cpu_seconds,
    tree_cpu_seconds,
    vm_kib,
    vm_status,
)


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
