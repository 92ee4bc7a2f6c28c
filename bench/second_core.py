"""What a second core could give: one broker process against two side by side.

    python bench/second_core.py --rounds 3 --duration 10                  # transient
    python bench/second_core.py --scenario confirmed --rounds 3

Leveret runs its AMQP work on one event-loop thread. Sharding vhosts over processes is
the way to use a second core without a free-threaded Python (py-lmdb re-enables the
GIL): each vhost's connections, queues and store in a process of its own. Two
independent brokers, each driven by its own load generator at the same time, are the
upper bound of that: no front process handing connections over, no shared users or
definitions. Each round runs one broker alone and then two together (the order
alternating between rounds) and prints consumed msg/s, the sum for two, their ratio,
and each broker's CPU per message, so the cost of sharing the machine's cores with the
load generators shows beside the gain.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading

import run


def _loadgen_args(scenario: str, duration: float, warmup: float) -> argparse.Namespace:
    args = run.build_parser().parse_args(["--scenario", scenario, "--duration", str(duration),
                                          "--warmup", str(warmup)])
    return run.scenario_args(args, scenario)


def _drive(brokers: int, args: argparse.Namespace, start_timeout: float) -> list[dict]:
    """Start ``brokers`` Leverets, drive each with its own load generator at once."""
    procs = [run.LeveretProcess(run.DEFAULT_LEVERET_CMD, start_timeout) for _ in range(brokers)]
    results: list[dict] = [{} for _ in procs]
    try:
        pids = [p.start() for p in procs]

        def one(i: int) -> None:
            results[i] = run.run_loadgen("127.0.0.1", procs[i].port, pids[i], args)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(brokers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for p in procs:
            p.stop()
    for r in results:
        if not r.get("ok", True) or "consumed_per_s" not in r:
            raise RuntimeError(f"a load generator failed: {r.get('error', r)}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=["transient", "confirmed"], default="transient")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--start-timeout", type=float, default=30.0)
    a = p.parse_args(argv)
    args = _loadgen_args(a.scenario, a.duration, a.warmup)
    ratios: list[float] = []
    for rnd in range(a.rounds):
        order = (1, 2) if rnd % 2 == 0 else (2, 1)
        rates: dict[int, float] = {}
        for n in order:
            res = _drive(n, args, a.start_timeout)
            rates[n] = sum(r["consumed_per_s"] for r in res)
            each = " + ".join(f"{r['consumed_per_s']:,.0f}" for r in res)
            cpu = ", ".join(str(r.get("broker_cpu_us_per_msg")) for r in res)
            print(f"round {rnd + 1}: {n} broker(s): {rates[n]:,.0f} consumed msg/s ({each}), "
                  f"broker CPU us/msg {cpu}", flush=True)
        ratios.append(rates[2] / rates[1])
        print(f"round {rnd + 1}: two/one {ratios[-1]:.3f}", flush=True)
    print(f"{a.scenario}: two brokers / one, median of {a.rounds}: "
          f"{statistics.median(ratios):.3f} ({', '.join(f'{r:.3f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
