#!/usr/bin/env python3
"""Leveret vs RabbitMQ throughput comparison.

    python bench/run.py                                   # both targets, 3 rounds, A B A B ...
    python bench/run.py --target rabbitmq --rounds 1 --duration 5
    python bench/run.py --target leveret --leveret-addr 127.0.0.1:5673   # attach, don't spawn

Each round runs ``bench/loadgen.py`` in a fresh subprocess against each target
(Leveret is started fresh per round with a new temporary data dir; RabbitMQ is
whatever listens on 127.0.0.1:5672).  Raw results go to
``bench/results/<timestamp>.json``.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import loadgen
import loadgen_proc

DEFAULT_LEVERET_CMD = ("{python} -m leveret serve --port {port} --data-dir {data_dir} "
                       "--management-host 127.0.0.1 --management-port {management_port} "
                       "--prometheus-port {prometheus_port}")
TARGET_ORDER = ("leveret", "rabbitmq")


# ---------------------------------------------------------------------------
# Broker discovery / lifecycle
# ---------------------------------------------------------------------------


def listening_inodes(port: int) -> set[str]:
    """Socket inodes of TCP listeners on ``port`` (IPv4 and IPv6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            pass
    return inodes


def established_count(port: int) -> int:
    """Established TCP connections whose local port is ``port`` (clients of a broker)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except OSError:
            pass
    return n


def pid_listening_on(port: int) -> int | None:
    """The pid owning the listening socket on ``port`` (needs /proc/*/fd access)."""
    inodes = listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(f"{fd_dir}/{fd}") in targets:
                        return int(name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def amqp_ready(host: str, port: int, timeout: float = 2.0) -> bool:
    """True if ``host:port`` answers an AMQP 0-9-1 protocol header with a method frame."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            first = s.recv(1)
            return first == b"\x01"  # frame type 1 = method (Connection.Start)
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LeveretProcess:
    """``python -m leveret serve`` as a child process with its own data dir."""

    def __init__(self, cmd_template: str, start_timeout: float) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="leveret-bench-")
        self.port = free_port()
        # Its own HTTP ports: the defaults (15672/15692) belong to a RabbitMQ on this machine.
        self.management_port = free_port()
        self.prometheus_port = free_port()
        self.data_dir = os.path.join(self.tmp.name, "data")
        self.log_path = os.path.join(self.tmp.name, "leveret.log")
        self.cmd = shlex.split(cmd_template.format(
            python=shlex.quote(sys.executable), port=self.port, data_dir=self.data_dir,
            management_port=self.management_port, prometheus_port=self.prometheus_port))
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def start(self) -> int:
        """Start and wait until AMQP answers; returns the broker pid."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._log = open(self.log_path, "wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.tmp.name,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                     start_new_session=True)
        deadline = t0 + self.start_timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"leveret exited with {self.proc.returncode} during startup:\n"
                                   + self.log_tail())
            if amqp_ready("127.0.0.1", self.port, timeout=1.0):
                self.startup_s = round(time.perf_counter() - t0, 3)
                owner = pid_listening_on(self.port)
                # the listener may be a child (worker) of the process we started
                return self.proc.pid if owner is None else (
                    self.proc.pid if owner in loadgen_proc.process_tree(self.proc.pid) else owner)
            time.sleep(0.1)
        raise RuntimeError(f"leveret did not answer AMQP on port {self.port} within "
                           f"{self.start_timeout}s:\n" + self.log_tail())

    def log_tail(self, n: int = 25) -> str:
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join("    | " + line for line in lines[-n:])
        except OSError:
            return "    | (no log)"

    def log_problems(self, keep: int = 8) -> dict:
        """Count warning/error/traceback lines in the broker log (kept in the JSON)."""
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return {}
        bad = [ln for ln in lines
               if any(w in ln for w in ("ERROR", "CRITICAL", "Traceback", "WARNING", "Exception"))]
        return {"broker_log_lines": len(lines), "broker_log_problem_lines": len(bad),
                "broker_log_problems": bad[:keep] + (["...", *bad[-keep:]] if len(bad) > 2 * keep
                                                     else bad[keep:2 * keep])}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        if getattr(self, "_log", None):
            self._log.close()
        self.tmp.cleanup()


# ---------------------------------------------------------------------------
# One measurement
# ---------------------------------------------------------------------------


DURABLE_SCENARIOS = ("confirmed", "backlog")  # fixed queue name leveret-bench-<scenario>


def loadgen_timeout(args) -> float:
    if args.scenario == "backlog":
        # publish + drain of --messages at >= ~1,000 msg/s each, plus a queue delete
        return 300 + 2 * args.messages / 1000
    if args.scenario in DURABLE_SCENARIOS:
        return args.warmup + args.duration + 360  # deleting a durable queue can be slow
    if args.scenario == "conns":
        # connect (per-connection timeout <= 30 s, in waves of --connect-concurrency),
        # idle <= 5 s, close (<= 10 s)
        return 120 + 30 * args.connections / max(1, args.connect_concurrency)
    return args.warmup + args.duration + 60


def run_loadgen(host: str, port: int, broker_pid: int | None, args,
                data_dir: str | None = None) -> dict:
    cmd = [sys.executable, str(HERE / "loadgen.py"), "--host", host, "--port", str(port),
           "--scenario", args.scenario, "--duration", str(args.duration),
           "--warmup", str(args.warmup), "--size", str(args.size), "--batch", str(args.batch),
           "--prefetch", str(args.prefetch), "--multi-ack-every", str(args.multi_ack_every),
           "--max-backlog", str(args.max_backlog), "--loop", args.loop,
           "--queue-args", args.queue_args, "--priorities", str(args.priorities),
           "--window", str(args.window), "--messages", str(args.messages),
           "--stall-timeout", str(args.stall_timeout),
           "--queues", str(args.queues), "--consumer-conns", str(args.consumer_conns),
           "--bindings", str(args.bindings), "--seed", str(args.seed),
           "--key-pool", str(args.key_pool), "--rate", str(args.rate),
           "--connections", str(args.connections),
           "--connect-concurrency", str(args.connect_concurrency),
           "--consumers", str(args.consumers), "--consumer-channels", args.consumer_channels,
           "--user", args.user, "--password", args.password]
    cmd.append("--no-ack" if args.no_ack else "--ack")
    if broker_pid:
        cmd += ["--broker-pid", str(broker_pid)]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    timeout = loadgen_timeout(args)
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        res = {"ok": False, "error": f"loadgen timed out after {timeout:.0f}s"}
        if args.scenario in DURABLE_SCENARIOS:
            res["cleanup"] = delete_bench_queue(host, port, args)
        return res
    lines = cp.stdout.strip().splitlines()
    try:
        res = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "error": f"loadgen rc={cp.returncode}, no JSON; stderr:\n"
                                      f"{cp.stderr[-2000:]}"}
    if cp.stderr.strip():
        res["loadgen_stderr"] = cp.stderr[-2000:]
    return res


def delete_bench_queue(host: str, port: int, args) -> str:
    """Delete leveret-bench-<scenario> after an aborted run (the loadgen was killed
    before its own cleanup); matters for RabbitMQ, which keeps state between rounds."""
    cmd = [sys.executable, str(HERE / "loadgen.py"), "--host", host, "--port", str(port),
           "--user", args.user, "--password", args.password,
           "--delete-queue", f"leveret-bench-{args.scenario}"]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        return cp.stdout.strip().splitlines()[-1] if cp.stdout.strip() else cp.stderr[-500:]
    except subprocess.TimeoutExpired:
        return "queue delete timed out"


def run_target(target: str, args) -> dict:
    t0 = time.time()
    if target == "rabbitmq":
        host, port = args.rabbitmq_host, args.rabbitmq_port
        if not amqp_ready(host, port):
            return {"ok": False, "skipped": True,
                    "error": f"nothing answers AMQP on {host}:{port} "
                             f"(start it with: bench/rabbitmq.sh start)"}
        pid = args.rabbitmq_pid or pid_listening_on(port)
        others = established_count(port)
        res = run_loadgen(host, port, pid, args, data_dir=args.rabbitmq_data_dir)
        if not res.get("ok") and args.scenario in DURABLE_SCENARIOS and "cleanup" not in res:
            res["cleanup"] = delete_bench_queue(host, port, args)
        res["other_clients_before"] = others
        if pid:
            res["broker_vmhwm_note"] = "RabbitMQ is long-running: VmHWM is its lifetime peak"
    else:
        if args.leveret_addr:
            host, sport = args.leveret_addr.rsplit(":", 1)
            port = int(sport)
            if not amqp_ready(host, port):
                return {"ok": False, "skipped": True,
                        "error": f"nothing answers AMQP on {args.leveret_addr}"}
            res = run_loadgen(host, port, args.leveret_pid or pid_listening_on(port), args)
        else:
            lev = LeveretProcess(args.leveret_cmd, args.start_timeout)
            try:
                pid = lev.start()
            except Exception as exc:
                lev.stop()
                return {"ok": False, "skipped": True, "error": f"leveret failed to start: {exc}",
                        "cmd": lev.cmd}
            try:
                res = run_loadgen("127.0.0.1", lev.port, pid, args, data_dir=lev.data_dir)
                res["broker_startup_s"] = lev.startup_s
                res["cmd"] = lev.cmd
                if not res.get("ok"):
                    res["broker_log_tail"] = lev.log_tail()
                res.update(lev.log_problems())
            finally:
                lev.stop()
    res["target"] = target
    res["started_at"] = t0
    return res


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _mib(key):
    return lambda r: r[key] / 1024 if r.get(key) is not None else None


def _dir_mib(key):
    return lambda r: (r[key]["disk_bytes"] / 2**20) if r.get(key) else None


def _get(key):
    return lambda r: r.get(key)


# scenario -> [(label, getter, format, compare as ratio)]; the first entry is the headline
METRICS = {
    "confirmed": [
        ("consumed msg/s (end-to-end)", _get("consumed_per_s"), ",.0f", True),
        ("confirms/s", _get("confirms_per_s"), ",.0f", True),
        ("publish->confirm p50 ms", _get("confirm_latency_p50_ms"), ".1f", True),
        ("publish->confirm p99 ms", _get("confirm_latency_p99_ms"), ".1f", True),
        ("broker CPU us/msg", _get("broker_cpu_us_per_msg"), ".1f", True),
        ("broker cores", _get("broker_cpu_share"), ".2f", True),
        ("broker disk writes B/msg", _get("broker_disk_write_bytes_per_msg"), ",.0f", True),
        ("peak broker RSS MiB (VmHWM)", _mib("broker_vmhwm_kib"), ".0f", True),
        ("loadgen cores", _get("loadgen_cpu_share"), ".2f", False),
        ("other processes, cores", _get("other_cores"), ".2f", False),
    ],
    "backlog": [
        ("publish msg/s (confirmed)", _get("publish_per_s"), ",.0f", True),
        ("drain msg/s", _get("drain_per_s"), ",.0f", True),
        ("publish s", _get("publish_s"), ".1f", True),
        ("drain s", _get("drain_s"), ".1f", True),
        ("total s", _get("total_s"), ".1f", True),
        ("publish->confirm p50 ms", _get("confirm_latency_p50_ms"), ".1f", True),
        ("publish->confirm p99 ms", _get("confirm_latency_p99_ms"), ".1f", True),
        ("RSS peak during publish MiB", _mib("rss_peak_publish_kib"), ".0f", True),
        ("  of which anon (RssAnon) MiB", _mib("rss_anon_peak_publish_kib"), ".0f", True),
        ("peak RSS whole run MiB (VmHWM)", _mib("broker_vmhwm_kib"), ".0f", True),
        ("peak RssAnon whole run MiB", _mib("rss_anon_peak_kib"), ".0f", True),
        ("data dir after publish MiB", _dir_mib("data_dir_after_publish"), ",.0f", True),
        ("broker CPU us/msg (pub+drain)", _get("broker_cpu_us_per_msg"), ".1f", True),
        ("  of which publish", _get("broker_publish_cpu_us_per_msg"), ".1f", True),
        ("  of which drain", _get("broker_drain_cpu_us_per_msg"), ".1f", True),
        ("broker cores", _get("broker_cpu_share"), ".2f", True),
        ("broker disk writes B/msg", _get("broker_disk_write_bytes_per_msg"), ",.0f", True),
        ("loadgen cores", _get("loadgen_cpu_share"), ".2f", False),
        ("other processes, cores", _get("other_cores"), ".2f", False),
    ],
}

METRICS.update({
    "fanout": [
        ("deliveries/s (sum over consumers)", _get("consumed_per_s"), ",.0f", True),
        ("published msg/s", _get("published_per_s"), ",.0f", True),
        ("deliveries per published msg", _get("deliveries_per_published"), ".2f", False),
        ("broker CPU us/delivery", _get("broker_cpu_us_per_msg"), ".1f", True),
        ("broker CPU us/published msg", _get("broker_cpu_us_per_published"), ".1f", True),
        ("broker cores", _get("broker_cpu_share"), ".2f", True),
        ("peak broker RSS MiB (VmHWM)", _mib("broker_vmhwm_kib"), ".0f", True),
        ("deliveries owed at end", _get("backlog_at_end"), ",.0f", False),
        ("loadgen cores", _get("loadgen_cpu_share"), ".2f", False),
        ("other processes, cores", _get("other_cores"), ".2f", False),
    ],
    "topic": [
        ("published msg/s", _get("published_per_s"), ",.0f", True),
        ("deliveries/s (sum over consumers)", _get("consumed_per_s"), ",.0f", True),
        ("deliveries per published msg", _get("deliveries_per_published"), ".3f", False),
        ("  expected from the patterns", _get("topic_expected_deliveries_per_msg"), ".3f", False),
        ("broker CPU us/published msg", _get("broker_cpu_us_per_published"), ".1f", True),
        ("broker CPU us/delivery", _get("broker_cpu_us_per_msg"), ".1f", True),
        ("broker cores", _get("broker_cpu_share"), ".2f", True),
        ("declare+bind 1,000 bindings s", _get("setup_s"), ".2f", True),
        ("peak broker RSS MiB (VmHWM)", _mib("broker_vmhwm_kib"), ".0f", True),
        ("deliveries owed at end (approx.)", _get("backlog_at_end"), ",.0f", False),
        ("loadgen cores", _get("loadgen_cpu_share"), ".2f", False),
        ("other processes, cores", _get("other_cores"), ".2f", False),
    ],
    "latency": [
        ("publish->deliver p50 us", _get("latency_p50_us"), ",.0f", True),
        ("publish->deliver p99 us", _get("latency_p99_us"), ",.0f", True),
        ("publish->deliver p99.9 us", _get("latency_p999_us"), ",.0f", True),
        ("publish->deliver max us", _get("latency_max_us"), ",.0f", True),
        ("samples", _get("latency_samples"), ",.0f", False),
        ("delivered msg/s", _get("consumed_per_s"), ",.0f", False),
        ("broker CPU us/msg", _get("broker_cpu_us_per_msg"), ".1f", True),
        ("loadgen loop lag p50 us", _get("loop_lag_p50_us"), ",.0f", False),
        ("loadgen loop lag p99 us", _get("loop_lag_p99_us"), ",.0f", False),
        ("loadgen loop lag max us", _get("loop_lag_max_us"), ",.0f", False),
        ("pacer send lateness p99 us", _get("send_late_p99_us"), ",.0f", False),
        ("loadgen cores", _get("loadgen_cpu_share"), ".2f", False),
        ("other processes, cores", _get("other_cores"), ".2f", False),
    ],
    "conns": [
        ("broker RSS per connection KiB", _get("rss_per_conn_kib"), ".1f", True),
        ("  of which anon (RssAnon) KiB", _get("rssanon_per_conn_kib"), ".1f", True),
        ("connect all s", _get("connect_s"), ".2f", True),
        ("connections opened", _get("connections_ok"), ",.0f", False),
        ("broker CPU ms per connect", _get("broker_cpu_ms_per_connect"), ".2f", True),
        ("broker cores while idle", _get("broker_idle_cores"), ".3f", True),
        ("close all s", _get("close_s"), ".2f", True),
        ("broker RSS before MiB", _mib("broker_vmrss_before_kib"), ".0f", True),
        ("broker RSS with conns MiB", _mib("broker_vmrss_after_kib"), ".0f", True),
        ("loadgen cores (connect)", _get("loadgen_cpu_share"), ".2f", False),
        ("other processes, cores", _get("other_cores"), ".2f", False),
    ],
})

# The combined table of --scenario all: (scenario, label, getter, format, higher is better)
COMBINED = [
    ("transient", "consumed msg/s", _get("consumed_per_s"), ",.0f", True),
    ("transient", "broker CPU us/msg", _get("broker_cpu_us_per_msg"), ".1f", False),
    ("confirmed", "consumed msg/s", _get("consumed_per_s"), ",.0f", True),
    ("confirmed", "broker CPU us/msg", _get("broker_cpu_us_per_msg"), ".1f", False),
    ("fanout", "deliveries/s", _get("consumed_per_s"), ",.0f", True),
    ("fanout", "published msg/s", _get("published_per_s"), ",.0f", True),
    ("topic", "published msg/s", _get("published_per_s"), ",.0f", True),
    ("topic", "deliveries/s", _get("consumed_per_s"), ",.0f", True),
    ("topic", "broker CPU us/published", _get("broker_cpu_us_per_published"), ".1f", False),
    ("latency", "p50 us", _get("latency_p50_us"), ",.0f", False),
    ("latency", "p99 us", _get("latency_p99_us"), ",.0f", False),
    ("latency", "p99.9 us", _get("latency_p999_us"), ",.0f", False),
    ("backlog", "publish msg/s", _get("publish_per_s"), ",.0f", True),
    ("backlog", "drain msg/s", _get("drain_per_s"), ",.0f", True),
    ("backlog", "RSS peak publish MiB", _mib("rss_peak_publish_kib"), ".0f", False),
    ("conns", "RSS KiB/connection", _get("rss_per_conn_kib"), ".1f", False),
    ("conns", "connect all s", _get("connect_s"), ".2f", False),
]

ALL_SCENARIOS = ("transient", "confirmed", "fanout", "topic", "latency", "backlog", "conns")
ALL_BACKLOG_MESSAGES = 200_000  # --scenario all without --messages

SCENARIO_DESCRIPTIONS = {
    "confirmed": "persistent (delivery_mode=2), durable queue",
    "backlog": "persistent (delivery_mode=2), durable queue",
    "fanout": "transient, 1 producer -> fanout exchange -> {queues} queues -> 1 consumer each "
              "({conns})",
    "topic": "transient, topic exchange, {bindings} wildcard bindings over {queues} queues, "
             "seed {seed}, {key_pool} keys cycled ({conns})",
    "latency": "transient, paced at {rate:,.0f} msg/s, 1 consumer on its own connection",
    "conns": "{connections:,} idle connections x 1 channel, heartbeat 0, "
             "{connect_concurrency} handshakes in flight",
    "consumers": "transient, {consumers:,} consumers of 1 queue on {consumer_channels} "
                 "channel(s) of 1 connection, qos {prefetch} each, 1 ack per message",
}

RABBITMQ_DURABILITY_NOTE = """Note on RabbitMQ's disk behaviour (not the same work as Leveret's):
  RabbitMQ 3.10 classic queue, default (v1) index.  Bodies under 4 KB
  (queue_index_embed_msgs_below) are embedded in the queue-index journal, not the
  message store.  The publisher confirm for a persistent message waits until the
  queue's index/store has synced, but syncs are batched: the node sync-flushes
  when idle or every ~25 ms, not once per message.  strace on this VM counted
  ~1 fsync/fdatasync per ~300 confirms.  So RabbitMQ does fsync before
  confirming, but in large groups; it is not a per-message fsync.  Segment files
  are written lazily, so "data dir" and "disk writes" are not comparable
  byte-for-byte with Leveret's LMDB (copy-on-write B+tree pages).  RabbitMQ's
  data dir is the whole mnesia dir (other vhosts/queues included), and its
  VmHWM is the node's lifetime peak: use "RSS peak during publish" (sampled
  VmRSS) for it.  RSS includes mmapped file pages (LMDB's data file is read
  through mmap); RssAnon excludes them."""


def summarize_metrics(rounds: list[dict], targets: list[str], scenario: str,
                      metrics: list | None = None) -> dict:
    """Median/min/max per metric and target, plus per-round Leveret/RabbitMQ ratios."""
    out: dict = {"metrics": {}}
    for label, get, _, as_ratio in (metrics if metrics is not None else METRICS[scenario]):
        m: dict = {}
        for t in targets:
            vals = [get(r[t]) for r in rounds if t in r and r[t].get("ok")]
            vals = [v for v in vals if v is not None]
            if vals:
                m[t] = {"median": _median(vals), "min": min(vals), "max": max(vals),
                        "n": len(vals)}
        if as_ratio:
            ratios = []
            for r in rounds:
                a, b = r.get("leveret", {}), r.get("rabbitmq", {})
                if a.get("ok") and b.get("ok"):
                    va, vb = get(a), get(b)
                    if va is not None and vb:
                        ratios.append(va / vb)
            if ratios:
                m["ratio"] = {"median": _median(ratios), "min": min(ratios),
                              "max": max(ratios), "n": len(ratios)}
        out["metrics"][label] = m
    for t in targets:
        ok = [r[t] for r in rounds if t in r and r[t].get("ok")]
        if ok:
            out[t] = {"rounds_ok": len(ok)}
    return out


def print_metrics(summary: dict, targets: list[str], args) -> None:
    print()
    extra = (f" messages={args.messages:,}" if args.scenario == "backlog"
             else "" if args.scenario == "conns"
             else f" duration={args.duration}s warmup={args.warmup}s")
    desc = SCENARIO_DESCRIPTIONS.get(args.scenario, "").format(
        conns=(f"{args.consumer_conns} consumer connections" if args.consumer_conns
               else "one connection per consumer"), **vars(args))
    window = f" window={args.window}" if args.scenario in DURABLE_SCENARIOS else ""
    gate = f" max-backlog={args.max_backlog:,}" if args.max_backlog else ""
    print(f"scenario={args.scenario} size={args.size}B{extra} rounds={args.rounds}{window} "
          f"batch={args.batch} prefetch={args.prefetch or 'unlimited'}{gate} "
          f"ack={_ack_mode(args)} {desc}")
    fmts = {label: f for label, _g, f, _r in METRICS[args.scenario]}

    def cell(d, spec):
        if not d:
            return "-"
        if d["n"] == 1:
            return _fmt(d["median"], spec)
        return f"{_fmt(d['median'], spec)} ({_fmt(d['min'], spec)}..{_fmt(d['max'], spec)})"

    cols = targets + (["ratio"] if len(targets) > 1 else [])
    heads = {"leveret": "leveret median (min..max)", "rabbitmq": "rabbitmq median (min..max)",
             "ratio": "leveret/rabbitmq"}
    rows = [(label, [cell(m.get(c), ".3f" if c == "ratio" else fmts[label]) for c in cols])
            for label, m in summary["metrics"].items()]
    w0 = max(len(r[0]) for r in rows)
    ws = [max([len(heads[c])] + [len(r[1][i]) for r in rows]) for i, c in enumerate(cols)]
    hdr = f"{'':<{w0}}  " + "  ".join(f"{heads[c]:>{w}}" for c, w in zip(cols, ws))
    print(hdr)
    print("-" * len(hdr))
    for label, cells in rows:
        print(f"{label:<{w0}}  " + "  ".join(f"{x:>{w}}" for x, w in zip(cells, ws)))
    for t in targets:
        if t not in summary:
            print(f"{t}: no successful round")
    print("ratio = median (min..max) of the per-round leveret/rabbitmq ratios (A B pairs); "
          "for times, latencies, CPU and memory lower is better.")
    print("cores = CPU seconds per wall second (1.0 = one core); "
          f"this machine has {os.cpu_count()} CPUs.")
    if "rabbitmq" in targets and args.scenario in DURABLE_SCENARIOS:
        print(RABBITMQ_DURABILITY_NOTE)
    if args.scenario == "latency":
        print("latency = consumer's data_received entry - send time in the body "
              "(monotonic ns); loop lag = call_soon delay in the loadgen, sampled every 5 ms.")
    if args.scenario == "conns":
        print("RSS per connection = (broker VmRSS with the connections open, after an idle "
              "settle - VmRSS before) / connections opened.")


def round_line(i: int, t: str, res: dict, args) -> str:
    head = f"round {i + 1}/{args.rounds} {t:<9}"
    tail = (f"broker {_fmt(res.get('broker_cpu_us_per_msg'), '.1f')} us/msg "
            f"{_fmt(res.get('broker_cpu_share'), '.2f')} cores, "
            f"loadgen {res['loadgen_cpu_share']:.2f} cores, "
            f"host idle {_fmt(res.get('host_idle_cores'), '.2f')} cores")
    if args.scenario == "backlog":
        dd = res.get("data_dir_after_publish")
        return (f"{head} publish {res['publish_per_s']:>9,.0f} msg/s ({res['publish_s']:.1f}s, "
                f"p50/p99 {_fmt(res.get('confirm_latency_p50_ms'), '.0f')}/"
                f"{_fmt(res.get('confirm_latency_p99_ms'), '.0f')} ms), "
                f"drain {res['drain_per_s']:,.0f} msg/s ({res['drain_s']:.1f}s), "
                f"total {res['total_s']:.1f}s; RSS peak publish "
                f"{_fmt(_mib('rss_peak_publish_kib')(res), '.0f')} MiB, VmHWM "
                f"{_fmt(_mib('broker_vmhwm_kib')(res), '.0f')} MiB, data dir "
                f"{_fmt(dd['disk_bytes'] / 2**20 if dd else None, ',.0f')} MiB; " + tail)
    if args.scenario == "fanout":
        return (f"{head} {res['consumed_per_s']:>10,.0f} deliveries/s, published "
                f"{res['published_per_s']:,.0f} msg/s ({_fmt(res.get('deliveries_per_published'), '.2f')}"
                f" deliveries/msg), broker {_fmt(res.get('broker_cpu_us_per_published'), '.1f')} "
                f"us/published msg; " + tail)
    if args.scenario == "topic":
        return (f"{head} published {res['published_per_s']:>9,.0f} msg/s, "
                f"{res['consumed_per_s']:,.0f} deliveries/s "
                f"({_fmt(res.get('deliveries_per_published'), '.3f')}/msg, expected "
                f"{_fmt(res.get('topic_expected_deliveries_per_msg'), '.3f')}), broker "
                f"{_fmt(res.get('broker_cpu_us_per_published'), '.1f')} us/published msg, "
                f"setup {_fmt(res.get('setup_s'), '.2f')}s; " + tail)
    if args.scenario == "latency":
        return (f"{head} p50/p99/p99.9/max {_fmt(res.get('latency_p50_us'))}/"
                f"{_fmt(res.get('latency_p99_us'))}/{_fmt(res.get('latency_p999_us'))}/"
                f"{_fmt(res.get('latency_max_us'))} us over {_fmt(res.get('latency_samples'))} "
                f"msgs at {res['consumed_per_s']:,.0f}/s; loadgen loop lag p50/p99/max "
                f"{_fmt(res.get('loop_lag_p50_us'))}/{_fmt(res.get('loop_lag_p99_us'))}/"
                f"{_fmt(res.get('loop_lag_max_us'))} us, send lateness p99 "
                f"{_fmt(res.get('send_late_p99_us'))} us; " + tail)
    if args.scenario == "conns":
        return (f"{head} {res['connections_ok']:,}/{res['connections_wanted']:,} connections in "
                f"{res['connect_s']:.2f}s, RSS {_fmt(_mib('broker_vmrss_before_kib')(res), '.0f')}"
                f" -> {_fmt(_mib('broker_vmrss_after_kib')(res), '.0f')} MiB = "
                f"{_fmt(res.get('rss_per_conn_kib'), '.1f')} KiB/conn (anon "
                f"{_fmt(res.get('rssanon_per_conn_kib'), '.1f')}), close {res['close_s']:.2f}s; "
                f"fd limit broker {res.get('broker_fd_limit')} loadgen "
                f"{res.get('loadgen_fd_limit')}; broker {_fmt(res.get('broker_cpu_ms_per_connect'), '.2f')}"
                f" ms/connect, loadgen {res['loadgen_cpu_share']:.2f} cores, host idle "
                f"{_fmt(res.get('host_idle_cores'), '.2f')} cores")
    if args.scenario == "confirmed":
        return (f"{head} {res['consumed_per_s']:>10,.0f} msg/s consumed, "
                f"{res['confirms_per_s']:,.0f} confirms/s, p50/p99 "
                f"{_fmt(res.get('confirm_latency_p50_ms'), '.1f')}/"
                f"{_fmt(res.get('confirm_latency_p99_ms'), '.1f')} ms; " + tail)
    return (f"{head} {res['consumed_per_s']:>10,.0f} msg/s "
            f"(published {res['published_per_s']:,.0f}/s) " + tail)


def summarize(rounds: list[dict], targets: list[str]) -> dict:
    summary: dict = {}
    for t in targets:
        ok = [r[t] for r in rounds if t in r and r[t].get("ok")]
        if not ok:
            continue
        rates = [r["consumed_per_s"] for r in ok]
        summary[t] = {
            "rounds_ok": len(ok),
            "median_msg_s": _median(rates),
            "min_msg_s": min(rates),
            "max_msg_s": max(rates),
            "median_published_s": _median([r["published_per_s"] for r in ok]),
            "median_broker_cpu_us_per_msg": _median([r.get("broker_cpu_us_per_msg") for r in ok]),
            "median_broker_cpu_share": _median([r.get("broker_cpu_share") for r in ok]),
            "peak_broker_vmhwm_mib": (max(r.get("broker_vmhwm_kib") or 0 for r in ok) / 1024
                                      if any(r.get("broker_vmhwm_kib") for r in ok) else None),
            "median_loadgen_cpu_share": _median([r.get("loadgen_cpu_share") for r in ok]),
            "median_other_cores": _median([r.get("other_cores") for r in ok]),
        }
    ratios = [r["leveret"]["consumed_per_s"] / r["rabbitmq"]["consumed_per_s"]
              for r in rounds
              if r.get("leveret", {}).get("ok") and r.get("rabbitmq", {}).get("ok")
              and r["rabbitmq"]["consumed_per_s"]]
    if ratios:
        summary["ratio_leveret_over_rabbitmq"] = {
            "median": _median(ratios), "min": min(ratios), "max": max(ratios),
            "per_round": ratios}
    return summary


def _fmt(x, spec=",.0f", none="-"):
    return none if x is None else format(x, spec)


def _ack_mode(args) -> str:
    if args.no_ack:
        return "no-ack"
    if args.multi_ack_every:
        return f"multiple every {args.multi_ack_every}"
    return "each message"


def print_summary(summary: dict, targets: list[str], args) -> None:
    print()
    print(f"scenario={args.scenario} size={args.size}B duration={args.duration}s "
          f"warmup={args.warmup}s rounds={args.rounds} prefetch={args.prefetch or 'unlimited'} "
          f"ack={_ack_mode(args)}")
    hdr = (f"{'target':<10} {'median msg/s':>13} {'min..max msg/s':>21} {'broker us/msg':>14} "
           f"{'broker cores':>13} {'peak RSS MiB':>13} {'loadgen cores':>14}")
    print(hdr)
    print("-" * len(hdr))
    for t in targets:
        s = summary.get(t)
        if not s:
            print(f"{t:<10} {'(no successful round)':>13}")
            continue
        print(f"{t:<10} {_fmt(s['median_msg_s']):>13} "
              f"{_fmt(s['min_msg_s']) + '..' + _fmt(s['max_msg_s']):>21} "
              f"{_fmt(s['median_broker_cpu_us_per_msg'], '.1f'):>14} "
              f"{_fmt(s['median_broker_cpu_share'], '.2f'):>13} "
              f"{_fmt(s['peak_broker_vmhwm_mib'], '.0f'):>13} "
              f"{_fmt(s['median_loadgen_cpu_share'], '.2f'):>14}")
    r = summary.get("ratio_leveret_over_rabbitmq")
    if r:
        print(f"\nLeveret/RabbitMQ msg/s ratio: median {r['median']:.3f} "
              f"(min {r['min']:.3f}, max {r['max']:.3f} over {len(r['per_round'])} round(s))")
    print("broker cores / loadgen cores = CPU seconds per wall second (1.0 = one core); "
          f"this machine has {os.cpu_count()} CPUs.")


def run_scenario(args) -> dict:
    """All rounds of one scenario (A B A B ...), per-round lines and its table."""
    targets = list(TARGET_ORDER) if args.target == "both" else [args.target]
    rounds: list[dict] = []
    dead: dict[str, str] = {}  # target -> reason it is skipped for the remaining rounds
    for i in range(args.rounds):
        rnd: dict = {}
        for t in targets:
            if t in dead:
                continue
            res = run_target(t, args)
            rnd[t] = res
            if res.get("ok"):
                other = None
                if res.get("host_busy_cores") is not None:
                    other = (res["host_busy_cores"] - res["loadgen_cpu_share"]
                             - (res.get("broker_cpu_share") or 0))
                    res["other_cores"] = round(other, 3)
                print(round_line(i, t, res, args), flush=True)
                if res.get("broker_log_problem_lines"):
                    print(f"  NOTE: {res['broker_log_problem_lines']} warning/error line(s) in "
                          f"the Leveret log, e.g. {res['broker_log_problems'][:2]}", flush=True)
                if res.get("other_clients_before"):
                    print(f"  WARNING: {res['other_clients_before']} other client connection(s) "
                          f"were open on the broker; its CPU figures include their load",
                          flush=True)
                if other is not None and other > 0.25 and res.get("broker_cpu_share") is not None:
                    print(f"  WARNING: {other:.2f} cores used by other processes during the "
                          f"measurement - figures are not clean", flush=True)
                if res.get("connections_failed"):
                    print(f"  WARNING: {res['connections_failed']} connection(s) failed: "
                          f"{res.get('connect_errors')}", flush=True)
            else:
                print(f"round {i + 1}/{args.rounds} {t:<9} FAILED: {res.get('error')}", flush=True)
                if res.get("partial"):
                    print(f"  partial: confirmed {res.get('confirmed')}, consumed "
                          f"{res.get('consumed')}, VmHWM at error "
                          f"{_fmt(_mib('vmhwm_at_error_kib')(res), '.0f')} MiB", flush=True)
                if res.get("cleanup"):
                    print(f"  cleanup: {res['cleanup']}", flush=True)
                if res.get("broker_log_tail"):
                    print(res["broker_log_tail"])
                if res.get("skipped"):
                    dead[t] = res["error"]
                    print(f"  -> skipping {t} for the remaining rounds", flush=True)
        rounds.append(rnd)

    if args.scenario in METRICS:
        summary = summarize_metrics(rounds, targets, args.scenario)
        print_metrics(summary, targets, args)
        if not any(t in summary for t in targets):
            summary = {}
    else:
        summary = summarize(rounds, targets)
        print_summary(summary, targets, args)
    return {"args": vars(args), "rounds": rounds, "summary": summary, "skipped": dead,
            "targets": targets}


def scenario_args(args, scenario: str) -> argparse.Namespace:
    """A copy of the command-line options with ``scenario``'s defaults filled in."""
    a = argparse.Namespace(**vars(args))
    a.scenario = scenario
    if a.messages is None:
        a.messages = ALL_BACKLOG_MESSAGES if args.scenario == "all" else 1_000_000
    loadgen.apply_scenario_defaults(a)
    return a


def combined_table(results: dict) -> list[dict]:
    """One row per (scenario, metric) of COMBINED, from each scenario's rounds."""
    rows = []
    for scen, label, get, spec, higher in COMBINED:
        r = results.get(scen)
        if r is None:
            continue
        summ = summarize_metrics(r["rounds"], r["targets"], scen, [(label, get, spec, True)])
        m = summ["metrics"][label]
        rows.append({"scenario": scen, "metric": label, "format": spec,
                     "higher_is_better": higher, **m})
    return rows


def print_combined(rows: list[dict], wall_s: float) -> None:
    print()
    print(f"=== all scenarios (wall {wall_s / 60:.1f} min) ===")

    def val(d, spec):
        if not d:
            return "-"
        if d["n"] == 1:
            return _fmt(d["median"], spec)
        return f"{_fmt(d['median'], spec)} ({_fmt(d['min'], spec)}..{_fmt(d['max'], spec)})"

    table = [("scenario", "metric", "better", "leveret", "rabbitmq", "ratio L/R", "ratio spread")]
    for r in rows:
        ratio = r.get("ratio")
        table.append((r["scenario"], r["metric"], "higher" if r["higher_is_better"] else "lower",
                      val(r.get("leveret"), r["format"]), val(r.get("rabbitmq"), r["format"]),
                      _fmt(ratio["median"], ".3f") if ratio else "-",
                      (f"{ratio['min']:.3f}..{ratio['max']:.3f} (n={ratio['n']})"
                       if ratio else "-")))
    ws = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for k, row in enumerate(table):
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in
                        enumerate(zip(row, ws))))
        if k == 0:
            print("-" * (sum(ws) + 2 * (len(ws) - 1)))
    print("leveret/rabbitmq = median over the rounds of the per-round (A B pair) ratio; "
          "spread = its min..max.  Single-round medians are one measurement.")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=["both", "leveret", "rabbitmq"], default="both")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scenario", choices=[*sorted(loadgen.SCENARIOS), "all"], default="transient",
                   help="all = " + ", ".join(ALL_SCENARIOS) + " in that order")
    p.add_argument("--duration", type=float, default=10.0,
                   help="measured seconds per run (conns: idle time, capped at 5 s)")
    p.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before")
    p.add_argument("--size", type=int, default=None,
                   help="message body bytes (default 256; backlog: 1024)")
    p.add_argument("--batch", type=int, default=50, help="publishes per socket write")
    p.add_argument("--prefetch", type=int, default=None,
                   help="basic.qos (0 = unlimited, PerfTest default; confirmed: 200; backlog: 1000)")
    p.add_argument("--multi-ack-every", type=int, default=None,
                   help="ack multiple=true every N (0 = ack each message, PerfTest default; "
                        "backlog: 100)")
    p.add_argument("--window", type=int, default=1000,
                   help="confirmed/backlog: max unconfirmed publishes in flight")
    p.add_argument("--messages", type=int, default=None,
                   help="backlog: messages to publish (no consumer), then drain "
                        f"(default 1,000,000; with --scenario all {ALL_BACKLOG_MESSAGES:,})")
    p.add_argument("--stall-timeout", type=float, default=60.0,
                   help="loadgen fails when no confirm/delivery arrives for this many seconds")
    p.add_argument("--rabbitmq-data-dir", default="/var/lib/rabbitmq/mnesia",
                   help="backlog: RabbitMQ data dir whose size is reported (skipped if unreadable)")
    p.add_argument("--no-ack", action="store_true", default=None,
                   help="consume with no-ack (default for fanout and topic)")
    p.add_argument("--ack", dest="no_ack", action="store_false",
                   help="manual ack (default except for fanout and topic)")
    p.add_argument("--max-backlog", type=int, default=None,
                   help="loadgen-side cap on published-consumed (0 = off, PerfTest default; "
                        "fanout: 20,000, topic: 10,000 deliveries owed)")
    p.add_argument("--queue-args", default="",
                   help="backlog: the durable queue's arguments as JSON, e.g. "
                        "'{\"x-message-ttl\": 86400000}' or '{\"x-max-length\": 20000000}'")
    p.add_argument("--priorities", type=int, default=0,
                   help="backlog/confirmed: publishes cycle through priorities 0..N-1, e.g. "
                        "--priorities 10 --queue-args '{\"x-max-priority\": 9}'")
    p.add_argument("--queues", type=int, default=10, help="fanout/topic: queues, 1 consumer each")
    p.add_argument("--consumers", type=int, default=1000,
                   help="consumers: consumers of the one queue")
    p.add_argument("--consumer-channels", choices=["one", "many"], default="one",
                   help="consumers: all on one channel, or one channel each")
    p.add_argument("--consumer-conns", type=int, default=0,
                   help="fanout/topic: connections shared by the consumers (0 = one each; "
                        "sharing needs no-ack)")
    p.add_argument("--bindings", type=int, default=1000, help="topic: wildcard bindings")
    p.add_argument("--seed", type=int, default=6, help="topic: RNG seed for patterns and keys")
    p.add_argument("--key-pool", type=int, default=20000,
                   help="topic: pre-encoded messages (random routing keys) the publisher cycles")
    p.add_argument("--rate", type=float, default=1000.0, help="latency: msg/s, paced")
    p.add_argument("--connections", type=int, default=1000, help="conns: idle connections")
    p.add_argument("--connect-concurrency", type=int, default=100,
                   help="conns: handshakes in flight at once")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                   help="loadgen event loop")
    p.add_argument("--user", default="guest")
    p.add_argument("--password", default="guest")
    p.add_argument("--rabbitmq-host", default="127.0.0.1")
    p.add_argument("--rabbitmq-port", type=int, default=5672)
    p.add_argument("--rabbitmq-pid", type=int, default=None,
                   help="default: owner of the listening socket")
    p.add_argument("--leveret-cmd", default=DEFAULT_LEVERET_CMD,
                   help="format fields: {python} {port} {data_dir} {management_port} "
                   "{prometheus_port} (default: %(default)s)")
    p.add_argument("--leveret-addr", default=None,
                   help="host:port of an already running Leveret (then nothing is spawned)")
    p.add_argument("--leveret-pid", type=int, default=None)
    p.add_argument("--start-timeout", type=float, default=30.0)
    p.add_argument("--results-dir", default=str(HERE / "results"))
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    # The Leveret child inherits this process's limits: raise the soft open-files
    # limit to the hard limit so that `conns` (1,000 sockets) fits.
    nofile = loadgen_proc.raise_nofile()
    print(f"open-files limit (run.py, inherited by the Leveret it starts): soft {nofile[0]}, "
          f"hard {nofile[1]}", flush=True)

    t0 = time.time()
    scenarios = list(ALL_SCENARIOS) if args.scenario == "all" else [args.scenario]
    results: dict = {}
    for scen in scenarios:
        sargs = scenario_args(args, scen)
        if len(scenarios) > 1:
            print(f"\n##### scenario {scen} #####", flush=True)
        results[scen] = run_scenario(sargs)
    wall = time.time() - t0

    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = {"argv": sys.argv, "host_cpus": os.cpu_count(), "uname": " ".join(os.uname()),
            "nofile_run_py": list(nofile), "wall_s": round(wall, 1)}
    if args.scenario == "all":
        rows = combined_table(results)
        print_combined(rows, wall)
        doc = {**base, "args": vars(args), "scenarios": {
                   k: {kk: vv for kk, vv in v.items() if kk != "targets"}
                   for k, v in results.items()},
               "combined": rows}
        ok = any(r["summary"] for r in results.values())
        out = out_dir / f"{stamp}-all.json"
    else:
        r = results[args.scenario]
        doc = {**base, "args": r["args"], "rounds": r["rounds"], "summary": r["summary"],
               "skipped": r["skipped"]}
        ok = bool(r["summary"])
        out = out_dir / f"{stamp}.json"
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"raw results: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
