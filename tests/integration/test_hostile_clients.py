"""Clients that do not read, or go on sending after the broker closed.

Each test is bounded in time (a few seconds) and in memory: it stops as soon as the broker
has grown by more than the allowance, so a regression fails fast instead of eating RAM.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest
from pamqp import body as pbody
from pamqp import commands as spec
from pamqp import frame as pframe
from pamqp import header as pheader

ALLOWANCE_MB = 100  # broker growth that fails a test (it grows by ~5 MB when it is right)
# A bound for what is due (a frame, a drop), not a budget: waits end on the state. How soon
# the broker drops a socket is pinned with a fake clock in tests/unit/test_closing.py.
WAIT = 60.0


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def marshal(channel: int, method: Any) -> bytes:
    return pframe.marshal(method, channel)


def publish(channel: int, routing_key: str, body: bytes, mandatory: bool = False) -> bytes:
    return (marshal(channel, spec.Basic.Publish(exchange="", routing_key=routing_key,
                                                mandatory=mandatory))
            + marshal(channel, pheader.ContentHeader(0, len(body), spec.Basic.Properties()))
            + marshal(channel, pbody.ContentBody(body)))


class Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.buf = b""

    def frame(self) -> tuple[int, Any]:
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack(">I", self.buf[3:7])[0]
                if len(self.buf) >= size + 8:
                    raw, self.buf = self.buf[:size + 8], self.buf[size + 8:]
                    _, channel, method = pframe.unmarshal(raw)
                    return channel, method
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError
            self.buf += data

    def wait(self, name: str) -> Any:
        while True:
            _, method = self.frame()
            if getattr(method, "name", "") == name:
                return method

    def start(self, frame_max: int = 131072, heartbeat: int = 0, open_: bool = True) -> None:
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.wait("Connection.Start")
        self.sock.sendall(marshal(0, spec.Connection.StartOk(
            client_properties={"capabilities": {"publisher_confirms": True}},
            mechanism="PLAIN", response="\0guest\0guest")))
        self.wait("Connection.Tune")
        self.sock.sendall(marshal(0, spec.Connection.TuneOk(channel_max=2047,
                                                            frame_max=frame_max,
                                                            heartbeat=heartbeat)))
        if open_:
            self.sock.sendall(marshal(0, spec.Connection.Open(virtual_host="/")))
            self.wait("Connection.OpenOk")
            self.sock.sendall(marshal(1, spec.Channel.Open()))
            self.wait("Channel.OpenOk")

    def flood(self, data: bytes, seconds: float, pid: int, base: int,
              until: int | None = None) -> tuple[int, str]:
        """Send ``data`` over and over, never reading, for ``seconds`` or ``until`` bytes;
        stop early if the broker balloons or drops the socket."""
        self.sock.setblocking(False)
        view, sent, start = memoryview(data), 0, time.monotonic()
        try:
            while time.monotonic() - start < seconds:
                if until is not None and sent >= until:
                    return sent, "sent"
                try:
                    sent += self.sock.send(view[sent % len(data):])
                except BlockingIOError:
                    time.sleep(0.01)
                except OSError:
                    return sent, "dropped"
                if rss_mb(pid) - base > ALLOWANCE_MB:
                    return sent, "ballooned"
            return sent, "time"
        finally:
            self.sock.settimeout(WAIT)

    def finish(self, data: bytes, sent: int) -> None:
        """Send the rest of the ``data`` the flood was in the middle of (frames stay whole)."""
        if sent % len(data):
            self.sock.sendall(memoryview(data)[sent % len(data):])

    def eof_after(self, limit: float = WAIT, start: float | None = None) -> float:
        """Seconds until the broker drops the socket (reading and discarding meanwhile),
        from ``start`` (default: now); ``limit`` or more when it never did."""
        start = time.monotonic() if start is None else start
        self.sock.settimeout(0.2)
        while time.monotonic() - start < limit:
            try:
                if not self.sock.recv(1 << 16):
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        return time.monotonic() - start


@pytest.fixture
def lone_broker(make_broker: Any) -> Any:
    """A private broker: its RSS is ours to measure."""
    return make_broker()


def test_publisher_that_never_reads_is_paused_then_resumed(lone_broker: Any) -> None:
    """confirm.select + 4 KB mandatory unroutable publishes, never reading: before the fix the
    broker grew ~250 MB/s (30 -> 874 MB in 3.4 s); now it stops reading the socket."""
    pid = lone_broker.proc.pid
    client = Raw(lone_broker.port)
    client.start()
    client.sock.sendall(marshal(1, spec.Confirm.Select()))
    base = rss_mb(pid)
    chunk = publish(1, "no-such-queue", b"x" * 4096, mandatory=True) * 16
    sent, why = client.flood(chunk, 3.0, pid, base)
    assert why == "time", f"{why} after sending {sent >> 20} MB"
    assert rss_mb(pid) - base < 50
    assert sent < 200 << 20  # the broker stopped taking input
    # Once the client reads, the broker drains its output and reads again.
    got: list[Any] = []

    def read() -> None:
        try:
            while True:
                _, method = client.frame()
                if getattr(method, "name", "") == "Queue.DeclareOk":
                    got.append(method)
                    return
        except (OSError, EOFError):
            return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    client.sock.settimeout(20)
    client.finish(chunk, sent)
    client.sock.sendall(marshal(1, spec.Queue.Declare(queue="", exclusive=True)))
    reader.join(20)
    assert got, "no declare-ok after the client started reading"


def test_refused_tune_ok_then_flood_is_dropped_after_3s(lone_broker: Any) -> None:
    """Before the fix: 64 KB frames after a refused tune-ok grew the broker by > 1.4 GB in 4 s
    (every read re-raised frame_too_large on a buffer that kept growing)."""
    pid = lone_broker.proc.pid
    client = Raw(lone_broker.port)
    start = time.monotonic()  # before the broker's 3 s (RabbitMQ's) start: a lower bound holds
    client.start(frame_max=1024, open_=False)  # below the 4096 minimum: 530
    base = rss_mb(pid)
    sent, why = client.flood(publish(1, "q", b"x" * 65536) * 4, WAIT, pid, base)
    assert why == "dropped", f"{why} after sending {sent >> 20} MB"
    assert time.monotonic() - start > 2.5
    assert rss_mb(pid) - base < 20


@pytest.mark.parametrize("heartbeat", [0, 60])
def test_frame_error_drops_the_socket_after_3s(lone_broker: Any, heartbeat: int) -> None:
    """Before the fix the socket stayed open 10 s (heartbeat 0) or over 60 s (heartbeat 60)."""
    client = Raw(lone_broker.port)
    client.start(heartbeat=heartbeat)
    sent = time.monotonic()  # before the broker's 3 s (RabbitMQ 3.10's) start
    client.sock.sendall(struct.pack(">BHI", 1, 1, 4) + b"abcd" + b"\x00")  # bad end marker
    close = client.wait("Connection.Close")
    assert close.reply_code == 501
    assert 2.5 < client.eof_after(start=sent) < WAIT
    assert "no close-ok in time, dropping it" in lone_broker.log_text()


def test_hard_error_then_publishes_are_discarded_and_close_ok_closes(lone_broker: Any) -> None:
    pid = lone_broker.proc.pid
    client = Raw(lone_broker.port)
    client.start()
    client.sock.sendall(marshal(1, spec.Basic.Qos(prefetch_size=5)))  # 540, hard
    assert client.wait("Connection.Close").reply_code == 540
    base = rss_mb(pid)
    chunk = publish(1, "q", b"x" * 65536) * 4
    sent, why = client.flood(chunk, WAIT, pid, base, until=10 << 20)
    # Read (and thrown away), as RabbitMQ does: 10 MB went in without a drop or growth.
    assert why == "sent", f"{why} after sending {sent >> 20} MB"
    assert rss_mb(pid) - base < 20
    client.finish(chunk, sent)
    client.sock.sendall(marshal(0, spec.Connection.CloseOk()))
    assert client.eof_after() < WAIT
    assert "no close-ok in time" not in lone_broker.log_text()  # the close-ok closed it


def nested_table(depth: int) -> bytes:
    table = struct.pack(">I", 0)
    for _ in range(depth):
        entry = b"\x01a" + b"F" + table
        table = struct.pack(">I", len(entry)) + entry
    return table


def test_deep_tables_one_log_line_and_no_lost_message(lone_broker: Any) -> None:
    """Before: queue.declare arguments nested 1,000 deep got 541 and a
    3,000-line traceback; the same headers on a message expiring into a dead-letter
    exchange lost the message (in neither queue) after an exception in the TTL timer."""
    client = Raw(lone_broker.port)
    client.start()
    ch = 1
    client.sock.sendall(marshal(ch, spec.Queue.Declare(queue="deep-dlq")))
    client.wait("Queue.DeclareOk")
    client.sock.sendall(marshal(ch, spec.Queue.Declare(queue="deep-src", arguments={
        "x-message-ttl": 50, "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "deep-dlq"})))
    client.wait("Queue.DeclareOk")
    body = b"keep me"
    header = struct.pack(">HHQH", 60, 0, len(body), 0x2000) + nested_table(1000)
    client.sock.sendall(
        marshal(ch, spec.Basic.Publish(exchange="", routing_key="deep-src"))
        + struct.pack(">BHI", 2, ch, len(header)) + header + b"\xce"
        + marshal(ch, pbody.ContentBody(body)))
    deadline = time.monotonic() + WAIT
    while True:
        client.sock.sendall(marshal(ch, spec.Basic.Get(queue="deep-dlq", no_ack=True)))
        _, reply = client.frame()
        if reply.name == "Basic.GetOk":
            break
        assert time.monotonic() < deadline, "the message never reached the dead-letter queue"
        time.sleep(0.1)
    _, content = client.frame()
    _, got = client.frame()
    assert got.value == body
    death = content.properties.headers["x-death"][0]
    assert (death["queue"], death["reason"]) == ("deep-src", "expired")
    assert "a" not in content.properties.headers  # the undecodable headers were dropped

    other = Raw(lone_broker.port)
    other.start()
    args = nested_table(1000)
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x04deep" + b"\x00" + args
    before = lone_broker.log_text().count("\n")
    other.sock.sendall(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
    close = other.wait("Connection.Close")
    assert (close.reply_code, close.class_id, close.method_id) == (501, 50, 10)
    other.sock.sendall(marshal(0, spec.Connection.CloseOk()))
    assert other.eof_after() < WAIT
    log = lone_broker.log_text()
    assert "Traceback" not in log
    assert log.count("without its headers") == 1
    new_lines = log.splitlines()[before:]
    assert len([line for line in new_lines if "FRAME_ERROR" in line]) == 1
    assert all(len(line) < 1000 for line in new_lines)
