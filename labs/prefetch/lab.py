"""Staging for the prefetch lab: a slow and a fast worker share one queue, twice."""

from __future__ import annotations

import time

from leveret.labs.harness import Program, Run, connect, wait_for_lines

EXAMPLE = "leveret.labs.prefetch.example"
BATCH = 20
SLOW, FAST = 0.2, 0.01  # seconds of work per message


def run(lab: Run) -> None:
    results: dict[int, tuple[int, float]] = {}

    def share(prefetch: int) -> None:
        queue = lab.queue(f"prefetch-{prefetch}")
        with connect(lab.url) as conn:
            conn.channel().queue_declare(queue)
        label = "unlimited" if prefetch == 0 else str(prefetch)
        slow = Program(lab.url, EXAMPLE, queue, "--work", str(SLOW), "--prefetch", str(prefetch))
        fast = Program(lab.url, EXAMPLE, queue, "--work", str(FAST), "--prefetch", str(prefetch))
        try:
            slow.wait_for("consuming")
            fast.wait_for("consuming")
            lab.event("note", f"slow worker ({SLOW}s/msg) and fast worker ({FAST}s/msg), "
                      f"prefetch {label}")
            start = time.monotonic()
            with connect(lab.url) as conn:
                ch = conn.channel()
                for n in range(1, BATCH + 1):
                    ch.basic_publish("", queue, str(n).encode())
            lab.event("publish", f"{BATCH} messages")
            wait_for_lines([slow, fast], "processed", BATCH)
            took = time.monotonic() - start
        finally:
            slow.kill()
            fast.kill()
        n_slow, n_fast = slow.count("processed"), fast.count("processed")
        lab.event("ack", f"all {BATCH} processed and acked in {took:.2f} s: slow worker "
                  f"{n_slow}, fast worker {n_fast}")
        results[prefetch] = (n_slow, took)
        lab.row(f"prefetch {label}: slow got {n_slow}, fast {n_fast}", sent=BATCH, confirmed=None,
                processed=n_slow + n_fast, survived=0, lost=BATCH - n_slow - n_fast,
                duplicated=0)

    lab.part("A. prefetch unlimited (0)", lambda: share(0))
    lab.part("B. prefetch 1", lambda: share(1))
    if len(results) == 2:
        (slow0, took0), (slow1, took1) = results[0], results[1]
        lab.check(slow0 >= BATCH * 2 // 5,
                  f"unlimited: the broker deals round robin, the slow worker gets {slow0} of "
                  f"{BATCH} and they wait for it")
        lab.check(slow1 <= BATCH // 4,
                  f"prefetch 1: the fast worker takes most; the slow one gets only {slow1}")
        lab.check(took1 < took0, f"prefetch 1 finishes the batch sooner ({took1:.2f} s vs "
                  f"{took0:.2f} s)")

