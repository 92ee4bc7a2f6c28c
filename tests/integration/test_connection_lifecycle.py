"""A connection's life as RabbitMQ 3.x clients see it: handshake, tuning,
authentication, heartbeats, broker shutdown and start-up failures.

Library clients (pika, aiormq) show what unmodified applications see; a raw
socket speaking pamqp frames covers what those libraries cannot do (AMQPLAIN,
odd tune-ok values, going silent, sending garbage).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiormq
import pika
import pika.exceptions
import pytest
from pamqp import commands, encode, frame, heartbeat
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

RABBITMQ_CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
)
# A bound for what is due (a frame, a close, an exit), not a budget: waits end on the state.
WAIT = 60.0
SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
AUTH_REFUSED_TEXT = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism {}. "
    "For details see the broker logfile."
)


class RawClient:
    """A blocking AMQP 0-9-1 client that does only what it is told."""

    def __init__(self, host: str, port: int, timeout: float = WAIT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.start: Any = None
        self.tune: Any = None

    def close(self) -> None:
        self.sock.close()

    def send(self, channel: int, value: Any) -> None:
        self.sock.sendall(frame.marshal(value, channel))

    def recv(self, timeout: float = WAIT) -> tuple[int, Any] | None:
        """The next frame as (channel, frame), or None once the broker closed the socket."""
        deadline = time.monotonic() + timeout
        while True:
            if self.buf:
                try:
                    used, channel, value = frame.unmarshal(self.buf)
                except Exception:
                    used = 0
                if used:
                    self.buf = self.buf[used:]
                    return channel, value
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the broker")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.buf += data

    def recv_method(self, timeout: float = WAIT) -> tuple[int, Any] | None:
        """Like recv, skipping heartbeats."""
        while True:
            got = self.recv(timeout)
            if got is None or not isinstance(got[1], heartbeat.Heartbeat):
                return got

    def handshake(self, mechanism: str = "PLAIN", response: bytes = b"\0guest\0guest",
                  frame_max: int | None = None, channel_max: int | None = None,
                  heartbeat: int = 0, vhost: str = "/") -> Any:
        """Run the handshake; returns connection.open-ok, or the broker's connection.close."""
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        _, self.start = self.recv()  # type: ignore[misc]
        assert isinstance(self.start, commands.Connection.Start)
        self.send(0, commands.Connection.StartOk(
            client_properties={"product": "raw", "capabilities": {
                "authentication_failure_close": True}},
            mechanism=mechanism, response=response.decode("latin-1"), locale="en_US"))
        got = self.recv()
        assert got is not None, "broker dropped the connection after start-ok"
        if not isinstance(got[1], commands.Connection.Tune):
            return got[1]
        self.tune = got[1]
        self.send(0, commands.Connection.TuneOk(
            channel_max=self.tune.channel_max if channel_max is None else channel_max,
            frame_max=self.tune.frame_max if frame_max is None else frame_max,
            heartbeat=heartbeat))
        self.send(0, commands.Connection.Open(virtual_host=vhost))
        got = self.recv_method()
        assert got is not None, "broker dropped the connection during tuning"
        return got[1]


def amqplain(login: str, password: str) -> bytes:
    """AMQPLAIN's response: a field table without its length prefix."""
    return encode.field_table({"LOGIN": login, "PASSWORD": password})[4:]


def assert_close(method: Any, code: int, text: str, class_id: int | None = None,
                 method_id: int | None = None) -> None:
    assert isinstance(method, commands.Connection.Close), method
    assert (method.reply_code, method.reply_text) == (code, text)
    if class_id is not None:
        assert (method.class_id, method.method_id) == (class_id, method_id)


def roundtrip(channel: Any, queue: str, body: bytes) -> None:
    channel.basic_publish("", queue, body)
    for _ in range(100):
        _, _, got = channel.basic_get(queue, auto_ack=True)
        if got is not None:
            assert got == body
            return
        time.sleep(0.01)
    raise AssertionError(f"{body!r} never arrived")


# --- server properties and tuning -----------------------------------------------


