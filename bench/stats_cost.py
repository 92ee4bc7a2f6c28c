"""What the management plane's sampling costs: CPU per round and memory per object.

    python bench/stats_cost.py                              # 1,000 queues, 100 connections
    python bench/stats_cost.py --queues 10000 --connections 1000 --rounds 20
    python bench/stats_cost.py --process --seconds 60       # a real broker, sampled or not

The stats-cost scenario: a broker model (the real ``Broker``, connections driven
in memory by ``tests/unit/wire.py``, no sockets) with ``--queues`` queues, each
bound to a topic exchange and holding a message, and ``--connections`` connections
with one channel each that has published through that exchange and consumes from
one queue. The management ``State`` samples it as the broker does every
``collect_statistics_interval`` (5 s): every queue, exchange, connection, channel
and vhost into its ring (``management_ui/history.py``).

Printed: the CPU time of one sampling round (best and median of ``--rounds``, after
the rings are full) and its share of a core at one round per 5 s (the target: at
most 3%); the rings' memory per queue, connection and channel (their arrays), and
the sampler's whole allocation per object (tracemalloc, rings and bookkeeping);
the CPU of one ``/api/queues/{vh}/{q}?lengths_age=600&lengths_incr=5&msg_rates_...``
rendering (121 points per field).

``--process``: the same scenario on a real broker (``python -m leveret serve``, run.py's
LeveretProcess) over sockets: queues imported as definitions, each connection a pika
client with one channel consuming from one queue. The broker's CPU (``/proc``, utime +
stime) is read over ``--seconds`` of quiet, twice per round: sampling every 5 s, and
every hour (as good as off); the difference is what sampling costs, as a share of a core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
import urllib.request
from pathlib import Path

from pamqp import commands

from leveret.config import Config
from leveret.management_ui import history, views
from leveret.management_ui.service import State
from leveret.tests.unit.wire import Client

INTERVAL = 5.0


def build(queues: int, connections: int) -> tuple[State, list[Client]]:
    first = Client()
    broker = first.broker
    clients = [first] + [Client(broker=broker) for _ in range(connections - 1)]
    for c in clients:
        c.handshake()
        c.open_channel(1)
    c0 = clients[0]
    c0.call(1, commands.Exchange.Declare(exchange="bench.x", exchange_type="topic"))
    for i in range(queues):
        c0.call(1, commands.Queue.Declare(queue=f"q{i}"))
        c0.call(1, commands.Queue.Bind(queue=f"q{i}", exchange="bench.x", routing_key=f"k.{i}"))
    for n, c in enumerate(clients):
        c.publish(1, b"x" * 100, exchange="bench.x", routing_key=f"k.{n % queues}")
        c.call(1, commands.Basic.Consume(queue=f"q{(n + 1) % queues}", consumer_tag=f"t{n}"))
    for i in range(queues):
        c0.publish(1, b"y" * 100, routing_key=f"q{i}")
    state = State(broker, Config(port=0, management_port=0, prometheus_port=0))
    return state, clients


def broker_cpu(queues: int, connections: int, interval: float, seconds: float) -> float:
    """CPU seconds per second of a real broker with this many queues and connections,
    sampling every ``interval`` seconds, over ``seconds`` of quiet."""
    import pika

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import loadgen_proc
    import run
    os.environ["LEVERET_COLLECT_STATISTICS_INTERVAL"] = str(interval)
    lev = run.LeveretProcess(run.DEFAULT_LEVERET_CMD, 120.0)
    clients = []
    try:
        pid = lev.start()
        api = f"http://127.0.0.1:{lev.management_port}/api"
        deadline = time.monotonic() + 60
        body = json.dumps({"queues": [{"name": f"q{i}", "vhost": "/", "durable": False,
                                       "auto_delete": False, "arguments": {}}
                                      for i in range(queues)]}).encode()
        while True:
            try:
                req = urllib.request.Request(api + "/definitions", data=body, method="POST",
                                             headers={"Authorization": "Basic Z3Vlc3Q6Z3Vlc3Q=",
                                                      "Content-Type": "application/json"})
                urllib.request.urlopen(req, timeout=600).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for n in range(connections):
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                "127.0.0.1", lev.port, heartbeat=0,
                client_properties={"connection_name": f"bench-{n}"}))
            ch = conn.channel()
            ch.basic_publish("", f"q{n % queues}", b"x" * 100)
            ch.basic_consume(f"q{(n + 1) % queues}", lambda *a: None)
            clients.append(conn)
        time.sleep(2 * max(interval, 5.0) if interval < 60 else 2.0)  # settle
        pids = loadgen_proc.process_tree(pid)
        c0, t0 = loadgen_proc.tree_cpu_seconds(pids), time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            for conn in clients:
                conn.process_data_events(0)
            time.sleep(0.5)
        return (loadgen_proc.tree_cpu_seconds(pids) - c0) / (time.monotonic() - t0)
    finally:
        for conn in clients:
            try:
                conn.close()
            except Exception:
                pass
        lev.stop()


def process_mode(args: argparse.Namespace) -> None:
    print(f"a real broker, {args.queues} queues, {args.connections} connections, "
          f"{args.seconds:.0f} s of quiet per figure")
    costs = []
    for r in range(args.process_rounds):
        order = (5.0, 3600.0) if r % 2 == 0 else (3600.0, 5.0)
        got = {i: broker_cpu(args.queues, args.connections, i, args.seconds) for i in order}
        costs.append(got[5.0] - got[3600.0])
        print(f"  round {r + 1}: broker CPU {100 * got[5.0]:.2f}% of a core sampling every 5 s, "
              f"{100 * got[3600.0]:.2f}% every hour: sampling costs "
              f"{100 * costs[-1]:.2f}% of a core", flush=True)
    print(f"median cost of sampling: {100 * statistics.median(costs):.2f}% of a core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--process", action="store_true",
                        help="measure a real broker's CPU, sampled every 5 s and every hour")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--process-rounds", type=int, default=2)
    args = parser.parse_args()
    if args.process:
        process_mode(args)
        return

    state, _clients = build(args.queues, args.connections)
    sampler = state.sampler
    clock = [time.time()]
    sampler.clock = lambda: clock[0]

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(history.KEEP):  # fill every ring
        state.sample()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()

    times = []
    for _ in range(args.rounds):
        t0 = time.process_time()
        state.sample()
        times.append(time.process_time() - t0)
    best, median = min(times), statistics.median(times)

    rings = sampler.history.rings
    by_kind: dict[str, list[int]] = {}
    for key, ring in rings.items():
        kind = key[0] if isinstance(key, tuple) else str(key)
        by_kind.setdefault(str(kind), []).append(ring.values.buffer_info()[1] * 8)
    objects = len(rings)

    queue = next(iter(state.broker.vhosts["/"].queues.values()))
    ranges = views.Ranges.of({"lengths_age": "600", "lengths_incr": "5",
                              "msg_rates_age": "600", "msg_rates_incr": "5"})
    renders = []
    for _ in range(20):
        t0 = time.process_time()
        views.queue_json(queue, state, ranges=ranges)
        renders.append(time.process_time() - t0)

    names = {"q": "queue", "c": "connection", "ch": "channel", "x": "exchange", "vh": "vhost"}
    print(f"{args.queues} queues, {args.connections} connections (one channel each), "
          f"{objects} objects sampled, {history.KEEP} rounds kept per object")
    print(f"sampling round: best {best * 1000:.1f} ms, median {median * 1000:.1f} ms CPU "
          f"-> {100 * median / INTERVAL:.2f}% of a core at one round per {INTERVAL:.0f} s")
    for kind, sizes in sorted(by_kind.items()):
        print(f"  ring per {names.get(kind, kind)}: {sizes[0]} B of values ({len(sizes)} kept)")
    print(f"sampler's allocation once full: {held / 1024:.0f} KiB, "
          f"{held / max(objects, 1):.0f} B per object (rings, keys, bookkeeping)")
    print(f"one queue rendered with 600 s ranges (121 points per field): "
          f"{statistics.median(renders) * 1e6:.0f} us CPU")


if __name__ == "__main__":
    main()
