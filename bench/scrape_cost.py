"""What the management plane costs: throughput with and without scraping, and
response times with many queues.

    python bench/scrape_cost.py --rounds 3 --duration 10         # transient and confirmed
    python bench/scrape_cost.py --scenario transient --rounds 1 --duration 5
    python bench/scrape_cost.py --queues-timing 10000            # response times only
    python bench/scrape_cost.py --scrape-stall 100000            # what big scrapes block

Throughput: for each scenario and round, a fresh Leveret (run.py's LeveretProcess)
runs the loadgen twice, once unscraped and once while a scraper thread asks the
management API every second for what the UI's overview and queues pages load
(/api/overview, /api/nodes, /api/queues?page=1&page_size=100&pagination=true,
/api/connections, /api/channels) and Prometheus every 5 s (/metrics). The order
alternates between rounds. Printed: consumed msg/s of both and their ratio per round,
and the median ratio (the target: at most 3% difference).

Queue timing: measures the broker CPU one scrape cycle costs (empty, then with N queues),
declares N queues on a fresh Leveret and times (best and median of 10)
/api/queues?page=1&page_size=100, /api/overview, /metrics and /metrics/per-object.

Scrape stall (``--scrape-stall N``): N queues made at once by a definitions import, then
one and then ``--parallel`` (4) scrapes of /metrics/per-object, while another process
times AMQP round trips (queue.declare passive) back to back. Printed per phase: the
scrapes' wall time and size, the round trips done meanwhile, the longest one (about the
longest the broker's loop was held), the time spent in round trips over
``STALL_MS`` (about the loop's blocked time), the broker's CPU and its peak RSS
(VmHWM, reset before the phase through /proc/<pid>/clear_refs), and the broker's own
account of each rendering (its log at debug level: slices, the longest one's CPU time,
which the machine's load does not stretch as it does round trips).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
API_EVERY = 1.0
METRICS_EVERY = 5.0
API_PATHS = ("/api/overview", "/api/nodes", "/api/queues?page=1&page_size=100&pagination=true",
             "/api/connections", "/api/channels")


def fetch(url: str) -> int:
    req = urllib.request.Request(url, headers={"Authorization": AUTH})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return len(resp.read())


def wait_for_http(url: str, timeout: float = 10.0) -> None:
    """The HTTP listeners start just after the AMQP one: wait for them (in both modes)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fetch(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Scraper(threading.Thread):
    def __init__(self, api: str, metrics: str) -> None:
        super().__init__(daemon=True)
        self.api, self.metrics = api, metrics
        self.stop_event = threading.Event()
        self.requests = 0
        self.errors = 0
        self.last_error = ""

    def run(self) -> None:
        next_metrics = time.monotonic()
        while not self.stop_event.is_set():
            t0 = time.monotonic()
            urls = [self.api + p for p in API_PATHS]
            if t0 >= next_metrics:
                urls.append(self.metrics + "/metrics")
                next_metrics = t0 + METRICS_EVERY
            for url in urls:
                try:
                    fetch(url)
                    self.requests += 1
                except OSError as exc:
                    self.errors += 1
                    self.last_error = f"{url}: {exc}"
            self.stop_event.wait(max(0.0, API_EVERY - (time.monotonic() - t0)))


def one_run(args: argparse.Namespace, scraped: bool) -> dict:
    lev = run.LeveretProcess(run.DEFAULT_LEVERET_CMD, args.start_timeout)
    try:
        pid = lev.start()
        scraper = None
        wait_for_http(f"http://127.0.0.1:{lev.management_port}/api/overview")
        if scraped:
            scraper = Scraper(f"http://127.0.0.1:{lev.management_port}",
                              f"http://127.0.0.1:{lev.prometheus_port}")
            scraper.start()
        res = run.run_loadgen("127.0.0.1", lev.port, pid, args, data_dir=lev.data_dir)
        if scraper is not None:
            scraper.stop_event.set()
            scraper.join()
            res["scrape_requests"] = scraper.requests
            res["scrape_errors"] = scraper.errors
            if scraper.errors:
                print(f"  scrape error: {scraper.last_error}", flush=True)
        return res
    finally:
        lev.stop()


def throughput(args: argparse.Namespace) -> None:
    for scenario in args.scenario:
        sargs = run.scenario_args(run.build_parser().parse_args(
            ["--duration", str(args.duration), "--warmup", str(args.warmup)]), scenario)
        ratios = []
        print(f"## {scenario}: {args.rounds} round(s), {args.duration:g} s each", flush=True)
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {}
            for scraped in order:
                res = one_run(sargs, scraped)
                if not res.get("ok"):
                    print(f"  round {i + 1} {'scraped' if scraped else 'plain'}: FAILED "
                          f"{res.get('error')}", flush=True)
                    break
                got[scraped] = res
            if len(got) < 2:
                continue
            plain, scr = got[False]["consumed_per_s"], got[True]["consumed_per_s"]
            ratios.append(scr / plain)
            print(f"  round {i + 1}: plain {plain:,.0f} msg/s, scraped {scr:,.0f} msg/s "
                  f"({got[True]['scrape_requests']} requests, {got[True]['scrape_errors']} "
                  f"errors), scraped/plain {scr / plain:.3f}; broker us/msg plain "
                  f"{run._fmt(got[False].get('broker_cpu_us_per_msg'), '.1f')}, scraped "
                  f"{run._fmt(got[True].get('broker_cpu_us_per_msg'), '.1f')}", flush=True)
        if ratios:
            print(f"  median scraped/plain {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f})", flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cycle_cost(pid: int, api: str, metrics: str, cycles: int = 50) -> None:
    """Broker CPU per scrape cycle (the scraper's one-second batch), unloaded."""
    wait_for_http(api + "/api/overview")
    before = cpu_seconds(pid)
    t0 = time.perf_counter()
    for i in range(cycles):
        for path in API_PATHS:
            fetch(api + path)
        if i % int(METRICS_EVERY / API_EVERY) == 0:
            fetch(metrics + "/metrics")
    used = cpu_seconds(pid) - before
    print(f"  broker CPU per scrape cycle ({len(API_PATHS)} API requests + /metrics every "
          f"{METRICS_EVERY:g} s): {used / cycles * 1000:.1f} ms, i.e. "
          f"{used / cycles / API_EVERY * 100:.2f}% of one core at one cycle per second "
          f"({cycles} cycles in {time.perf_counter() - t0:.1f} s)", flush=True)


def queue_timing(n: int, start_timeout: float) -> None:
    import pika  # the bench's only client dependency beyond the stdlib

    lev = run.LeveretProcess(run.DEFAULT_LEVERET_CMD, start_timeout)
    try:
        pid = lev.start()
        cycle_cost(pid, f"http://127.0.0.1:{lev.management_port}",
                   f"http://127.0.0.1:{lev.prometheus_port}")
        t0 = time.perf_counter()
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", lev.port))
        ch = conn.channel()
        for i in range(n):
            ch.queue_declare(f"scale-{i:05d}")
        for i in range(0, n, 10):
            ch.basic_publish("", f"scale-{i:05d}", b"x")
        conn.close()
        print(f"declared {n:,} queues in {time.perf_counter() - t0:.1f}s", flush=True)
        cycle_cost(pid, f"http://127.0.0.1:{lev.management_port}",
                   f"http://127.0.0.1:{lev.prometheus_port}")
        api = f"http://127.0.0.1:{lev.management_port}"
        metrics = f"http://127.0.0.1:{lev.prometheus_port}"
        for url in (api + "/api/queues?page=1&page_size=100",
                    api + "/api/queues?page=1&page_size=100&pagination=true&sort=messages"
                          "&sort_reverse=true",
                    api + "/api/queues?page=50&page_size=100&name=scale-0&pagination=true",
                    api + "/api/overview", metrics + "/metrics", metrics + "/metrics/per-object"):
            times, size = [], 0
            for _ in range(10):
                t = time.perf_counter()
                size = fetch(url)
                times.append((time.perf_counter() - t) * 1000)
            print(f"  {url.split('//', 1)[1].split('/', 1)[1]:<90} best {min(times):7.1f} ms, "
                  f"median {statistics.median(times):7.1f} ms, {size / 1024:,.0f} KiB",
                  flush=True)
    finally:
        lev.stop()


STALL_MS = 50.0  # a round trip longer than this counts as time the loop was held


def _ping(port: int, ready: Any, stop: Any, out: Any) -> None:
    """In its own process (no GIL shared with the scrapers): round trips until ``stop``."""
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "127.0.0.1", port, blocked_connection_timeout=None, socket_timeout=600,
        stack_timeout=600))
    ch = conn.channel()
    times = []
    ready.set()
    while not stop.is_set():
        t = time.monotonic()
        ch.queue_declare("stall-00000", passive=True)
        times.append((t, time.monotonic()))
    conn.close()
    out.put(times)


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _scrape_phase(pid: int, port: int, url: str, parallel: int, log_path: str) -> None:
    import multiprocessing

    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    rss_before = _status_kb(pid, "VmRSS")
    ready, stop, out = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
    pinger = multiprocessing.Process(target=_ping, args=(port, ready, stop, out))
    pinger.start()
    if not ready.wait(600):
        raise RuntimeError("the AMQP pinger did not connect")
    time.sleep(1.0)  # its round trips are steady
    sizes: list[int] = []
    spans: list[tuple[float, float]] = []

    def one() -> None:
        t = time.monotonic()
        with urllib.request.urlopen(url, timeout=600) as resp:
            sizes.append(len(resp.read()))
        spans.append((t, time.monotonic()))

    with open(log_path, "rb") as f:
        log_from = len(f.read())
    cpu0 = cpu_seconds(pid)
    threads = [threading.Thread(target=one) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = cpu_seconds(pid) - cpu0
    stop.set()
    rtts = out.get()
    pinger.join()
    start, end = min(a for a, _ in spans), max(b for _, b in spans)
    during = [(b - a) * 1000 for a, b in rtts if b > start and a < end]
    held = sum(ms for ms in during if ms > STALL_MS)
    print(f"  {parallel} scrape(s): {end - start:6.2f} s wall, {min(sizes) / 1e6:,.1f} MB "
          f"each; {len(during)} AMQP round trips meanwhile, longest "
          f"{max(during, default=0):,.0f} ms, {held / 1000:.2f} s in round trips over "
          f"{STALL_MS:g} ms; broker CPU {cpu:.2f} s, RSS {rss_before / 1024:,.0f} MiB -> "
          f"peak {_status_kb(pid, 'VmHWM') / 1024:,.0f} MiB", flush=True)
    with open(log_path, "rb") as f:
        renders = [line.split("metrics_app: ", 1)[-1] for line in
                   f.read()[log_from:].decode(errors="replace").splitlines()
                   if "Prometheus /metrics" in line and "slices" in line]
    for line in renders:  # the broker's own account, when it logs at debug level
        print(f"    broker: {line}", flush=True)


def scrape_stall(n: int, parallel: int, start_timeout: float) -> None:
    import json

    os.environ.setdefault("LEVERET_LOG_LEVEL", "debug")  # the broker logs each rendering
    lev = run.LeveretProcess(run.DEFAULT_LEVERET_CMD, start_timeout)
    try:
        pid = lev.start()
        api = f"http://127.0.0.1:{lev.management_port}"
        wait_for_http(api + "/api/overview")
        body = json.dumps({"queues": [
            {"name": f"stall-{i:05d}", "vhost": "/", "durable": False, "auto_delete": False,
             "arguments": {}} for i in range(n)]}).encode()
        t0 = time.perf_counter()
        req = urllib.request.Request(api + "/api/definitions", data=body, method="POST",
                                     headers={"Authorization": AUTH,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as resp:
            resp.read()
        print(f"## /metrics/per-object with {n:,} queues (imported in "
              f"{time.perf_counter() - t0:.1f} s)", flush=True)
        url = f"http://127.0.0.1:{lev.prometheus_port}/metrics/per-object"
        for k in (1, parallel):
            _scrape_phase(pid, lev.port, url, k, lev.log_path)
    finally:
        lev.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", choices=["transient", "confirmed"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--start-timeout", type=float, default=30.0)
    p.add_argument("--queues-timing", type=int, default=0, metavar="N",
                   help="only time responses with N queues")
    p.add_argument("--scrape-stall", type=int, default=0, metavar="N",
                   help="only time what scrapes of /metrics/per-object block, with N queues")
    p.add_argument("--parallel", type=int, default=4,
                   help="scrapes at once in the second --scrape-stall phase")
    args = p.parse_args(argv)
    run.loadgen_proc.raise_nofile()
    if args.scrape_stall:
        scrape_stall(args.scrape_stall, args.parallel, args.start_timeout)
        return 0
    if args.queues_timing:
        queue_timing(args.queues_timing, args.start_timeout)
        return 0
    args.scenario = args.scenario or ["transient", "confirmed"]
    throughput(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
