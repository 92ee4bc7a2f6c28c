"""What the Spark bench's CPU sampler costs: its own CPU as a share of a core.

    python bench/sampler_cost.py                     # 0.1 s interval, 5 s, 3 rounds
    python bench/sampler_cost.py --interval 0.05 --seconds 10 --rounds 5

``cpu_sampler.CpuSampler`` reads /proc from inside the process it measures, so its cost
comes out of the pipeline's figures. This was a unit test's budget ("under 3% of a
core") until it failed on a machine busy with other work: a cost is a measurement, so
it is printed here, next to what reading every process's stat and cmdline each time costs
(the naive sampler the ProcessTable replaced), and judged by whoever reads it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_sampler  # bench/ is not a package


def share_of_a_core(run: Callable[[], None]) -> float:
    """This process's CPU while ``run`` works, per second of wall time."""
    cpu, wall = time.process_time(), time.monotonic()
    run()
    return (time.process_time() - cpu) / (time.monotonic() - wall)


def sampled(interval: float, seconds: float) -> Callable[[], None]:
    def run() -> None:
        with cpu_sampler.CpuSampler(interval):
            time.sleep(seconds)
    return run


def every_process(interval: float, seconds: float) -> Callable[[], None]:
    """All of /proc at each look: what the sampler would cost without ProcessTable."""
    def run() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        Path(entry.path, "stat").read_bytes()
                        Path(entry.path, "cmdline").read_bytes()
                    except OSError:
                        pass  # exited between the listing and the read
            time.sleep(interval)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(f"{os.cpu_count()} cores, {processes} processes, {os.getloadavg()[0]:.1f} load; "
          f"a look every {args.interval} s for {args.seconds} s, {args.rounds} rounds")
    for name, make in (("CpuSampler", sampled), ("all of /proc", every_process)):
        shares = [share_of_a_core(make(args.interval, args.seconds))
                  for _ in range(args.rounds)]
        print(f"{name:>14}: {100 * statistics.median(shares):.2f}% of a core (median; "
              f"{', '.join(f'{100 * s:.2f}' for s in shares)})")


if __name__ == "__main__":
    main()
