"""Confirmed persistent throughput: three clustered nodes against one node, same machine.

    .venv/bin/python bench/cluster_throughput.py [--duration 10] [--rounds 1] [--rabbitmq-quorum]

Starts a private etcd and three nodes on 127.0.0.1 (tests/cluster/harness.py), runs
``bench/loadgen.py --scenario confirmed`` against the leader, stops them, then runs the
same against a single node (no ``--etcd``) on a fresh data dir (the order alternates
from round to round); prints each round's
``consumed_per_s``, the broker's CPU per message (the leader's process only, with its two
followers; the single node's), and the cluster/single ratios. All processes share the
machine's cores, so the cluster pays for its followers' CPU too: this is the pessimistic
figure. ``--rabbitmq-quorum`` also runs the same load against the machine's RabbitMQ on
127.0.0.1:5672 with a quorum queue (``x-queue-type: quorum``; on one RabbitMQ node its
group has one member: the comparison point when three local RabbitMQ nodes cannot be
started beside it), with beam's CPU per message when its process is found.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "cluster"))

import harness  # noqa: E402


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


def _beam_pid() -> int | None:
    """The local RabbitMQ's Erlang VM (for its CPU), if there is one."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"beam.smp" in cmdline and b"rabbit" in cmdline:
                return int(entry.name)
    return None


def _median(values: list[float | None]) -> float:
    return statistics.median(v for v in values if v is not None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=1)
    if harness.etcd_binary() is None:
        print("etcd is not installed (apt-get install etcd-server)", file=sys.stderr)
        return 2
    parser.add_argument("--rabbitmq-quorum", action="store_true")
    args = parser.parse_args()
    clustered: list[float] = []
    single: list[float] = []
    cpu_leader: list[float | None] = []
    cpu_single: list[float | None] = []
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
                rate, cpu = loadgen(leader.port, args.duration, leader.proc.pid)
                clustered.append(rate)
                cpu_leader.append(cpu)
            finally:
                cluster.stop()
                etcd.stop()

        def single_run(directory: Path = directory) -> None:
            node = harness.Node("solo", directory, etcd="", cluster="")  # no etcd: one node
            try:
                node.start()
                assert node.proc is not None
                rate, cpu = loadgen(node.port, args.duration, node.proc.pid)
                single.append(rate)
                cpu_single.append(cpu)
            finally:
                node.kill()

        # Alternated: whichever runs second ran measurably slower here (a busy shared VM).
        for run in (clustered_run, single_run) if round_ % 2 else (single_run, clustered_run):
            run()
        print(f"round {round_}: cluster {clustered[-1]:.0f} msg/s (leader CPU "
              f"{cpu_leader[-1]} µs/msg), single {single[-1]:.0f} msg/s (CPU {cpu_single[-1]} "
              f"µs/msg)", flush=True)
    ratio = statistics.median(clustered) / statistics.median(single)
    leader_cpu, single_cpu = _median(cpu_leader), _median(cpu_single)
    print(f"confirmed, 3 nodes: {statistics.median(clustered):.0f} msg/s; one node: "
          f"{statistics.median(single):.0f} msg/s; ratio {ratio:.2f}")
    print(f"broker CPU per message: leader with 2 followers {leader_cpu:.1f} µs; one node "
          f"{single_cpu:.1f} µs; ratio {leader_cpu / single_cpu:.2f}")
    if args.rabbitmq_quorum:
        quorum: list[float] = []
        beam: list[float | None] = []
        for _ in range(args.rounds):
            rate, cpu = loadgen(5672, args.duration, _beam_pid(),
                                ("--queue-args", '{"x-queue-type": "quorum"}'))
            quorum.append(rate)
            beam.append(cpu)
        cpu_text = (f"; beam CPU {_median(beam):.1f} µs/msg"
                    if any(c is not None for c in beam) else "")
        print(f"RabbitMQ quorum queue, one local node: {statistics.median(quorum):.0f} msg/s"
              f"{cpu_text}; 3 Leveret nodes / it: "
              f"{statistics.median(clustered) / statistics.median(quorum):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