def test_server_properties_as_rabbitmq(broker):
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        props = conn._impl.server_properties
    finally:
        conn.close()
    for key in ("product", "version", "platform", "copyright", "information", "cluster_name"):
        assert isinstance(props[key], (str, bytes)) and props[key], key
    caps = props["capabilities"]
    for name in RABBITMQ_CAPABILITIES:
        assert caps.get(name) is True, name


async def test_server_properties_through_aiormq(broker):
    conn = await aiormq.connect(broker.url)
    try:
        props = conn.server_properties
        caps = props["capabilities"]
        assert {name: caps.get(name) for name in RABBITMQ_CAPABILITIES} == dict.fromkeys(
            RABBITMQ_CAPABILITIES, True)
        assert props["product"]
    finally:
        await conn.close()


def test_tune_proposes_rabbitmq_defaults(broker):
    c = RawClient(broker.host, broker.port)
    try:
        assert isinstance(c.handshake(), commands.Connection.OpenOk)
        assert c.start.version_major == 0 and c.start.version_minor == 9
        assert set(c.start.mechanisms.split()) >= {"PLAIN", "AMQPLAIN"}
        assert (c.tune.channel_max, c.tune.frame_max, c.tune.heartbeat) == (2047, 131072, 60)
    finally:
        c.close()


def test_client_values_win_when_smaller(broker):
    params = pika.URLParameters(broker.url)
    params.frame_max, params.channel_max, params.heartbeat = 8192, 7, 5
    conn = pika.BlockingConnection(params)
    try:
        assert (conn._impl.params.frame_max, conn._impl.params.channel_max,
                conn._impl.params.heartbeat) == (8192, 7, 5)
        assert conn.channel().is_open
    finally:
        conn.close()


def test_heartbeat_zero_disables(broker):
    params = pika.URLParameters(broker.url)
    params.heartbeat = 0
    conn = pika.BlockingConnection(params)
    try:
        assert conn._impl.params.heartbeat == 0
    finally:
        conn.close()


def test_publishes_read_in_one_batch_are_confirmed_with_multiple(broker, qname):
    """Twenty publishes that reach the broker in one write are acked with multiple=True
    (RabbitMQ does too); pika's own writes may arrive one by one on a busy machine."""
    c = RawClient(broker.host, broker.port)
    try:
        assert isinstance(c.handshake(), commands.Connection.OpenOk)
        c.send(1, commands.Channel.Open())
        assert isinstance(c.recv_method()[1], commands.Channel.OpenOk)  # type: ignore[index]
        c.send(1, commands.Queue.Declare(queue=qname, exclusive=True))
        assert isinstance(c.recv_method()[1], commands.Queue.DeclareOk)  # type: ignore[index]
        c.send(1, commands.Confirm.Select())
        assert isinstance(c.recv_method()[1], commands.Confirm.SelectOk)  # type: ignore[index]
        publish = (frame.marshal(commands.Basic.Publish(routing_key=qname), 1)
                   + frame.marshal(ContentHeader(0, 1), 1)
                   + frame.marshal(ContentBody(b"x"), 1))
        c.sock.sendall(publish * 20)
        acks: list[tuple[int, bool]] = []
        while not acks or acks[-1][0] < 20:
            ack = c.recv_method()[1]  # type: ignore[index]
            assert isinstance(ack, commands.Basic.Ack), ack
            acks.append((ack.delivery_tag, ack.multiple))
        assert acks[-1] == (20, True) and len(acks) < 20, acks
    finally:
        c.close()


def test_small_frame_max_splits_bodies(broker, qname):
    """A client that tunes frame_max to the 4096 minimum gets bodies split to fit."""
    c = RawClient(broker.host, broker.port)
    try:
        assert isinstance(c.handshake(frame_max=4096), commands.Connection.OpenOk)
        c.send(1, commands.Channel.Open())
        assert isinstance(c.recv_method()[1], commands.Channel.OpenOk)  # type: ignore[index]
        c.send(1, commands.Queue.Declare(queue=qname, auto_delete=True))
        assert isinstance(c.recv_method()[1], commands.Queue.DeclareOk)  # type: ignore[index]
        payload = bytes(range(256)) * 80  # 20 KiB
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as pub:
            pub.channel().basic_publish("", qname, payload)
        c.send(1, commands.Basic.Get(queue=qname, no_ack=True))
        assert isinstance(c.recv_method()[1], commands.Basic.GetOk)  # type: ignore[index]
        body = b""
        header = c.recv_method()[1]  # type: ignore[index]
        assert header.body_size == len(payload)
        while len(body) < len(payload):
            channel, part = c.recv_method()  # type: ignore[misc]
            assert channel == 1
            assert len(part.value) <= 4096 - 8  # frame_max counts the 8 bytes of framing
            body += part.value
        assert body == payload
    finally:
        c.close()


