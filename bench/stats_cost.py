"""What the management plane's sampling costs: CPU per round and memory per object.

    python bench/stats_cost.py                              # 1,000 queues, 100 connections
    python bench/stats_cost.py --queues 10000 --connections 1000 --rounds 20

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
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

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
