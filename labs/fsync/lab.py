"""Staging for the fsync lab: confirms per synced write, for growing windows of confirms.

Leveret logs one debug line per synced write ("group commit N: K confirm(s) released by
one synced write", persistence/group_commit.py); the lab's broker runs at debug level and
the lab counts those lines. Against --url only the timings are measured.
"""

from __future__ import annotations

import time

from leveret.labs.brokers import OwnBroker
from leveret.labs.fsync import example
from leveret.labs.harness import Run, connect


def run(lab: Run) -> None:
    n = 400 if lab.fast else 4_000
    windows = (1, 10, 100) if lab.fast else (1, 10, 100, 1000)
    ratios: dict[int, float] = {}
    per_msg: dict[int, float] = {}

    def measure() -> None:
        queue = lab.queue("fsync")
        with connect(lab.url) as conn:
            conn.channel().queue_declare(queue, durable=True)
        for window in windows:
            broker = lab.broker if isinstance(lab.broker, OwnBroker) else None
            mark = len(broker.lines) if broker else 0
            start = time.perf_counter()
            confirmed = example.publish_with_window(lab.url, queue, n, window)
            took = time.perf_counter() - start
            per_msg[window] = took / n
            text = (f"window {window:>4}: {confirmed} confirmed in {took:.2f} s, "
                    f"{took / n * 1e6:,.0f} us/msg, a confirm waits ~{window * took / n * 1e3:.1f}"
                    " ms")
            if broker:
                writes, released = broker.confirms_committed(mark, confirmed)
                ratios[window] = released / writes
                text += f"; {writes} synced writes, {ratios[window]:.1f} confirms per fsync"
            lab.event("confirm", text)
            lab.row(f"window {window}", sent=n, confirmed=confirmed, survived=None, lost=None,
                    duplicated=None)
        if not lab.controlled:
            lab.skip("counting synced writes", "step reads the broker's own log")

    lab.part("persistent messages, confirms with windows of " + ", ".join(map(str, windows)),
             measure)
    if ratios:
        lab.check(ratios[1] <= 1.2, f"window 1: one fsync per confirm ({ratios[1]:.1f})")
        lab.check(ratios[100] >= 5, f"window 100: many confirms share one fsync "
                  f"({ratios[100]:.1f})")
    if per_msg:
        lab.check(per_msg[100] < per_msg[1], "a window of 100 costs less per message than 1")