@pytest.mark.parametrize(
    ("frame_max", "channel_max", "problem"),
    [
        (0, 2047, "frame_max = 0 is higher than the maximum allowed value (131072)"),
        (4095, 2047, "frame_max = 4095 is lower than the minimum allowed value (4096)"),
        (131073, 2047, "frame_max = 131073 is higher than the maximum allowed value (131072)"),
        (131072, 0, "channel_max = 0 (no limit) is higher than the maximum allowed value (2047)"),
        (131072, 2048, "channel_max = 2048 is higher than the maximum allowed value (2047)"),
    ],
)
def test_tune_ok_out_of_range_is_refused(broker, frame_max, channel_max, problem):
    """RabbitMQ refuses 0 ("no limit") and anything above its own proposal.

    RabbitMQ 3.10 drops the socket after a 3 s delay without a close method;
    newer releases (and Leveret) send connection.close 530 first.
    """
    c = RawClient(broker.host, broker.port)
    try:
        reply = c.handshake(frame_max=frame_max, channel_max=channel_max)
        assert_close(reply, 530, f"NOT_ALLOWED - negotiated {problem}", 10, 30)
    finally:
        c.close()


# --- authentication and vhosts ------------------------------------------------------


def test_wrong_password_pika(broker):
    params = pika.URLParameters(broker.url)
    params.credentials = pika.PlainCredentials("guest", "wrong")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert "403" in str(info.value) and "ACCESS_REFUSED" in str(info.value)


async def test_wrong_password_aiormq(broker):
    url = f"amqp://guest:wrong@{broker.host}:{broker.port}/"
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError) as info:
        await aiormq.connect(url)
    assert "ACCESS_REFUSED" in str(info.value)


def test_wrong_password_raw_close(broker):
    c = RawClient(broker.host, broker.port)
    try:
        reply = c.handshake(response=b"\0guest\0wrong")
        assert_close(reply, 403, AUTH_REFUSED_TEXT.format("PLAIN"))
    finally:
        c.close()


def test_unknown_user(broker):
    c = RawClient(broker.host, broker.port)
    try:
        reply = c.handshake(response=b"\0nobody\0guest")
        assert_close(reply, 403, AUTH_REFUSED_TEXT.format("PLAIN"))
    finally:
        c.close()


def test_amqplain_login(broker):
    c = RawClient(broker.host, broker.port)
    try:
        assert isinstance(c.handshake("AMQPLAIN", amqplain("guest", "guest")),
                          commands.Connection.OpenOk)
        c.send(1, commands.Channel.Open())
        assert isinstance(c.recv_method()[1], commands.Channel.OpenOk)  # type: ignore[index]
    finally:
        c.close()


def test_amqplain_wrong_password(broker):
    c = RawClient(broker.host, broker.port)
    try:
        reply = c.handshake("AMQPLAIN", amqplain("guest", "nope"))
        assert_close(reply, 403, AUTH_REFUSED_TEXT.format("AMQPLAIN"))
    finally:
        c.close()


def test_unknown_mechanism_refused(broker):
    c = RawClient(broker.host, broker.port)
    try:
        reply = c.handshake("SCRAM-SHA-1", b"whatever")
    except AssertionError as exc:  # RabbitMQ 3.10 drops the socket without a close
        assert "dropped" in str(exc)
    else:
        assert isinstance(reply, commands.Connection.Close)
        assert reply.reply_code in (403, 503)
    finally:
        c.close()


def test_unknown_vhost_pika(broker):
    params = pika.URLParameters(broker.url)
    params.virtual_host = "no-such-vhost"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(params)
    assert "530" in str(info.value)
    assert "NOT_ALLOWED - vhost no-such-vhost not found" in str(info.value)


