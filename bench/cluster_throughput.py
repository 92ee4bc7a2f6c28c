"""Confirmed persistent throughput: three clustered nodes against one node, same machine.

    .venv/bin/python bench/cluster_throughput.py [--duration 10] [--rounds 1] [--rabbitmq-quorum]

Starts a private etcd and three nodes on 127.0.0.1 (tests/cluster/harness.py), runs
``bench/loadgen.py --scenario confirmed`` against the leader, stops them, then runs the
same against a single node (no ``--etcd``) on a fresh data dir (the order alternates
from round to round); prints each round's
``consumed_per_s``, the broker's CPU per message (the leader's process only, with its two
followers; the single node's), and the cluster/single ratios. All processes share the
machine's cores, so the cluster pays for its followers' CPU too: this is the pessimistic
figure. ``--rabbitmq-quorum`` also starts three private RabbitMQ nodes clustered
together (``bench/rabbitmq_nodes.py``; never the machine's own RabbitMQ) and runs the same
load, in the same rotation, against a quorum queue replicated on all three
(``x-quorum-initial-group-size: 3``, its members checked), with the CPU of the node the
queue leads on; the nodes are stopped and deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "cluster"))
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import rabbitmq_nodes  # noqa: E402


def loadgen(port: int, duration: float, pid: int | None,
            more: tuple[str, ...] = ()) -> tuple[float, float | None]:
    """(consumed msg/s, the broker process's CPU µs per message, if ``pid`` is given)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "loadgen.py"), "--port", str(port), "--scenario",
         "confirmed", "--duration", str(duration), *more,
         *(["--broker-pid", str(pid)] if pid else [])],
        capture_output=True, text=True, check=True, timeout=duration * 10 + 120)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    cpu = result.get("broker_cpu_us_per_msg")
    return float(result["consumed_per_s"]), float(cpu) if cpu is not None else None


def _median(values: list[float | None]) -> float:
    return statistics.median(v for v in values if v is not None)


QUORUM_ARGS = '{"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}'
QUORUM_QUEUE = "leveret-bench-confirmed"  # the queue ``loadgen.py --scenario confirmed`` uses


def _check_quorum_members(rabbit: rabbitmq_nodes.RabbitCluster) -> int:
    """Declare the bench's queue as loadgen will (it deletes and redeclares it with the same
    arguments), and return its member count: 3 means every node holds a replica."""
    import pika  # the bench's own dependency set; only needed for this probe

    params = pika.ConnectionParameters("127.0.0.1", rabbit.ports[0])
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.queue_declare(QUORUM_QUEUE, durable=True, arguments=json.loads(QUORUM_ARGS))
    return len(rabbit.members(QUORUM_QUEUE))


def _load_average() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rabbitmq-quorum", action="store_true")
    args = parser.parse_args()
    if harness.etcd_binary() is None:
        print("etcd is not installed (apt-get install etcd-server)", file=sys.stderr)
        return 2
    if args.rabbitmq_quorum and not rabbitmq_nodes.available():
        print("RabbitMQ is not installed (bench/rabbitmq.sh start installs it)", file=sys.stderr)
        return 2
    rates: dict[str, list[float]] = {"cluster": [], "single": [], "rabbit": []}
    cpus: dict[str, list[float | None]] = {"cluster": [], "single": [], "rabbit": []}
    with contextlib.ExitStack() as stack:
        rabbit: rabbitmq_nodes.RabbitCluster | None = None
        if args.rabbitmq_quorum:
            rabbit = stack.enter_context(rabbitmq_nodes.RabbitCluster(3))
            members = _check_quorum_members(rabbit)
            print(f"RabbitMQ nodes {[n.name for n in rabbit.nodes]} clustered; quorum queue "
                  f"members: {members}", flush=True)
            if members != 3:
                return 1

        def measure(kind: str, port: int, pid: int, extra: tuple[str, ...] = ()) -> None:
            rate, cpu = loadgen(port, args.duration, pid, extra)
            rates[kind].append(rate)
            cpus[kind].append(cpu)

        for round_ in range(1, args.rounds + 1):
            directory = Path(tempfile.mkdtemp(prefix="leveret-cluster-throughput-"))

            def clustered_run(directory: Path = directory) -> None:
                etcd = harness.Etcd(directory).start()
                cluster = harness.Cluster(directory, etcd, name="tp", lease_ttl=5)
                try:
                    cluster.start(3)
                    leader = cluster.nodes[cluster.wait_leader()]
                    cluster.wait_in_sync(3)
                    assert leader.proc is not None
                    measure("cluster", leader.port, leader.proc.pid)
                finally:
                    cluster.stop()
                    etcd.stop()

            def single_run(directory: Path = directory) -> None:
                node = harness.Node("solo", directory, etcd="", cluster="")  # no etcd
                try:
                    node.start()
                    assert node.proc is not None
                    measure("single", node.port, node.proc.pid)
                finally:
                    node.kill()

            def rabbit_run() -> None:
                assert rabbit is not None
                # Through the first node, where the queue's leader is placed (declared
                # there: ``client-local``); the CPU is that node's VM alone.
                measure("rabbit", rabbit.ports[0], rabbit.nodes[0].pid,
                        ("--queue-args", QUORUM_ARGS))

            # Rotated: whichever runs later ran measurably slower here (a busy shared VM).
            runs = [clustered_run, single_run, *([rabbit_run] if rabbit else [])]
            shift = (round_ - 1) % len(runs)
            load = [_load_average()]
            for run in runs[shift:] + runs[:shift]:
                run()
                load.append(_load_average())
            line = (f"round {round_}: cluster {rates['cluster'][-1]:.0f} msg/s (leader CPU "
                    f"{cpus['cluster'][-1]} µs/msg), single {rates['single'][-1]:.0f} msg/s "
                    f"(CPU {cpus['single'][-1]} µs/msg)")
            if rabbit:
                line += (f", RabbitMQ quorum on 3 nodes {rates['rabbit'][-1]:.0f} msg/s (first "
                         f"node's CPU {cpus['rabbit'][-1]} µs/msg)")
            print(f"{line}; load average {' '.join(load)}", flush=True)
    clustered, single = statistics.median(rates["cluster"]), statistics.median(rates["single"])
    leader_cpu, single_cpu = _median(cpus["cluster"]), _median(cpus["single"])
    print(f"confirmed, 3 nodes: {clustered:.0f} msg/s; one node: {single:.0f} msg/s; "
          f"ratio {clustered / single:.2f}")
    print(f"broker CPU per message: leader with 2 followers {leader_cpu:.1f} µs; one node "
          f"{single_cpu:.1f} µs; ratio {leader_cpu / single_cpu:.2f}")
    if rates["rabbit"]:
        quorum = statistics.median(rates["rabbit"])
        cpu_text = (f"; its first node's CPU {_median(cpus['rabbit']):.1f} µs/msg"
                    if any(c is not None for c in cpus["rabbit"]) else "")
        print(f"RabbitMQ quorum queue on 3 local nodes: {quorum:.0f} msg/s{cpu_text}; "
              f"3 Leveret nodes / it: {clustered / quorum:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
