"""What every lab shares: the timeline, the counts, the checks, and client helpers.

Theory of operation
-------------------
The broker a lab stages is ``brokers.py``: its own Leveret subprocess, or any
broker given with ``--url``.

``Run`` prints as it goes: a timeline (seconds since the start, a kind, what
happened), then a table of counts per case, then the checks the lesson
predicts. Any failed check makes the exit status 1. Every wait is for a real
event (a log line, a process exit, a confirm, a delivery), never a sleep.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import pika

from leveret.labs.brokers import WAIT_TIMEOUT, Broker, LabFailed, NeedsOwnBroker

# processed: handled by a consumer (acked, or taken with auto-ack); survived: still held by
# the broker at the end (the queue, or back after a crash); lost: neither.
COLUMNS = ("sent", "confirmed", "processed", "survived", "lost", "duplicated")


@dataclass
class Row:
    case: str
    values: dict[str, int | None]


@dataclass
class Run:
    """One run of one lab: what it prints, counts and checks."""

    lab: str
    broker: Broker
    fast: bool
    out: TextIO
    t0: float = field(default_factory=time.monotonic)
    rows: list[Row] = field(default_factory=list)
    checks: list[tuple[bool, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    _suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def url(self) -> str:
        return self.broker.url

    @property
    def controlled(self) -> bool:
        return self.broker.controlled

    def queue(self, name: str) -> str:
        """A queue (or exchange) name for this lab; unique per run on a shared broker."""
        full = f"lab.{self.lab}.{name}"
        if not self.controlled:
            full += f".{self._suffix}"
        self.created.append(full)
        return full

    # -- printing ---------------------------------------------------------------

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def event(self, kind: str, text: str) -> None:
        """One timeline line: seconds since the start, what kind of event, what happened."""
        self.say(f"{time.monotonic() - self.t0:8.3f}s  {kind:<11} {text}")

    def row(self, case: str, **values: int | None) -> None:
        unknown = set(values) - set(COLUMNS)
        assert not unknown, unknown
        self.rows.append(Row(case, {c: values.get(c) for c in COLUMNS}))

    def check(self, ok: bool, text: str) -> bool:
        self.checks.append((ok, text))
        return ok

    def part(self, title: str, body: Callable[[], None], own_broker: bool = False) -> None:
        """Run one part of the lab; skip it (saying why) if it needs to crash the broker."""
        self.say(f"\n== {title}")
        if own_broker and not self.controlled:
            self._skip(title, "part stops, kills or restarts the broker")
            return
        try:
            body()
        except NeedsOwnBroker as exc:
            self._skip(title, str(exc))

    def skip(self, what: str, why: str) -> None:
        """Skip a step inside a part (the part itself goes on)."""
        self._skip(what, why)

    def _skip(self, title: str, why: str) -> None:
        self.skipped.append(title)
        self.event("skipped", f"{title}: this {why}, so it needs a broker the lab "
                   "controls (run without --url)")

    def finish(self) -> int:
        """Print the table and the checks; the exit status (1 if any check failed)."""
        self.say("\ncounts")
        width = max([len("case"), *(len(r.case) for r in self.rows)])
        self.say(f"  {'case':<{width}}  " + "  ".join(f"{c:>10}" for c in COLUMNS))
        for r in self.rows:
            cells = ("-" if r.values[c] is None else str(r.values[c]) for c in COLUMNS)
            self.say(f"  {r.case:<{width}}  " + "  ".join(f"{v:>10}" for v in cells))
        self.say("\nchecks (what the lesson predicts)")
        for ok, text in self.checks:
            self.say(f"  {'ok  ' if ok else 'FAIL'}  {text}")
        if self.skipped:
            self.say(f"  skip  {len(self.skipped)} part(s) need a broker the lab controls: "
                     + "; ".join(self.skipped))
        failed = sum(not ok for ok, _ in self.checks)
        elapsed = time.monotonic() - self.t0
        if failed:
            self.say(f"\nresult: {failed} check(s) FAILED: the broker did not behave as the "
                     f"lesson predicts ({elapsed:.1f} s)")
            return 1
        self.say(f"\nresult: as the lesson predicts ({elapsed:.1f} s)")
        return 0


# -- small pika helpers shared by the labs' staging (the examples stay self-contained) ----

def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url))


def drain(url: str, queue: str) -> list[tuple[pika.spec.Basic.GetOk, pika.BasicProperties, bytes]]:
    """Everything in ``queue``, fetched with basic.get and acked."""
    got: list[tuple[pika.spec.Basic.GetOk, pika.BasicProperties, bytes]] = []
    with connect(url) as conn:
        ch = conn.channel()
        while True:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append((method, props, body))


def depth(url: str, queue: str) -> int | None:
    """Ready messages in ``queue``; None if it does not exist."""
    with connect(url) as conn:
        ch = conn.channel()
        try:
            return int(ch.queue_declare(queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code == 404:
                return None
            raise


def settle(url: str) -> None:
    """Wait until what the broker has accepted so far is on disk (definitions included).

    Leveret answers ``queue.declare-ok`` before the durable queue's definition is
    synced: it rides in the next group commit. A lab that declares a queue and then
    crashes the broker without any confirm in between would lose the queue itself,
    which is not what it means to show. One confirmed persistent message (to a
    queue of its own) waits for a commit, and commits are written in order.
    """
    with connect(url) as conn:
        ch = conn.channel()
        ch.queue_declare("lab.settle", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", "lab.settle", b"", pika.BasicProperties(delivery_mode=2))
        ch.queue_purge("lab.settle")


def delete_queues(url: str, names: list[str]) -> None:
    """Remove what a --url run declared (queues and exchanges share the lab's prefix)."""
    with connect(url) as conn:
        for name in names:
            ch = conn.channel()
            ch.queue_delete(name)
            ch.exchange_delete(name)
            ch.close()


# Every Program's reader thread notifies this one condition, so a lab can wait on
# the output of several processes at once (``wait_for_lines``).
_OUTPUT = threading.Condition()


class Program:
    """A lab's example run as a separate process; each line it prints is an event."""

    def __init__(self, url: str, module: str, *args: str) -> None:
        self.args = [sys.executable, "-u", "-m", module, *args]
        self.proc = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "AMQP_URL": url})
        self.output: list[str] = []
        self._cursor = 0  # wait_for looks at lines from here on
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with _OUTPUT:
                self.output.append(line.rstrip("\n"))
                _OUTPUT.notify_all()
        with _OUTPUT:
            _OUTPUT.notify_all()

    def wait_for(self, prefix: str | tuple[str, ...]) -> str:
        """The next line (after the last one returned) that starts with ``prefix``."""
        deadline = time.monotonic() + WAIT_TIMEOUT
        with _OUTPUT:
            while True:
                for i in range(self._cursor, len(self.output)):
                    if self.output[i].startswith(prefix):
                        self._cursor = i + 1
                        return self.output[i]
                left = deadline - time.monotonic()
                if not self._reader.is_alive() or left <= 0:
                    command = " ".join(str(a) for a in self.args)
                    raise LabFailed(f"{command} never printed "
                                    f"{prefix!r}:\n{self._stderr()}")
                _OUTPUT.wait(left)

    def count(self, prefix: str) -> int:
        with _OUTPUT:
            return sum(line.startswith(prefix) for line in self.output)

    def kill(self) -> None:
        """SIGKILL, and wait for the exit and the last of its output."""
        self.proc.kill()
        self.proc.wait()
        self._reader.join(WAIT_TIMEOUT)

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-2000:]


