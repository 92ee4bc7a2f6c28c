"""What message tracing costs: throughput with tracing off and on, same broker.

    python bench/trace_cost.py --rounds 3 --duration 5
    python bench/trace_cost.py --rounds 1 --duration 5 --capacity 100000
    python bench/trace_cost.py --rounds 3 --duration 5 --unread-streams 500

Each round starts a fresh Leveret (run.py's LeveretProcess) and runs the loadgen's
``transient`` scenario on it twice: once with tracing off and once after
``PUT /api/traces/%2F`` (``--capacity`` events, no queue filter: every publish,
route, enqueue, deliver and ack is recorded), then ``DELETE``. The order alternates
between rounds (off-on, on-off, ...). Printed per round: consumed msg/s of both, their
ratio and the broker CPU per message; then the median on/off ratio (the target:
at most a 20% cost when on). Tracing off costs one attribute test per hook (publish,
delivery, ack call): that is not separable from noise here, so only off vs on is measured.

``--unread-streams N``: while tracing is on, N clients open the live trace stream
(``GET /api/traces/%2F/stream``) over raw sockets and never read it, as forgotten browser
tabs would; what they cost the traced run shows in its rate.
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import statistics
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run
import scrape_cost

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def set_tracing(api: str, capacity: int | None, queue: str | None = None) -> None:
    """Start (capacity) or stop (None) tracing of vhost "/"."""
    data = json.dumps({"capacity": capacity, "queue": queue}).encode() if capacity else None
    req = urllib.request.Request(api + "/api/traces/%2F", data=data,
                                 method="PUT" if capacity else "DELETE",
                                 headers={"Authorization": AUTH,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()


def open_unread_streams(api: str, n: int) -> list[socket.socket]:
    """``n`` trace streams whose client never reads (a small receive buffer, soon full)."""
    host, port = api.split("//", 1)[1].split(":")
    request = (f"GET /api/traces/%2F/stream HTTP/1.1\r\nHost: {host}\r\n"
               f"Authorization: {AUTH}\r\n\r\n").encode()
    socks = []
    for _ in range(n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(request)
        socks.append(sock)
    while trace_status(api).get("subscribers", 0) < n:  # every stream is open
        time.sleep(0.1)
    return socks


def trace_status(api: str) -> dict:
    req = urllib.request.Request(api + "/api/traces/%2F", headers={"Authorization": AUTH})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--capacity", type=int, default=10_000)
    p.add_argument("--queue", default=None,
                   help="trace only queues matching this regex (default: all)")
    p.add_argument("--unread-streams", type=int, default=0, metavar="N",
                   help="open N trace streams that are never read while tracing is on")
    p.add_argument("--start-timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    run.loadgen_proc.raise_nofile()
    sargs = run.scenario_args(run.build_parser().parse_args(
        ["--duration", str(args.duration), "--warmup", str(args.warmup)]), "transient")
    ratios = []
    print(f"## transient: {args.rounds} round(s), {args.duration:g} s each, "
          f"capacity {args.capacity:,}, queue filter {args.queue!r}, "
          f"{args.unread_streams} unread stream(s)", flush=True)
    for i in range(args.rounds):
        lev = run.LeveretProcess(run.DEFAULT_LEVERET_CMD, args.start_timeout)
        try:
            pid = lev.start()
            api = f"http://127.0.0.1:{lev.management_port}"
            scrape_cost.wait_for_http(api + "/api/overview")
            got = {}
            for traced in ((False, True) if i % 2 == 0 else (True, False)):
                set_tracing(api, args.capacity if traced else None, args.queue)
                streams = open_unread_streams(api, args.unread_streams) if traced else []
                res = run.run_loadgen("127.0.0.1", lev.port, pid, sargs, data_dir=lev.data_dir)
                if traced:
                    res["trace"] = trace_status(api)
                    set_tracing(api, None)
                for sock in streams:
                    sock.close()
                if not res.get("ok"):
                    print(f"  round {i + 1} {'on' if traced else 'off'}: FAILED "
                          f"{res.get('error')}", flush=True)
                    break
                got[traced] = res
        finally:
            lev.stop()
        if len(got) < 2:
            continue
        off, on = got[False]["consumed_per_s"], got[True]["consumed_per_s"]
        ratios.append(on / off)
        ring = got[True]["trace"]
        print(f"  round {i + 1}: off {off:,.0f} msg/s, on {on:,.0f} msg/s, on/off "
              f"{on / off:.3f}; broker us/msg off "
              f"{run._fmt(got[False].get('broker_cpu_us_per_msg'), '.1f')}, on "
              f"{run._fmt(got[True].get('broker_cpu_us_per_msg'), '.1f')}; ring "
              f"{ring['records']:,} records, {ring['evicted']:,} evicted", flush=True)
    if ratios:
        print(f"  median on/off {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