def test_unknown_vhost_raw(broker):
    c = RawClient(broker.host, broker.port)
    try:
        reply = c.handshake(vhost="no-such-vhost")
        assert_close(reply, 530, "NOT_ALLOWED - vhost no-such-vhost not found")
    finally:
        c.close()


# --- heartbeats ----------------------------------------------------------------------


def test_silent_client_dropped_others_keep_working(broker, qname):
    """heartbeat=1 then silence: dropped after ~2 intervals. A heartbeat=0 client
    that is just as quiet stays, and a busy client is never disturbed."""
    silent = RawClient(broker.host, broker.port)
    quiet = RawClient(broker.host, broker.port)
    busy = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        assert isinstance(quiet.handshake(heartbeat=0), commands.Connection.OpenOk)
        opened = time.monotonic()  # before the broker last heard from it: a lower bound holds
        assert isinstance(silent.handshake(heartbeat=1), commands.Connection.OpenOk)
        result: dict[str, Any] = {}

        def wait_for_drop() -> None:
            heartbeats = 0
            try:
                while True:
                    got = silent.recv()
                    if got is None:
                        break
                    if isinstance(got[1], heartbeat.Heartbeat):
                        heartbeats += 1
                result["elapsed"] = time.monotonic() - opened
            except TimeoutError:
                result["elapsed"] = None
            result["heartbeats"] = heartbeats

        waiter = threading.Thread(target=wait_for_drop)
        waiter.start()
        ch = busy.channel()
        ch.queue_declare(qname, auto_delete=True)
        n = 0
        while waiter.is_alive():
            roundtrip(ch, qname, f"m{n}".encode())
            n += 1
            busy.sleep(0.05)
        waiter.join()
        assert result["elapsed"] is not None, "the silent client was never dropped"
        # Not before two missed intervals (RabbitMQ: two); how late is the machine's business.
        assert result["elapsed"] >= 1.5, result
        assert result["heartbeats"] >= 1  # the broker did its part
        assert n >= 1
        roundtrip(ch, qname, b"after")
        # The quiet (heartbeat=0) client was neither sent heartbeats nor dropped.
        quiet.send(1, commands.Channel.Open())
        channel, method = quiet.recv()  # type: ignore[misc]
        assert (channel, type(method)) == (1, commands.Channel.OpenOk)
    finally:
        busy.close()
        silent.close()
        quiet.close()


def test_broker_sends_heartbeats_to_idle_client(broker):
    c = RawClient(broker.host, broker.port)
    try:
        assert isinstance(c.handshake(heartbeat=1), commands.Connection.OpenOk)
        received = 0
        deadline = time.monotonic() + WAIT
        next_beat = time.monotonic()
        while received < 2:
            assert time.monotonic() < deadline, "the broker sent no heartbeats"
            if time.monotonic() >= next_beat:  # we keep our side alive
                c.sock.sendall(frame.marshal(heartbeat.Heartbeat(), 0))
                next_beat += 0.4
            try:
                got = c.recv(timeout=0.1)
            except TimeoutError:
                continue
            assert got is not None, "broker dropped a client that sends heartbeats"
            assert got[0] == 0 and isinstance(got[1], heartbeat.Heartbeat), got
            received += 1
        assert received >= 2
        c.send(1, commands.Channel.Open())
        assert isinstance(c.recv_method()[1], commands.Channel.OpenOk)  # type: ignore[index]
    finally:
        c.close()


# --- a misbehaving client ---------------------------------------------------------------


def test_garbage_on_one_connection_does_not_affect_another(broker, qname):
    good = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = good.channel()
        ch.queue_declare(qname, auto_delete=True)
        ch.basic_qos(prefetch_count=10)
        received: list[bytes] = []

        def on_message(channel: Any, method: Any, _props: Any, body: bytes) -> None:
            received.append(body)
            channel.basic_ack(method.delivery_tag)

        ch.basic_consume(qname, on_message)
        bad_clients = []
        for garbage in (b"\x09garbage-garbage\xce", b"GET / HTTP/1.1\r\n\r\n",
                        b"\x01\x00\x01\xff\xff\xff\xffxx", b"\x00" * 64):
            bad = RawClient(broker.host, broker.port)
            assert isinstance(bad.handshake(), commands.Connection.OpenOk)
            bad.sock.sendall(garbage)
            bad_clients.append(bad)
            for i in range(5):
                ch.basic_publish("", qname, f"{len(bad_clients)}-{i}".encode())
            good.process_data_events(time_limit=0.05)
        for bad in bad_clients:
            # The bad connection gets a close (frame error) or is dropped; never hangs.
            got = bad.recv_method()
            if got is not None:
                assert isinstance(got[1], commands.Connection.Close), got
                assert got[1].reply_code in (501, 502, 505), got[1].reply_text
            bad.close()
        deadline = time.monotonic() + WAIT
        while len(received) < 20 and time.monotonic() < deadline:
            good.process_data_events(time_limit=0.05)
        assert sorted(received) == sorted(f"{n}-{i}".encode() for n in range(1, 5)
                                          for i in range(5))
    finally:
        good.close()