def wait_for_lines(programs: list[Program], prefix: str, total: int) -> None:
    """Wait until the programs have printed ``total`` lines starting with ``prefix``."""
    deadline = time.monotonic() + WAIT_TIMEOUT
    with _OUTPUT:
        while sum(p.count(prefix) for p in programs) < total:
            left = deadline - time.monotonic()
            if left <= 0 or not all(p._reader.is_alive() for p in programs):
                raise LabFailed(f"timed out waiting for {total} {prefix!r} lines")
            _OUTPUT.wait(left)


def consume(url: str, queue: str, count: int,
            prefetch: int = 0) -> list[tuple[pika.spec.Basic.Deliver, pika.BasicProperties, bytes]]:
    """The next ``count`` deliveries from ``queue`` (acked), waiting for each to arrive."""
    got: list[tuple[pika.spec.Basic.Deliver, pika.BasicProperties, bytes]] = []
    with connect(url) as conn:
        ch = conn.channel()
        if prefetch:
            ch.basic_qos(prefetch_count=prefetch)

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            got.append((method, props, body))
            ch.basic_ack(method.delivery_tag)

        tag = ch.basic_consume(queue, on_message)
        wait_until(lambda: len(got) >= count, f"{count} deliveries from {queue}",
                   lambda: conn.process_data_events(0.2))
        ch.basic_cancel(tag)
    return got


def wait_until(predicate: Callable[[], Any], what: str, poll: Callable[[], None]) -> None:
    """Process I/O (``poll``, e.g. a pika connection's event loop) until ``predicate``.

    The loop waits inside ``poll`` for socket events, so it reacts to deliveries and
    confirms as they come; the deadline only turns a hang into a failure.
    """
    deadline = time.monotonic() + WAIT_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise LabFailed(f"timed out waiting for {what}")
        poll()


def console_link(lab: str, message_ids: list[str]) -> str | None:
    """Hook for the web console: the link that shows these messages' trace.

    The console does not exist yet, so there is no link; ``command.py`` prints one
    only when this returns it.
    """
    return None
