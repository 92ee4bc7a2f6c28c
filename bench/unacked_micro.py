#!/usr/bin/env python3
"""What a ``basic.ack(multiple=true)`` pays for the holes single acks leave in the
unacked map (``amqp/unacked.py``): its scan walks the dict from its first slot, and a
popped entry stays a hole until the dict next resizes.

Each case keeps ``--window`` deliveries outstanding, settles ``--singles`` of every
``--singles + 1`` with single acks, oldest first (as a consumer acks in order), and the
last with a multiple ack of the oldest tag left; printed: microseconds per multiple ack, and the same figure on a map
without holes (every ack multiple). ``deep`` first fills the map with ``--deep``
deliveries and single-acks all but ``--window`` of them (a consumer without prefetch that
caught up), the worst case for the holes left at the front.

    python bench/unacked_micro.py
    LEVERET_NO_EXTENSIONS=1 python bench/unacked_micro.py   # pure Python
"""

from __future__ import annotations

import argparse
import json
import time

from leveret.amqp.unacked import UnackedMap


def run(window: int, singles: int, rounds: int, deep: int) -> float:
    """Microseconds per multiple ack, over ``rounds`` of them."""
    unacked = UnackedMap()
    tag = 0
    for _ in range(max(deep, window)):
        tag += 1
        unacked.add(tag, tag)  # type: ignore[arg-type]  # plain values stand for deliveries
    oldest = 1
    for t in range(1, max(deep, window) - window + 1):  # deep: all but the window, singly
        unacked.take_one(t)
        oldest = t + 1
    spent = 0.0
    for _ in range(rounds):
        for _ in range(singles):  # single acks of the oldest (in order), refill the window
            unacked.take_one(oldest)
            oldest += 1
            tag += 1
            unacked.add(tag, tag)  # type: ignore[arg-type]
        start = time.perf_counter()
        unacked.take(oldest, True)
        spent += time.perf_counter() - start
        oldest += 1
        tag += 1
        unacked.add(tag, tag)  # type: ignore[arg-type]
    return spent / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--singles", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=20000)
    parser.add_argument("--deep", type=int, default=1_000_000)
    args = parser.parse_args()
    out = {
        "holes_us": run(args.window, args.singles, args.rounds, 0),
        "no_holes_us": run(args.window, 0, args.rounds, 0),
        "deep_holes_us": run(args.window, args.singles, args.rounds, args.deep),
    }
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))


if __name__ == "__main__":
    main()