@pytest.mark.parametrize("header", [b"AMQP\x00\x00\x08\x00", b"AMQP\x00\x00\x09\x02",
                                    b"GET / HT"])
def test_bad_protocol_header_gets_ours_back(broker, header):
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.sendall(header)
        data = b""
        while True:
            try:
                chunk = sock.recv(64)
            except ConnectionResetError:  # RabbitMQ closes with SO_LINGER 0
                break
            if not chunk:
                break
            data += chunk
    assert data == b"AMQP\x00\x00\x09\x01"


# --- shutdown -----------------------------------------------------------------------------


def test_sigterm_closes_clients_with_320_pika(make_broker):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("", exclusive=True)
    b.proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        while time.monotonic() - started < WAIT:
            conn.process_data_events(time_limit=0.1)
    assert (info.value.reply_code, info.value.reply_text) == (320, SHUTDOWN_TEXT)
    assert b.proc.wait(timeout=WAIT) == 0
    # The client answered the close: the broker did not wait out its grace to drop it.
    assert "did not answer connection.close" not in b.log_text()
    assert "Traceback" not in b.log_text()


async def test_sigterm_closes_clients_with_320_aiormq(make_broker):
    b = make_broker()
    conn = await aiormq.connect(b.url)
    channel = await conn.channel()
    await channel.queue_declare("", exclusive=True)
    b.proc.send_signal(signal.SIGTERM)
    with pytest.raises(aiormq.exceptions.ConnectionClosed) as info:
        await asyncio.wait_for(conn.closing, timeout=WAIT)
    assert info.value.args[:2] == (320, SHUTDOWN_TEXT)
    code = await asyncio.to_thread(b.proc.wait, WAIT)
    assert code == 0
    assert "did not answer connection.close" not in b.log_text()


def test_sigterm_drops_a_client_that_never_answers_after_the_grace(make_broker):
    """The other side of the two cases above: their "did not answer" line is not absent
    because it was never written."""
    b = make_broker()
    mute = RawClient(b.host, b.port)
    try:
        assert isinstance(mute.handshake(heartbeat=0), commands.Connection.OpenOk)
        b.proc.send_signal(signal.SIGTERM)
        assert b.proc.wait(timeout=WAIT) == 0
    finally:
        mute.close()
    assert "1 client(s) did not answer connection.close within 3 s; dropped" in b.log_text()


def test_sigint_without_clients_exits_0(make_broker):
    b = make_broker()
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(timeout=WAIT) == 0
    assert "Traceback" not in b.log_text()


# --- start-up failures -------------------------------------------------------------------


def run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")}
    return subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--host", "127.0.0.1",
         "--log-level", "warning", *args],
        env=env, capture_output=True, text=True, timeout=WAIT, check=False)


def test_port_taken_exits_1_with_one_line(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_serve("--port", str(port), "--data-dir", str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("leveret: error: ")
    assert str(port) in lines[0] and "already in use" in lines[0]


def test_port_taken_by_running_broker(broker, tmp_path: Path):
    result = run_serve("--port", str(broker.port), "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and str(broker.port) in result.stderr


@pytest.mark.parametrize("layout", ["file", "under-a-file"])
def test_unusable_data_dir_exits_1_with_one_line(tmp_path: Path, layout: str):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    data_dir = blocker if layout == "file" else blocker / "sub"
    result = run_serve("--port", "0", "--data-dir", str(data_dir))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("leveret: error: ") and str(data_dir) in lines[0]
