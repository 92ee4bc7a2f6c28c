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

DEFAULT_LEVERET_CMD = "{python} -m leveret serve --port {port} --data-dir {data_dir}"
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
        self.data_dir = os.path.join(self.tmp.name, "data")
        self.log_path = os.path.join(self.tmp.name, "leveret.log")
        self.cmd = shlex.split(cmd_template.format(python=shlex.quote(sys.executable),
                                                   port=self.port, data_dir=self.data_dir))
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def start(self) -> int:
        """Start and wait until AMQP answers; returns the broker pid."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
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
                    self.proc.pid if owner in loadgen.process_tree(self.proc.pid) else owner)
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


def run_loadgen(host: str, port: int, broker_pid: int | None, args) -> dict:
    cmd = [sys.executable, str(HERE / "loadgen.py"), "--host", host, "--port", str(port),
           "--scenario", args.scenario, "--duration", str(args.duration),
           "--warmup", str(args.warmup), "--size", str(args.size), "--batch", str(args.batch),
           "--prefetch", str(args.prefetch), "--multi-ack-every", str(args.multi_ack_every),
           "--max-backlog", str(args.max_backlog), "--loop", args.loop,
           "--user", args.user, "--password", args.password]
    if args.no_ack:
        cmd.append("--no-ack")
    if broker_pid:
        cmd += ["--broker-pid", str(broker_pid)]
    timeout = args.warmup + args.duration + 60
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"loadgen timed out after {timeout}s"}
    lines = cp.stdout.strip().splitlines()
    try:
        res = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "error": f"loadgen rc={cp.returncode}, no JSON; stderr:\n"
                                      f"{cp.stderr[-2000:]}"}
    if cp.stderr.strip():
        res["loadgen_stderr"] = cp.stderr[-2000:]
    return res


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
        res = run_loadgen(host, port, pid, args)
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
            except Exception as exc:  # noqa: BLE001
                lev.stop()
                return {"ok": False, "skipped": True, "error": f"leveret failed to start: {exc}",
                        "cmd": lev.cmd}
            try:
                res = run_loadgen("127.0.0.1", lev.port, pid, args)
                res["broker_startup_s"] = lev.startup_s
                res["cmd"] = lev.cmd
                if not res.get("ok"):
                    res["broker_log_tail"] = lev.log_tail()
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=["both", "leveret", "rabbitmq"], default="both")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scenario", choices=sorted(loadgen.SCENARIOS), default="transient")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before")
    p.add_argument("--size", type=int, default=256, help="message body bytes")
    p.add_argument("--batch", type=int, default=50, help="publishes per socket write")
    p.add_argument("--prefetch", type=int, default=0, help="basic.qos (0 = unlimited, PerfTest default)")
    p.add_argument("--multi-ack-every", type=int, default=0,
                   help="ack multiple=true every N (0 = ack each message, PerfTest default)")
    p.add_argument("--no-ack", action="store_true")
    p.add_argument("--max-backlog", type=int, default=0,
                   help="loadgen-side cap on published-consumed (0 = off, PerfTest default)")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop",
                   help="loadgen event loop")
    p.add_argument("--user", default="guest")
    p.add_argument("--password", default="guest")
    p.add_argument("--rabbitmq-host", default="127.0.0.1")
    p.add_argument("--rabbitmq-port", type=int, default=5672)
    p.add_argument("--rabbitmq-pid", type=int, default=None,
                   help="default: owner of the listening socket")
    p.add_argument("--leveret-cmd", default=DEFAULT_LEVERET_CMD,
                   help="format fields: {python} {port} {data_dir} (default: %(default)s)")
    p.add_argument("--leveret-addr", default=None,
                   help="host:port of an already running Leveret (then nothing is spawned)")
    p.add_argument("--leveret-pid", type=int, default=None)
    p.add_argument("--start-timeout", type=float, default=30.0)
    p.add_argument("--results-dir", default=str(HERE / "results"))
    args = p.parse_args(argv)

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
                print(f"round {i + 1}/{args.rounds} {t:<9} {res['consumed_per_s']:>10,.0f} msg/s "
                      f"(published {res['published_per_s']:,.0f}/s) "
                      f"broker {_fmt(res.get('broker_cpu_us_per_msg'), '.1f')} us/msg "
                      f"{_fmt(res.get('broker_cpu_share'), '.2f')} cores, "
                      f"loadgen {res['loadgen_cpu_share']:.2f} cores, "
                      f"host idle {_fmt(res.get('host_idle_cores'), '.2f')} cores", flush=True)
                if res.get("other_clients_before"):
                    print(f"  WARNING: {res['other_clients_before']} other client connection(s) "
                          f"were open on the broker; its CPU figures include their load",
                          flush=True)
                if other is not None and other > 0.25 and res.get("broker_cpu_share") is not None:
                    print(f"  WARNING: {other:.2f} cores used by other processes during the "
                          f"measurement - figures are not clean", flush=True)
            else:
                print(f"round {i + 1}/{args.rounds} {t:<9} FAILED: {res.get('error')}", flush=True)
                if res.get("broker_log_tail"):
                    print(res["broker_log_tail"])
                if res.get("skipped"):
                    dead[t] = res["error"]
                    print(f"  -> skipping {t} for the remaining rounds", flush=True)
        rounds.append(rnd)

    summary = summarize(rounds, targets)
    print_summary(summary, targets, args)

    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = out_dir / f"{stamp}.json"
    with open(out, "w") as f:
        json.dump({"argv": sys.argv, "args": vars(args), "host_cpus": os.cpu_count(),
                   "uname": " ".join(os.uname()), "rounds": rounds, "summary": summary,
                   "skipped": dead}, f, indent=1)
    print(f"raw results: {out}")
    return 0 if summary else 1


if __name__ == "__main__":
    sys.exit(main())
