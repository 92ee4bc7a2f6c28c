"""Differential test of error replies: Leveret must answer like RabbitMQ 3.x.

Every case below provokes one error (or one interesting non-error) and returns
what the client observed.  The EXPECTED column holds literals recorded from a
real RabbitMQ (3.10.8, default config, guest/guest on 127.0.0.1:5672); the
same table is then run against Leveret.  A human-readable copy of what
RabbitMQ answered lives in /work/ext/rabbitmq-error-table.md.

Observations are plain tuples:

    ("channel",    reply_code, reply_text, class_id, method_id)   channel.close
    ("connection", reply_code, reply_text, class_id, method_id)   connection.close
    ("channel"|"connection", reply_code, reply_text)              (pika cases:
                                                                  pika hides ids)
    ("ok", value)            the case finished without the broker closing anything
    ("eof",)                 the broker dropped the TCP connection with no close
    ("timeout",)             the broker said nothing within TIMEOUT seconds
    ("bytes", b"...", tail)  raw bytes the broker sent (protocol-header cases)

In an expected tuple a ``re.Pattern`` matches (fullmatch) a variable string.

Most cases drive a small raw AMQP client built on pamqp, so that exactly the
same bytes reach both brokers and the close's class/method ids are visible; a
few use pika's BlockingConnection to show what a real client library sees.

Re-record against RabbitMQ (prints each observation, rewrites the summary):

    python tests/integration/test_differential_errors.py --host 127.0.0.1 \
        --port 5672 --markdown /work/ext/rabbitmq-error-table.md
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

pika = pytest.importorskip("pika")
pamqp_frame = pytest.importorskip("pamqp.frame")
from pamqp import body as pamqp_body
from pamqp import commands as spec
from pamqp import header as pamqp_header
from pamqp import heartbeat as pamqp_heartbeat

from leveret.model import field_table

field_table.install()  # send typed values as typed; see the declare-time type cases

TIMEOUT = 5.0
RABBITMQ = ("127.0.0.1", 5672)
FRAME_END = b"\xce"
METHOD, HEADER, BODY, HEARTBEAT = 1, 2, 3, 8


# ---------------------------------------------------------------------------
# Helpers: raw AMQP client, pika wrapper, target
# ---------------------------------------------------------------------------


class BrokerClosed(Exception):
    """Raised inside a case when the broker ends the channel/connection."""

    def __init__(self, observation: tuple):
        super().__init__(observation)
        self.observation = observation


def frame_bytes(ftype: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    """A hand-built frame, for cases that need bytes pamqp would never emit."""
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + end


def method_payload(method: Any) -> bytes:
    """The payload (class id, method id, arguments) of a pamqp method frame."""
    return pamqp_frame.marshal(method, 1)[7:-1]


class RawConnection:
    """A synchronous AMQP 0-9-1 client that sends exactly what it is told."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.sock.settimeout(TIMEOUT)
        self.buf = b""
        self.inbox: list[tuple[int, Any]] = []  # frames nobody waited for
        self.next_channel = 1
        self.frame_max = 131072
        self.channel_max = 0
        self.closed = False

    # -- bytes ------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        """Send; a dead socket is not an error here - reading will tell."""
        try:
            self.sock.sendall(data)
        except OSError:
            pass

    def send(self, channel: int, frame: Any) -> None:
        self.send_bytes(pamqp_frame.marshal(frame, channel))

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise BrokerClosed(("timeout",)) from None
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            return False
        self.buf += data
        return True

    def read_all(self) -> bytes:
        """Everything the broker sends until it closes the socket."""
        while self._fill():
            pass
        out, self.buf = self.buf, b""
        return out

    def recv_frame(self) -> tuple[int, Any]:
        while True:
            if len(self.buf) >= 7:
                size = struct.unpack(">I", self.buf[3:7])[0]
                if len(self.buf) >= size + 8:
                    raw, self.buf = self.buf[: size + 8], self.buf[size + 8 :]
                    _, channel, frame = pamqp_frame.unmarshal(raw)
                    return channel, frame
            if not self._fill():
                self.closed = True
                raise BrokerClosed(("eof",))

    # -- methods ----------------------------------------------------------
    def wait(self, channel: int, names: list[str]) -> Any:
        """Next frame on ``channel`` named in ``names``; raise on a close."""
        while True:
            ch, frame = self.recv_frame()
            name = getattr(frame, "name", "")
            if name == "Connection.Close":
                self._ack_close(0, spec.Connection.CloseOk())
                self.closed = True
                raise BrokerClosed(
                    ("connection", frame.reply_code, frame.reply_text,
                     frame.class_id, frame.method_id))
            if name == "Channel.Close" and ch == channel:
                self._ack_close(ch, spec.Channel.CloseOk())
                raise BrokerClosed(
                    ("channel", frame.reply_code, frame.reply_text,
                     frame.class_id, frame.method_id))
            if ch == channel and name in names:
                return frame
            self.inbox.append((ch, frame))

    def _ack_close(self, channel: int, ok: Any) -> None:
        try:
            self.send(channel, ok)
        except OSError:
            pass

    def call(self, channel: int, method: Any) -> Any:
        self.send(channel, method)
        return self.wait(channel, list(method.valid_responses))

    def sync(self, channel: int) -> None:
        """Round-trip a harmless method so asynchronous errors surface."""
        self.call(channel, spec.Exchange.Declare(exchange="amq.direct", passive=True))

    def settle(self, channel: int, grace: float = 0.5) -> None:
        """After a bad frame: give the broker ``grace`` seconds to close
        something; if it stays silent, probe with a round trip."""
        self.sock.settimeout(grace)
        try:
            self.wait(channel, [])
        except BrokerClosed as exc:
            if exc.observation != ("timeout",):
                raise
        finally:
            self.sock.settimeout(TIMEOUT)
        self.sync(channel)

    def channel(self) -> int:
        number = self.next_channel
        self.next_channel += 1
        self.call(number, spec.Channel.Open())
        return number

    def publish(self, channel: int, exchange: str, routing_key: str, body: bytes = b"x",
                mandatory: bool = False, immediate: bool = False) -> None:
        self.send(channel, spec.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                              mandatory=mandatory, immediate=immediate))
        self.send(channel, pamqp_header.ContentHeader(0, len(body), spec.Basic.Properties()))
        self.send(channel, pamqp_body.ContentBody(body))

    # -- connection lifecycle ---------------------------------------------
    def handshake(self, vhost: str = "/", user: str = "guest", password: str = "guest",
                  capabilities: bool = True, channel_max: int = 0,
                  frame_max: int = 131072) -> None:
        self.send(0, pamqp_header.ProtocolHeader())
        self.wait(0, ["Connection.Start"])
        props: dict[str, Any] = {"product": "leveret-differential-test"}
        if capabilities:
            props["capabilities"] = {
                "authentication_failure_close": True, "publisher_confirms": True,
                "consumer_cancel_notify": True, "basic.nack": True,
                "connection.blocked": True, "exchange_exchange_bindings": True,
            }
        self.send(0, spec.Connection.StartOk(client_properties=props, mechanism="PLAIN",
                                             response=f"\0{user}\0{password}"))
        tune = self.wait(0, ["Connection.Tune"])

        def negotiate(client: int, server: int) -> int:
            return min(v for v in (client, server) if v) if (client or server) else 0

        self.channel_max = negotiate(channel_max, tune.channel_max)
        self.frame_max = negotiate(frame_max, tune.frame_max)
        self.send(0, spec.Connection.TuneOk(channel_max=self.channel_max,
                                            frame_max=self.frame_max, heartbeat=0))
        self.call(0, spec.Connection.Open(virtual_host=vhost))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.settimeout(1.0)
                self.call(0, spec.Connection.Close(reply_code=200, reply_text="bye",
                                                          class_id=0, method_id=0))
            except (BrokerClosed, OSError):
                pass
        self.sock.close()


# -- RabbitMQ fidelity: declare-time types and limits -----------------------
# Each value is sent in the wire type it names (Leveret's typed table codec is
# installed in this process), so type names in the texts can be compared.

def exchange_declare_default(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Declare(exchange="", exchange_type="direct"))


def exchange_declare_default_passive(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Declare(exchange="", passive=True))


def exchange_declare_ae_signedint(t: Target):
    t.cleanup(exchanges=("diff.x.ae-int",))
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Declare(
        exchange="diff.x.ae-int", exchange_type="direct",
        arguments={"alternate-exchange": field_table.SignedInt(5)}))


def queue_declare_maxlen_longstr(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(queue="diff.q.maxlen-str",
                                           arguments={"x-max-length": "ten"}))


def queue_declare_ttl_bool(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(queue="diff.q.ttl-bool",
                                           arguments={"x-message-ttl": True}))


def queue_declare_dlx_long(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(
        queue="diff.q.dlx-long", arguments={"x-dead-letter-exchange": field_table.Long(1)}))


def queue_declare_dlrk_without_dlx(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(queue="diff.q.dlrk",
                                           arguments={"x-dead-letter-routing-key": "k"}))


def queue_declare_overflow_signedint(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(
        queue="diff.q.overflow-int", arguments={"x-overflow": field_table.SignedInt(1)}))


def consume_priority_longstr(t: Target):
    t.cleanup(queues=("diff.q.prio-str",))
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.prio-str", auto_delete=True))
    c.call(ch, spec.Basic.Consume(queue="diff.q.prio-str", arguments={"x-priority": "high"}))


def _publish_expiration(t: Target, expiration: str):
    t.cleanup(queues=("diff.q.exp",))
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.exp", auto_delete=True))
    c.send(ch, spec.Basic.Publish(exchange="", routing_key="diff.q.exp"))
    c.send(ch, pamqp_header.ContentHeader(0, 1, spec.Basic.Properties(expiration=expiration)))
    c.send(ch, pamqp_body.ContentBody(b"x"))
    c.sync(ch)


def publish_expiration_too_large(t: Target):
    _publish_expiration(t, "315360000001")


def publish_expiration_too_large_wrapped(t: Target):
    """Erlang's ~p wraps the term when it would reach column 79."""
    _publish_expiration(t, "18446744073709551616")


def publish_expiration_ten_years_ok(t: Target):
    _publish_expiration(t, "315360000000")


@dataclass
class Target:
    """Where a case runs; hands out connections and closes them afterwards."""

    name: str
    host: str
    port: int

    def __post_init__(self) -> None:
        self._conns: list[Any] = []

    def connect(self) -> RawConnection:
        """A raw TCP connection, no protocol header sent yet."""
        conn = RawConnection(self.host, self.port)
        self._conns.append(conn)
        return conn

    def raw(self, **handshake: Any) -> RawConnection:
        conn = self.connect()
        conn.handshake(**handshake)
        return conn

    def pika(self, vhost: str = "/", user: str = "guest", password: str = "guest"):
        params = pika.ConnectionParameters(
            host=self.host, port=self.port, virtual_host=vhost,
            credentials=pika.PlainCredentials(user, password),
            connection_attempts=1, socket_timeout=TIMEOUT, blocked_connection_timeout=TIMEOUT,
            stack_timeout=TIMEOUT * 2)
        conn = pika.BlockingConnection(params)
        self._conns.append(conn)
        return conn

    def cleanup(self, queues: tuple[str, ...] = (), exchanges: tuple[str, ...] = ()) -> None:
        """Delete leftovers of earlier runs (durable things survive restarts)."""
        conn = self.raw()
        for kind, names in (("q", queues), ("x", exchanges)):
            for name in names:
                try:
                    ch = conn.channel()
                    if kind == "q":
                        conn.call(ch, spec.Queue.Delete(queue=name))
                    else:
                        conn.call(ch, spec.Exchange.Delete(exchange=name))
                except BrokerClosed:
                    pass
        conn.close()
        self._conns.remove(conn)

    def close_all(self) -> None:
        for conn in reversed(self._conns):
            try:
                if isinstance(conn, RawConnection) or conn.is_open:
                    conn.close()
            except Exception:
                pass
        self._conns.clear()


def observe(case: Callable[[Target], Any], target: Target) -> tuple:
    """Run one case; translate how it ended into an observation tuple."""
    try:
        return ("ok", case(target))
    except BrokerClosed as exc:
        return exc.observation
    except pika.exceptions.ChannelClosedByBroker as exc:
        return ("channel", exc.reply_code, exc.reply_text)
    except pika.exceptions.ConnectionClosedByBroker as exc:
        return ("connection", exc.reply_code, exc.reply_text)
    finally:
        target.close_all()


def matches(expected: Any, observed: Any) -> bool:
    """Equality, except that a compiled regex fullmatches a string and
    tuples are compared element by element (so regexes may nest)."""
    if isinstance(expected, re.Pattern):
        return isinstance(observed, str) and expected.fullmatch(observed) is not None
    if isinstance(expected, tuple):
        return (isinstance(observed, tuple) and len(expected) == len(observed)
                and all(matches(w, g) for w, g in zip(expected, observed)))
    return expected == observed


def amqp_reachable(host: str, port: int) -> bool:
    """True if something at host:port completes an AMQP handshake as guest."""
    try:
        conn = RawConnection(host, port)
    except OSError:
        return False
    try:
        conn.handshake()
        return True
    except (BrokerClosed, OSError, Exception):
        return False
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# Cases.  Names: every case owns names under "diff.<topic>"; durable/shared
# things are cleaned up first so re-runs and both targets start from scratch.
# ---------------------------------------------------------------------------

MISSING_X = "diff.no-such-exchange"
MISSING_Q = "diff.no-such-queue"


# -- exchange.declare / exchange.delete -------------------------------------

def exchange_declare_passive_missing_pika(t: Target):
    ch = t.pika().channel()
    ch.exchange_declare(MISSING_X, passive=True)


def exchange_declare_passive_missing(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Declare(exchange=MISSING_X, passive=True))


def exchange_declare_amq_prefix(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Declare(exchange="amq.diff", exchange_type="direct"))


def exchange_declare_unknown_type(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Declare(exchange="diff.x.badtype",
                                              exchange_type="no-such-type"))


def _redeclare_exchange(t: Target, name: str, first: dict, second: dict):
    t.cleanup(exchanges=(name,))
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Exchange.Declare(exchange=name, **first))
    try:
        c.call(ch, spec.Exchange.Declare(exchange=name, **second))
    finally:
        t.cleanup(exchanges=(name,))


def exchange_redeclare_other_type(t: Target):
    _redeclare_exchange(t, "diff.x.type", {"exchange_type": "direct"},
                        {"exchange_type": "fanout"})


def exchange_redeclare_other_durable(t: Target):
    _redeclare_exchange(t, "diff.x.durable", {"exchange_type": "direct", "durable": False},
                        {"exchange_type": "direct", "durable": True})


def exchange_redeclare_other_auto_delete(t: Target):
    _redeclare_exchange(t, "diff.x.autodel", {"exchange_type": "direct"},
                        {"exchange_type": "direct", "auto_delete": True})


def exchange_redeclare_other_internal(t: Target):
    _redeclare_exchange(t, "diff.x.internal", {"exchange_type": "direct"},
                        {"exchange_type": "direct", "internal": True})


def exchange_declare_passive_other_type_ok(t: Target):
    """Passive declare ignores type/flags: succeeds on an existing exchange."""
    c = t.raw()
    ok = c.call(c.channel(), spec.Exchange.Declare(exchange="amq.direct",
                                                   exchange_type="fanout", passive=True))
    return ok.name


def exchange_delete_amq_direct(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Delete(exchange="amq.direct"))


def exchange_delete_default(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Delete(exchange=""))


def exchange_delete_missing_ok(t: Target):
    c = t.raw()
    return c.call(c.channel(), spec.Exchange.Delete(exchange=MISSING_X)).name


def exchange_delete_if_unused_bound(t: Target):
    name = "diff.x.inuse"
    t.cleanup(exchanges=(name,))
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Exchange.Declare(exchange=name, exchange_type="direct"))
    c.call(ch, spec.Queue.Declare(queue="diff.q.inuse-x", exclusive=True))
    c.call(ch, spec.Queue.Bind(queue="diff.q.inuse-x", exchange=name, routing_key="k"))
    try:
        c.call(ch, spec.Exchange.Delete(exchange=name, if_unused=True))
    finally:
        t.cleanup(exchanges=(name,))


# -- queue.declare ------------------------------------------------------------

def queue_declare_passive_missing_pika(t: Target):
    ch = t.pika().channel()
    ch.queue_declare(MISSING_Q, passive=True)


def queue_declare_passive_missing(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(queue=MISSING_Q, passive=True))


def queue_declare_amq_prefix(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(queue="amq.diff"))


def queue_declare_server_named_ok(t: Target):
    c = t.raw()
    ok = c.call(c.channel(), spec.Queue.Declare(queue="", exclusive=True))
    return (ok.queue, ok.message_count, ok.consumer_count)


def _redeclare_queue(t: Target, name: str, first: dict, second: dict):
    t.cleanup(queues=(name,))
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue=name, **first))
    try:
        c.call(ch, spec.Queue.Declare(queue=name, **second))
    finally:
        t.cleanup(queues=(name,))


def queue_redeclare_other_durable(t: Target):
    _redeclare_queue(t, "diff.q.durable", {"durable": False}, {"durable": True})


def queue_redeclare_other_durable_pika(t: Target):
    name = "diff.q.durable-pika"
    t.cleanup(queues=(name,))
    ch = t.pika().channel()
    ch.queue_declare(name, durable=True)
    try:
        ch.queue_declare(name, durable=False)
    finally:
        t.cleanup(queues=(name,))


def queue_redeclare_other_auto_delete(t: Target):
    _redeclare_queue(t, "diff.q.autodel", {"auto_delete": False}, {"auto_delete": True})


def queue_redeclare_exclusive_over_shared(t: Target):
    """Same connection: a shared queue redeclared with exclusive=True."""
    _redeclare_queue(t, "diff.q.excl-over", {"exclusive": False}, {"exclusive": True})


def queue_redeclare_shared_over_exclusive(t: Target):
    """Same connection: an exclusive queue redeclared with exclusive=False."""
    _redeclare_queue(t, "diff.q.shared-over", {"exclusive": True}, {"exclusive": False})


def queue_redeclare_other_ttl(t: Target):
    _redeclare_queue(t, "diff.q.ttl", {"arguments": {"x-message-ttl": 1000}},
                     {"arguments": {"x-message-ttl": 2000}})


def queue_redeclare_ttl_missing(t: Target):
    _redeclare_queue(t, "diff.q.ttl-missing", {"arguments": {"x-message-ttl": 1000}},
                     {"arguments": {}})


def queue_redeclare_ttl_added(t: Target):
    _redeclare_queue(t, "diff.q.ttl-added", {"arguments": {}},
                     {"arguments": {"x-message-ttl": 1000}})


def queue_redeclare_other_max_length(t: Target):
    _redeclare_queue(t, "diff.q.maxlen", {"arguments": {"x-max-length": 10}},
                     {"arguments": {"x-max-length": 20}})


def queue_redeclare_max_length_long(t: Target):
    """Values of different wire types (byte 10, signedint 100000): no types in text."""
    _redeclare_queue(t, "diff.q.maxlen-type", {"arguments": {"x-max-length": 10}},
                     {"arguments": {"x-max-length": 100000}})


def queue_declare_bad_ttl(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Declare(queue="diff.q.badttl", exclusive=True,
                                           arguments={"x-message-ttl": -1}))


def queue_redeclare_same_ok(t: Target):
    """Identical redeclare succeeds and reports counts."""
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.same", exclusive=True))
    ok = c.call(ch, spec.Queue.Declare(queue="diff.q.same", exclusive=True))
    return (ok.queue, ok.message_count, ok.consumer_count)


# -- exclusive queue used from another connection ----------------------------

EXCL_Q = "diff.q.exclusive-owned"


def _owned_exclusive(t: Target) -> tuple[RawConnection, int]:
    owner = t.raw()
    owner.call(owner.channel(), spec.Queue.Declare(queue=EXCL_Q, exclusive=True))
    other = t.raw()
    return other, other.channel()


def exclusive_other_conn_declare(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Queue.Declare(queue=EXCL_Q))


def exclusive_other_conn_declare_passive(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Queue.Declare(queue=EXCL_Q, passive=True))


def exclusive_other_conn_consume(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Basic.Consume(queue=EXCL_Q, consumer_tag="diff-tag"))


def exclusive_other_conn_get(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Basic.Get(queue=EXCL_Q))


def exclusive_other_conn_bind(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Queue.Bind(queue=EXCL_Q, exchange="amq.direct", routing_key="k"))


def exclusive_other_conn_purge(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Queue.Purge(queue=EXCL_Q))


def exclusive_other_conn_delete(t: Target):
    c, ch = _owned_exclusive(t)
    c.call(ch, spec.Queue.Delete(queue=EXCL_Q))


# -- queue.bind / queue.unbind -------------------------------------------------

def queue_bind_missing_exchange(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.bind1", exclusive=True))
    c.call(ch, spec.Queue.Bind(queue="diff.q.bind1", exchange=MISSING_X, routing_key="k"))


def queue_bind_missing_queue(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Bind(queue=MISSING_Q, exchange="amq.direct",
                                        routing_key="k"))


def queue_bind_default_exchange(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.bind2", exclusive=True))
    c.call(ch, spec.Queue.Bind(queue="diff.q.bind2", exchange="", routing_key="k"))


def queue_bind_empty_name_no_declared(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Bind(queue="", exchange="amq.direct", routing_key="k"))


def queue_bind_empty_name_after_declare_ok(t: Target):
    """An empty queue name means 'the last queue declared on this channel'."""
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.bind3", exclusive=True))
    return c.call(ch, spec.Queue.Bind(queue="", exchange="amq.direct", routing_key="k")).name


def queue_unbind_default_exchange(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.unbind", exclusive=True))
    c.call(ch, spec.Queue.Unbind(queue="diff.q.unbind", exchange="", routing_key="k"))


def queue_unbind_missing_binding_ok(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.unbind2", exclusive=True))
    return c.call(ch, spec.Queue.Unbind(queue="diff.q.unbind2", exchange="amq.direct",
                                        routing_key="nope")).name


def headers_bind_invalid_x_match(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.headers", exclusive=True))
    c.call(ch, spec.Queue.Bind(queue="diff.q.headers", exchange="amq.headers",
                               arguments={"x-match": "bogus", "a": "b"}))


# -- queue.delete / queue.purge ------------------------------------------------

def queue_delete_if_unused_with_consumer(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.del-unused", exclusive=True))
    c.call(ch, spec.Basic.Consume(queue="diff.q.del-unused", consumer_tag="c1"))
    c.call(ch, spec.Queue.Delete(queue="diff.q.del-unused", if_unused=True))


def queue_delete_if_empty_with_messages(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.del-empty", exclusive=True))
    c.publish(ch, "", "diff.q.del-empty")
    c.sync(ch)
    c.call(ch, spec.Queue.Delete(queue="diff.q.del-empty", if_empty=True))


def queue_delete_missing_ok(t: Target):
    c = t.raw()
    ok = c.call(c.channel(), spec.Queue.Delete(queue=MISSING_Q))
    return (ok.name, ok.message_count)


def queue_purge_missing(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Queue.Purge(queue=MISSING_Q))


# -- basic.publish -------------------------------------------------------------

def publish_missing_exchange(t: Target):
    c = t.raw()
    ch = c.channel()
    c.publish(ch, MISSING_X, "k")
    c.sync(ch)


def publish_missing_exchange_pika(t: Target):
    ch = t.pika().channel()
    ch.basic_publish(MISSING_X, "k", b"x")
    ch.queue_declare("", exclusive=True)  # any round trip surfaces the close


def publish_immediate(t: Target):
    c = t.raw()
    ch = c.channel()
    c.publish(ch, "amq.direct", "k", immediate=True)
    c.sync(ch)


def publish_internal_exchange(t: Target):
    name = "diff.x.internal-pub"
    t.cleanup(exchanges=(name,))
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Exchange.Declare(exchange=name, exchange_type="fanout", internal=True,
                                     auto_delete=False))
    try:
        c.publish(ch, name, "k")
        c.sync(ch)
    finally:
        t.cleanup(exchanges=(name,))


def publish_mandatory_unroutable_ok(t: Target):
    """Not an error: basic.return with NO_ROUTE."""
    c = t.raw()
    ch = c.channel()
    c.publish(ch, "amq.direct", "diff.nowhere", mandatory=True)
    ret = c.wait(ch, ["Basic.Return"])
    return ("Basic.Return", ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key)


# -- basic.consume -------------------------------------------------------------

def consume_missing_queue(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Basic.Consume(queue=MISSING_Q, consumer_tag="c1"))


def consume_duplicate_tag(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.duptag", exclusive=True))
    c.call(ch, spec.Basic.Consume(queue="diff.q.duptag", consumer_tag="dup"))
    c.call(ch, spec.Basic.Consume(queue="diff.q.duptag", consumer_tag="dup"))


def consume_exclusive_when_consumed(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.excl-cons1", exclusive=True))
    c.call(ch, spec.Basic.Consume(queue="diff.q.excl-cons1", consumer_tag="first"))
    ch2 = c.channel()
    c.call(ch2, spec.Basic.Consume(queue="diff.q.excl-cons1", consumer_tag="second",
                                   exclusive=True))


def consume_when_exclusive_consumer(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.excl-cons2", exclusive=True))
    c.call(ch, spec.Basic.Consume(queue="diff.q.excl-cons2", consumer_tag="first",
                                  exclusive=True))
    ch2 = c.channel()
    c.call(ch2, spec.Basic.Consume(queue="diff.q.excl-cons2", consumer_tag="second"))


def cancel_unknown_tag_ok(t: Target):
    c = t.raw()
    return c.call(c.channel(), spec.Basic.Cancel(consumer_tag="nope")).consumer_tag


# -- basic.ack / nack / reject -------------------------------------------------

def ack_unknown_tag(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, spec.Basic.Ack(delivery_tag=7))
    c.sync(ch)


def _one_delivery(t: Target, qname: str) -> tuple[RawConnection, int, int]:
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue=qname, exclusive=True))
    c.publish(ch, "", qname)
    c.sync(ch)
    ok = c.call(ch, spec.Basic.Get(queue=qname))
    assert ok.name == "Basic.GetOk", ok
    return c, ch, ok.delivery_tag


def ack_twice(t: Target):
    c, ch, tag = _one_delivery(t, "diff.q.ack2")
    c.send(ch, spec.Basic.Ack(delivery_tag=tag))
    c.send(ch, spec.Basic.Ack(delivery_tag=tag))
    c.sync(ch)


def nack_unknown_tag(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, spec.Basic.Nack(delivery_tag=3))
    c.sync(ch)


def reject_unknown_tag(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, spec.Basic.Reject(delivery_tag=5))
    c.sync(ch)


def ack_multiple_unknown_tag(t: Target):
    c, ch, tag = _one_delivery(t, "diff.q.ackmulti")
    c.send(ch, spec.Basic.Ack(delivery_tag=tag + 10, multiple=True))
    c.sync(ch)


def ack_on_no_ack_get(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Queue.Declare(queue="diff.q.noack", exclusive=True))
    c.publish(ch, "", "diff.q.noack")
    c.sync(ch)
    ok = c.call(ch, spec.Basic.Get(queue="diff.q.noack", no_ack=True))
    c.send(ch, spec.Basic.Ack(delivery_tag=ok.delivery_tag))
    c.sync(ch)


# -- basic.qos / basic.recover / tx / confirm / channel.flow ------------------

def qos_prefetch_size(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Basic.Qos(prefetch_size=1000, prefetch_count=1))


def recover_requeue_false(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Basic.Recover(requeue=False))


def recover_async(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, spec.Basic.RecoverAsync(requeue=True))
    c.sync(ch)


def tx_commit_without_select(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Tx.Commit())


def tx_rollback_without_select(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Tx.Rollback())


def confirm_then_tx(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Confirm.Select())
    c.call(ch, spec.Tx.Select())


def tx_then_confirm(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Tx.Select())
    c.call(ch, spec.Confirm.Select())


def channel_flow_inactive(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Channel.Flow(active=False))


def channel_flow_active_ok(t: Target):
    c = t.raw()
    return c.call(c.channel(), spec.Channel.Flow(active=True)).active


# -- exchange.bind -------------------------------------------------------------

def exchange_bind_missing_source(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Bind(destination="amq.fanout", source=MISSING_X,
                                           routing_key="k"))


def exchange_bind_missing_destination(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Bind(destination=MISSING_X, source="amq.fanout",
                                           routing_key="k"))


def exchange_bind_default_source(t: Target):
    c = t.raw()
    c.call(c.channel(), spec.Exchange.Bind(destination="amq.fanout", source="",
                                           routing_key="k"))


# -- connection opening: vhost / credentials -----------------------------------

def vhost_missing(t: Target):
    t.raw(vhost="diff-no-such-vhost")


def vhost_missing_pika(t: Target):
    try:
        t.pika(vhost="diff-no-such-vhost")
    except (pika.exceptions.ProbableAccessDeniedError,
            pika.exceptions.ProbableAuthenticationError) as exc:
        return _pika_connect_failure(exc)


def wrong_password(t: Target):
    """Client advertises authentication_failure_close: a connection.close."""
    t.raw(password="wrong-password")


def wrong_password_no_capability(t: Target):
    """Without authentication_failure_close RabbitMQ just drops the socket."""
    t.raw(password="wrong-password", capabilities=False)


def wrong_password_pika(t: Target):
    try:
        t.pika(password="wrong-password")
    except (pika.exceptions.ProbableAccessDeniedError,
            pika.exceptions.ProbableAuthenticationError) as exc:
        return _pika_connect_failure(exc)


def _pika_connect_failure(exc: Exception) -> tuple:
    """pika wraps handshake failures; report its class and message."""
    return (type(exc).__name__, str(exc.args[0]) if exc.args else "")


# -- raw frames ----------------------------------------------------------------

def _header_reply(t: Target, header: bytes):
    c = t.connect()
    c.send_bytes(header)
    data = c.read_all()
    c.closed = True
    raise BrokerClosed(("bytes", data, "eof"))


def header_amqp_0_10(t: Target):
    return _header_reply(t, b"AMQP\x01\x01\x00\x0a")


def header_amqp_1_0(t: Target):
    return _header_reply(t, b"AMQP\x00\x01\x00\x00")


def header_not_amqp(t: Target):
    return _header_reply(t, b"GET / HTTP/1.1\r\n\r\n")


def frame_bad_frame_end(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send_bytes(frame_bytes(METHOD, ch, method_payload(
        spec.Exchange.Declare(exchange="amq.direct", passive=True)), end=b"\x00"))
    c.settle(ch)


def frame_larger_than_frame_max(t: Target):
    c = t.raw(frame_max=4096)
    ch = c.channel()
    c.send(ch, spec.Basic.Publish(exchange="amq.direct", routing_key="k"))
    c.send(ch, pamqp_header.ContentHeader(0, 10000, spec.Basic.Properties()))
    c.send_bytes(frame_bytes(BODY, ch, b"y" * 10000))
    c.settle(ch)


def frame_method_on_unopened_channel(t: Target):
    c = t.raw()
    c.call(5, spec.Exchange.Declare(exchange="amq.direct", passive=True))


def frame_header_without_publish(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, pamqp_header.ContentHeader(0, 1, spec.Basic.Properties()))
    c.settle(ch)


def frame_body_without_publish(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, pamqp_body.ContentBody(b"z"))
    c.settle(ch)


def frame_method_instead_of_header(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, spec.Basic.Publish(exchange="amq.direct", routing_key="k"))
    c.settle(ch)


def frame_unknown_method_id(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send_bytes(frame_bytes(METHOD, ch, struct.pack(">HH", 60, 999)))
    c.settle(ch)


def frame_unknown_class_id(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send_bytes(frame_bytes(METHOD, ch, struct.pack(">HH", 99, 10)))
    c.settle(ch)


def frame_truncated_method(t: Target):
    """queue.declare whose argument bytes stop half-way through."""
    c = t.raw()
    ch = c.channel()
    payload = method_payload(spec.Queue.Declare(queue="diff.q.truncated"))
    c.send_bytes(frame_bytes(METHOD, ch, payload[:10]))
    c.settle(ch)


def frame_garbled_table(t: Target):
    """queue.declare whose arguments table has an unknown field type 'Z'."""
    c = t.raw()
    ch = c.channel()
    payload = method_payload(spec.Queue.Declare(queue="diff.q.garbled", exclusive=True))
    table = b"\x01aZ\x00"  # field name "a", type 'Z' (not a type), one byte
    payload = payload[:-4] + struct.pack(">I", len(table)) + table
    c.send_bytes(frame_bytes(METHOD, ch, payload))
    c.settle(ch)


def frame_longstr_past_table(t: Target):
    """queue.declare whose table holds a longstr claiming 1,000 bytes where 3 follow."""
    c = t.raw()
    ch = c.channel()
    payload = method_payload(spec.Queue.Declare(queue="diff.q.longstr", exclusive=True))
    table = b"\x05x-foo" + b"S" + struct.pack(">I", 1000) + b"abc"
    payload = payload[:-4] + struct.pack(">I", len(table)) + table
    c.send_bytes(frame_bytes(METHOD, ch, payload))
    c.settle(ch)


def frame_longstr_past_frame(t: Target):
    """connection.start-ok whose response longstr claims 100 bytes where 12 follow."""
    c = t.connect()
    c.send_bytes(RABBIT_HEADER)
    c.wait(0, ["Connection.Start"])
    start_ok = (struct.pack(">HH", 10, 11) + b"\x00\x00\x00\x00" + b"\x05PLAIN"
                + struct.pack(">I", 100) + b"\x00guest\x00guest")
    c.send_bytes(frame_bytes(METHOD, 0, start_ok))
    return c.wait(0, ["Connection.Tune"]).name


def frame_deeply_nested_table(t: Target):
    """queue.declare with arguments nested 1,000 tables deep (7 KB)."""
    c = t.raw()
    ch = c.channel()
    table = struct.pack(">I", 0)
    for _ in range(1000):
        entry = b"\x01a" + b"F" + table
        table = struct.pack(">I", len(entry)) + entry
    payload = method_payload(spec.Queue.Declare(queue="diff.q.nested", exclusive=True))
    c.send_bytes(frame_bytes(METHOD, ch, payload[:-4] + table))
    return c.wait(ch, ["Queue.DeclareOk"]).queue


def frame_unknown_frame_type(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send_bytes(frame_bytes(42, ch, b"hello"))
    c.settle(ch)


def channel_open_twice(t: Target):
    c = t.raw()
    ch = c.channel()
    c.call(ch, spec.Channel.Open())


def channel_above_channel_max(t: Target):
    c = t.raw(channel_max=10)
    c.call(11, spec.Channel.Open())


def channel_count_exceeds_channel_max(t: Target):
    """channel_max limits how many channels are open at once."""
    c = t.raw(channel_max=2)
    c.channel()
    c.channel()
    c.channel()


def channel_zero_open(t: Target):
    c = t.raw()
    c.call(0, spec.Channel.Open())


def heartbeat_on_nonzero_channel(t: Target):
    """A raw heartbeat frame on channel 1 (pamqp would put it on channel 0)."""
    c = t.raw()
    ch = c.channel()
    c.send_bytes(frame_bytes(HEARTBEAT, ch, b""))
    c.settle(ch)


def heartbeat_on_channel_zero(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, pamqp_heartbeat.Heartbeat())  # pamqp sends heartbeats on channel 0
    c.settle(ch)


def connection_method_on_nonzero_channel(t: Target):
    c = t.raw()
    ch = c.channel()
    c.send(ch, spec.Connection.Close(reply_code=200, reply_text="oops", class_id=0,
                                        method_id=0))
    c.settle(ch)


def connection_tune_ok_after_open(t: Target):
    """A connection-class method on channel 0 at the wrong time."""
    c = t.raw()
    c.send(0, spec.Connection.TuneOk(channel_max=0, frame_max=131072, heartbeat=0))
    c.settle(c.channel())


# ---------------------------------------------------------------------------
# The table: (id, case, expected) - expected recorded from RabbitMQ 3.10.8.
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    run: Callable[[Target], Any]
    expected: tuple
    # Where RabbitMQ 3.10 misbehaves (its connection process crashes and the socket just
    # closes), Leveret deliberately answers with a proper connection.close instead.
    leveret: tuple | None = None


# Texts that recur.  All literals, copied from RabbitMQ 3.10.8's replies.
LOCKED = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'. "
          "It could be originally declared on another connection or the exclusive property "
          "value does not match that of the original declaration.")
NO_X = "NOT_FOUND - no exchange 'diff.no-such-exchange' in vhost '/'"
NO_Q = "NOT_FOUND - no queue 'diff.no-such-queue' in vhost '/'"
DEFAULT_X = "ACCESS_REFUSED - operation not permitted on the default exchange"
IN_STATE_RUNNING = "CHANNEL_ERROR - unexpected method in connection state running"
NON_METHOD = "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
LOGIN_REFUSED = ("ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
                 "For details see the broker logfile.")
NO_VHOST = "NOT_ALLOWED - vhost diff-no-such-vhost not found"
RABBIT_HEADER = b"AMQP\x00\x00\x09\x01"


def inequivalent(kind: str, name: str, arg: str, received: str, current: str) -> str:
    return (f"PRECONDITION_FAILED - inequivalent arg '{arg}' for {kind} '{name}' in vhost '/': "
            f"received {received} but current is {current}")


CASES: list[Case] = [
    # exchange.declare / exchange.delete
    Case("exchange_declare_passive_missing_pika", exchange_declare_passive_missing_pika,
         ("channel", 404, NO_X)),
    Case("exchange_declare_passive_missing", exchange_declare_passive_missing,
         ("channel", 404, NO_X, 40, 10)),
    Case("exchange_declare_amq_prefix", exchange_declare_amq_prefix,
         ("channel", 403,
          "ACCESS_REFUSED - exchange name 'amq.diff' contains reserved prefix 'amq.*'", 40, 10)),
    Case("exchange_declare_unknown_type", exchange_declare_unknown_type,
         ("connection", 503, "COMMAND_INVALID - unknown exchange type 'no-such-type'", 40, 10)),
    Case("exchange_redeclare_other_type", exchange_redeclare_other_type,
         ("channel", 406,
          inequivalent("exchange", "diff.x.type", "type", "'fanout'", "'direct'"), 40, 10)),
    Case("exchange_redeclare_other_durable", exchange_redeclare_other_durable,
         ("channel", 406,
          inequivalent("exchange", "diff.x.durable", "durable", "'true'", "'false'"), 40, 10)),
    Case("exchange_redeclare_other_auto_delete", exchange_redeclare_other_auto_delete,
         ("channel", 406,
          inequivalent("exchange", "diff.x.autodel", "auto_delete", "'true'", "'false'"), 40, 10)),
    Case("exchange_redeclare_other_internal", exchange_redeclare_other_internal,
         ("channel", 406,
          inequivalent("exchange", "diff.x.internal", "internal", "'true'", "'false'"), 40, 10)),
    Case("exchange_declare_passive_other_type_ok", exchange_declare_passive_other_type_ok,
         ("ok", "Exchange.DeclareOk")),
    Case("exchange_delete_amq_direct", exchange_delete_amq_direct,
         ("channel", 403,
          "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
          40, 20)),
    Case("exchange_delete_default", exchange_delete_default, ("channel", 403, DEFAULT_X, 40, 20)),
    Case("exchange_delete_missing_ok", exchange_delete_missing_ok, ("ok", "Exchange.DeleteOk")),
    Case("exchange_delete_if_unused_bound", exchange_delete_if_unused_bound,
         ("channel", 406, "PRECONDITION_FAILED - exchange 'diff.x.inuse' in vhost '/' in use",
          40, 20)),
    # queue.declare
    Case("queue_declare_passive_missing_pika", queue_declare_passive_missing_pika,
         ("channel", 404, NO_Q)),
    Case("queue_declare_passive_missing", queue_declare_passive_missing,
         ("channel", 404, NO_Q, 50, 10)),
    Case("queue_declare_amq_prefix", queue_declare_amq_prefix,
         ("channel", 403,
          "ACCESS_REFUSED - queue name 'amq.diff' contains reserved prefix 'amq.*'", 50, 10)),
    Case("queue_declare_server_named_ok", queue_declare_server_named_ok,
         ("ok", (re.compile(r"amq\.gen-[A-Za-z0-9_-]{22}"), 0, 0))),
    Case("queue_redeclare_other_durable", queue_redeclare_other_durable,
         ("channel", 406,
          inequivalent("queue", "diff.q.durable", "durable", "'true'", "'false'"), 50, 10)),
    Case("queue_redeclare_other_durable_pika", queue_redeclare_other_durable_pika,
         ("channel", 406,
          inequivalent("queue", "diff.q.durable-pika", "durable", "'false'", "'true'"))),
    Case("queue_redeclare_other_auto_delete", queue_redeclare_other_auto_delete,
         ("channel", 406,
          inequivalent("queue", "diff.q.autodel", "auto_delete", "'true'", "'false'"), 50, 10)),
    Case("queue_redeclare_exclusive_over_shared", queue_redeclare_exclusive_over_shared,
         ("channel", 405, LOCKED.format("diff.q.excl-over"), 50, 10)),
    Case("queue_redeclare_shared_over_exclusive", queue_redeclare_shared_over_exclusive,
         ("channel", 405, LOCKED.format("diff.q.shared-over"), 50, 10)),
    Case("queue_redeclare_other_ttl", queue_redeclare_other_ttl,
         ("channel", 406,
          inequivalent("queue", "diff.q.ttl", "x-message-ttl", "'2000'", "'1000'"), 50, 10)),
    Case("queue_redeclare_ttl_missing", queue_redeclare_ttl_missing,
         ("channel", 406,
          inequivalent("queue", "diff.q.ttl-missing", "x-message-ttl", "none",
                       "the value '1000' of type 'short'"), 50, 10)),
    Case("queue_redeclare_ttl_added", queue_redeclare_ttl_added,
         ("channel", 406,
          inequivalent("queue", "diff.q.ttl-added", "x-message-ttl",
                       "the value '1000' of type 'short'", "none"), 50, 10)),
    Case("queue_redeclare_other_max_length", queue_redeclare_other_max_length,
         ("channel", 406,
          inequivalent("queue", "diff.q.maxlen", "x-max-length", "'20'", "'10'"), 50, 10)),
    Case("queue_redeclare_max_length_long", queue_redeclare_max_length_long,
         ("channel", 406,
          inequivalent("queue", "diff.q.maxlen-type", "x-max-length", "'100000'", "'10'"),
          50, 10)),
    Case("queue_declare_bad_ttl", queue_declare_bad_ttl,
         ("channel", 406, ("PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue "
                          "'diff.q.badttl' in vhost '/': {value_negative,-1}"), 50, 10)),
    Case("queue_redeclare_same_ok", queue_redeclare_same_ok, ("ok", ("diff.q.same", 0, 0))),
    # exclusive queue used from another connection
    Case("exclusive_other_conn_declare", exclusive_other_conn_declare,
         ("channel", 405, LOCKED.format(EXCL_Q), 50, 10)),
    Case("exclusive_other_conn_declare_passive", exclusive_other_conn_declare_passive,
         ("channel", 405, LOCKED.format(EXCL_Q), 50, 10)),
    Case("exclusive_other_conn_consume", exclusive_other_conn_consume,
         ("channel", 405, LOCKED.format(EXCL_Q), 60, 20)),
    Case("exclusive_other_conn_get", exclusive_other_conn_get,
         ("channel", 405, LOCKED.format(EXCL_Q), 60, 70)),
    Case("exclusive_other_conn_bind", exclusive_other_conn_bind,
         ("channel", 405, LOCKED.format(EXCL_Q), 50, 20)),
    Case("exclusive_other_conn_purge", exclusive_other_conn_purge,
         ("channel", 405, LOCKED.format(EXCL_Q), 50, 30)),
    Case("exclusive_other_conn_delete", exclusive_other_conn_delete,
         ("channel", 405, LOCKED.format(EXCL_Q), 50, 40)),
    # queue.bind / queue.unbind
    Case("queue_bind_missing_exchange", queue_bind_missing_exchange,
         ("channel", 404, NO_X, 50, 20)),
    Case("queue_bind_missing_queue", queue_bind_missing_queue, ("channel", 404, NO_Q, 50, 20)),
    Case("queue_bind_default_exchange", queue_bind_default_exchange,
         ("channel", 403, DEFAULT_X, 50, 20)),
    Case("queue_bind_empty_name_no_declared", queue_bind_empty_name_no_declared,
         ("channel", 404, "NOT_FOUND - no previously declared queue", 50, 20)),
    Case("queue_bind_empty_name_after_declare_ok", queue_bind_empty_name_after_declare_ok,
         ("ok", "Queue.BindOk")),
    Case("queue_unbind_default_exchange", queue_unbind_default_exchange,
         ("channel", 403, DEFAULT_X, 50, 50)),
    Case("queue_unbind_missing_binding_ok", queue_unbind_missing_binding_ok,
         ("ok", "Queue.UnbindOk")),
    Case("headers_bind_invalid_x_match", headers_bind_invalid_x_match,
         ("channel", 406, ('PRECONDITION_FAILED - Invalid x-match field value <<"bogus">>; '
                          "expected all, any, all-with-x, or any-with-x"), 50, 20)),
    # queue.delete / queue.purge
    Case("queue_delete_if_unused_with_consumer", queue_delete_if_unused_with_consumer,
         ("channel", 406, "PRECONDITION_FAILED - queue 'diff.q.del-unused' in vhost '/' in use",
          50, 40)),
    Case("queue_delete_if_empty_with_messages", queue_delete_if_empty_with_messages,
         ("channel", 406,
          "PRECONDITION_FAILED - queue 'diff.q.del-empty' in vhost '/' not empty", 50, 40)),
    Case("queue_delete_missing_ok", queue_delete_missing_ok, ("ok", ("Queue.DeleteOk", 0))),
    Case("queue_purge_missing", queue_purge_missing, ("channel", 404, NO_Q, 50, 30)),
    # basic.publish
    Case("publish_missing_exchange", publish_missing_exchange, ("channel", 404, NO_X, 60, 40)),
    Case("publish_missing_exchange_pika", publish_missing_exchange_pika, ("channel", 404, NO_X)),
    Case("publish_immediate", publish_immediate,
         ("connection", 540, "NOT_IMPLEMENTED - immediate=true", 60, 40)),
    Case("publish_internal_exchange", publish_internal_exchange,
         ("channel", 403, ("ACCESS_REFUSED - cannot publish to internal exchange "
                          "'diff.x.internal-pub' in vhost '/'"), 60, 40)),
    Case("publish_mandatory_unroutable_ok", publish_mandatory_unroutable_ok,
         ("ok", ("Basic.Return", 312, "NO_ROUTE", "amq.direct", "diff.nowhere"))),
    # basic.consume / basic.cancel
    Case("consume_missing_queue", consume_missing_queue, ("channel", 404, NO_Q, 60, 20)),
    Case("consume_duplicate_tag", consume_duplicate_tag,
         ("connection", 530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'", 60, 20)),
    Case("consume_exclusive_when_consumed", consume_exclusive_when_consumed,
         ("channel", 403,
          "ACCESS_REFUSED - queue 'diff.q.excl-cons1' in vhost '/' in exclusive use", 60, 20)),
    Case("consume_when_exclusive_consumer", consume_when_exclusive_consumer,
         ("channel", 403,
          "ACCESS_REFUSED - queue 'diff.q.excl-cons2' in vhost '/' in exclusive use", 60, 20)),
    Case("cancel_unknown_tag_ok", cancel_unknown_tag_ok, ("ok", "nope")),
    # basic.ack / nack / reject
    Case("ack_unknown_tag", ack_unknown_tag,
         ("channel", 406, "PRECONDITION_FAILED - unknown delivery tag 7", 60, 80)),
    Case("ack_twice", ack_twice,
         ("channel", 406, "PRECONDITION_FAILED - unknown delivery tag 1", 60, 80)),
    Case("nack_unknown_tag", nack_unknown_tag,
         ("channel", 406, "PRECONDITION_FAILED - unknown delivery tag 3", 60, 120)),
    Case("reject_unknown_tag", reject_unknown_tag,
         ("channel", 406, "PRECONDITION_FAILED - unknown delivery tag 5", 60, 90)),
    Case("ack_multiple_unknown_tag", ack_multiple_unknown_tag,
         ("channel", 406, "PRECONDITION_FAILED - unknown delivery tag 11", 60, 80)),
    Case("ack_on_no_ack_get", ack_on_no_ack_get,
         ("channel", 406, "PRECONDITION_FAILED - unknown delivery tag 1", 60, 80)),
    # basic.qos / basic.recover / tx / confirm / channel.flow
    Case("qos_prefetch_size", qos_prefetch_size,
         ("connection", 540, "NOT_IMPLEMENTED - prefetch_size!=0 (1000)", 60, 10)),
    Case("recover_requeue_false", recover_requeue_false,
         ("connection", 540, "NOT_IMPLEMENTED - requeue=false", 60, 110)),
    Case("recover_async", recover_async, ("ok", None)),
    Case("tx_commit_without_select", tx_commit_without_select,
         ("channel", 406, "PRECONDITION_FAILED - channel is not transactional", 90, 20)),
    Case("tx_rollback_without_select", tx_rollback_without_select,
         ("channel", 406, "PRECONDITION_FAILED - channel is not transactional", 90, 30)),
    Case("confirm_then_tx", confirm_then_tx,
         ("channel", 406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode", 90, 10)),
    Case("tx_then_confirm", tx_then_confirm,
         ("channel", 406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode", 85, 10)),
    Case("channel_flow_inactive", channel_flow_inactive,
         ("connection", 540, "NOT_IMPLEMENTED - active=false", 20, 20)),
    Case("channel_flow_active_ok", channel_flow_active_ok, ("ok", True)),
    # exchange.bind
    Case("exchange_bind_missing_source", exchange_bind_missing_source,
         ("channel", 404, NO_X, 40, 30)),
    Case("exchange_bind_missing_destination", exchange_bind_missing_destination,
         ("channel", 404, NO_X, 40, 30)),
    Case("exchange_bind_default_source", exchange_bind_default_source,
         ("channel", 403, DEFAULT_X, 40, 30)),
    # connection opening: vhost / credentials
    Case("vhost_missing", vhost_missing,
         ("connection", 530, NO_VHOST, 10, 40)),
    Case("vhost_missing_pika", vhost_missing_pika,
         ("ok", ("ProbableAccessDeniedError",
                 f"ConnectionClosedByBroker: (530) '{NO_VHOST}'"))),
    Case("wrong_password", wrong_password, ("connection", 403, LOGIN_REFUSED, 0, 0)),
    Case("wrong_password_no_capability", wrong_password_no_capability, ("eof",)),
    Case("wrong_password_pika", wrong_password_pika,
         ("ok", ("ProbableAuthenticationError",
                 f"ConnectionClosedByBroker: (403) '{LOGIN_REFUSED}'"))),
    # raw frames
    Case("header_amqp_0_10", header_amqp_0_10, ("bytes", RABBIT_HEADER, "eof")),
    Case("header_amqp_1_0", header_amqp_1_0, ("bytes", RABBIT_HEADER, "eof")),
    Case("header_not_amqp", header_not_amqp, ("bytes", RABBIT_HEADER, "eof")),
    Case("frame_bad_frame_end", frame_bad_frame_end,
         ("connection", 501, re.compile(
             r"FRAME_ERROR - type 1, first 16 octets = "
             r"<<0,40,0,10,0,0,10,97,109,113,46,100,105,114,101,99>>: "
             r"\{invalid_frame_end_marker,\s*0\}"), 0, 0)),
    Case("frame_larger_than_frame_max", frame_larger_than_frame_max,
         ("connection", 501,
          "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,10000,4088}", 0, 0)),
    Case("frame_method_on_unopened_channel", frame_method_on_unopened_channel,
         ("connection", 504, "CHANNEL_ERROR - expected 'channel.open'", 40, 10)),
    Case("frame_header_without_publish", frame_header_without_publish,
         ("connection", 505, NON_METHOD, 0, 0)),
    Case("frame_body_without_publish", frame_body_without_publish,
         ("connection", 505, NON_METHOD, 0, 0)),
    Case("frame_method_instead_of_header", frame_method_instead_of_header,
         ("connection", 505, ("UNEXPECTED_FRAME - expected content header for class 60, "
                             "got non content header frame instead"), 60, 40)),
    # RabbitMQ's reader process crashes on these and drops the socket, no close.
    Case("frame_unknown_method_id", frame_unknown_method_id, ("eof",),
         leveret=("connection", 540, "NOT_IMPLEMENTED - unknown method 60.999", 60, 999)),
    Case("frame_unknown_class_id", frame_unknown_class_id, ("eof",),
         leveret=("connection", 540, "NOT_IMPLEMENTED - unknown method 99.10", 99, 10)),
    Case("frame_truncated_method", frame_truncated_method,
         ("connection", 501, "FRAME_ERROR - cannot decode <<0,0,16,100,105,102>>", 50, 10)),
    Case("frame_garbled_table", frame_garbled_table, ("eof",),
         leveret=("connection", 501, re.compile(r"FRAME_ERROR - cannot decode <<.*>>"), 50, 10)),
    # A longstr running past its table: RabbitMQ's reader crashes (socket closed, no close);
    # past the frame, in start-ok: same. Leveret answers 501 "cannot decode".
    Case("frame_longstr_past_table", frame_longstr_past_table, ("eof",),
         leveret=("connection", 501, re.compile(r"FRAME_ERROR - cannot decode <<.*>>"), 50, 10)),
    Case("frame_longstr_past_frame", frame_longstr_past_frame, ("eof",),
         leveret=("connection", 501, re.compile(r"FRAME_ERROR - cannot decode <<.*>>"), 10, 11)),
    # RabbitMQ accepts any nesting a frame holds; Leveret stops at amqp/field_table.MAX_DEPTH.
    Case("frame_deeply_nested_table", frame_deeply_nested_table, ("ok", "diff.q.nested"),
         leveret=("connection", 501, re.compile(r"FRAME_ERROR - cannot decode <<[0-9,]*\.\.\."), 50, 10)),
    Case("frame_unknown_frame_type", frame_unknown_frame_type,
         ("connection", 501,
          'FRAME_ERROR - type 42, all octets = <<"hello">>: unknown_frame', 0, 0)),
    Case("channel_open_twice", channel_open_twice,
         ("connection", 504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)),
    # channel_max caps how many channels are open, not the channel number.
    Case("channel_above_channel_max", channel_above_channel_max, ("ok", None)),
    Case("channel_count_exceeds_channel_max", channel_count_exceeds_channel_max,
         ("connection", 530, ("NOT_ALLOWED - number of channels opened (2) has reached "
                             "the negotiated channel_max (2)"), 0, 0)),
    Case("channel_zero_open", channel_zero_open, ("connection", 504, IN_STATE_RUNNING, 20, 10)),
    # A heartbeat on a non-zero channel is a connection error; on channel 0 it is fine.
    Case("heartbeat_on_nonzero_channel", heartbeat_on_nonzero_channel,
         ("connection", 505, "UNEXPECTED_FRAME - type 8, all octets = <<>>", 0, 0)),
    Case("heartbeat_on_channel_zero", heartbeat_on_channel_zero, ("ok", None)),
    Case("connection_method_on_nonzero_channel", connection_method_on_nonzero_channel,
         ("connection", 503, "COMMAND_INVALID - unimplemented method", 10, 50)),
    Case("connection_tune_ok_after_open", connection_tune_ok_after_open,
         ("connection", 504, IN_STATE_RUNNING, 10, 31)),
    # declare-time types and limits
    Case("exchange_declare_default", exchange_declare_default,
         ("channel", 403, "ACCESS_REFUSED - operation not permitted on the default exchange",
          40, 10)),
    Case("exchange_declare_default_passive", exchange_declare_default_passive,
         ("channel", 403, "ACCESS_REFUSED - operation not permitted on the default exchange",
          40, 10)),
    Case("exchange_declare_ae_signedint", exchange_declare_ae_signedint,
         ("channel", 406, "PRECONDITION_FAILED - invalid type 'signedint' for arg "
          "'alternate-exchange' in exchange 'diff.x.ae-int' in vhost '/'", 40, 10)),
    Case("queue_declare_maxlen_longstr", queue_declare_maxlen_longstr,
         ("channel", 406, "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue "
          "'diff.q.maxlen-str' in vhost '/': \"expected integer, got longstr\"", 50, 10)),
    Case("queue_declare_ttl_bool", queue_declare_ttl_bool,
         ("channel", 406, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue "
          "'diff.q.ttl-bool' in vhost '/': \"expected integer, got bool\"", 50, 10)),
    Case("queue_declare_dlx_long", queue_declare_dlx_long,
         ("channel", 406, "PRECONDITION_FAILED - invalid type 'long' for arg "
          "'x-dead-letter-exchange' in queue 'diff.q.dlx-long' in vhost '/'", 50, 10)),
    Case("queue_declare_dlrk_without_dlx", queue_declare_dlrk_without_dlx,
         ("channel", 406, "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for "
          "queue 'diff.q.dlrk' in vhost '/': routing_key_but_no_dlx_defined", 50, 10)),
    Case("queue_declare_overflow_signedint", queue_declare_overflow_signedint,
         ("channel", 406, "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue "
          "'diff.q.overflow-int' in vhost '/': {unacceptable_type,signedint}", 50, 10)),
    Case("consume_priority_longstr", consume_priority_longstr,
         ("channel", 406, "PRECONDITION_FAILED - invalid arg 'x-priority' for queue "
          "'diff.q.prio-str' in vhost '/': \"expected integer, got longstr\"", 60, 20)),
    Case("publish_expiration_too_large", publish_expiration_too_large,
         ("channel", 406, "PRECONDITION_FAILED - invalid expiration '315360000001': "
          "{value_too_large,315360000001}", 60, 40)),
    Case("publish_expiration_too_large_wrapped", publish_expiration_too_large_wrapped,
         ("channel", 406, "PRECONDITION_FAILED - invalid expiration '18446744073709551616': "
          "{value_too_large,\n" + " " * 44 + "18446744073709551616}", 60, 40)),
    Case("publish_expiration_ten_years_ok", publish_expiration_ten_years_ok, ("ok", None)),
]


# ---------------------------------------------------------------------------
# The test.
# ---------------------------------------------------------------------------

_reachable: dict[tuple[str, int], bool] = {}


@pytest.fixture(params=["leveret", "rabbitmq"])
def target(request) -> Target:
    if request.param == "rabbitmq":
        if RABBITMQ not in _reachable:
            _reachable[RABBITMQ] = amqp_reachable(*RABBITMQ)
        if not _reachable[RABBITMQ]:
            pytest.skip(f"no AMQP broker at {RABBITMQ[0]}:{RABBITMQ[1]}")
        return Target("rabbitmq", *RABBITMQ)
    for fixture in ("leveret_broker", "broker"):
        try:
            broker = request.getfixturevalue(fixture)
        except pytest.FixtureLookupError:
            continue
        except Exception as exc:
            pytest.skip(f"fixture {fixture!r} failed: {exc!r}")
        return Target("leveret", broker.host, broker.port)
    pytest.skip("no leveret_broker/broker fixture in conftest")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_error_reply_matches_rabbitmq(target: Target, case: Case) -> None:
    observed = observe(case.run, target)
    expected = case.leveret if target.name == "leveret" and case.leveret else case.expected
    assert matches(expected, observed), (
        f"{case.id} on {target.name}:\n  expected {expected!r}\n  observed {observed!r}")


# ---------------------------------------------------------------------------
# Recording mode: run every case against one broker and print/save results.
# ---------------------------------------------------------------------------

def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default=RABBITMQ[0])
    parser.add_argument("--port", type=int, default=RABBITMQ[1])
    parser.add_argument("--markdown", help="write a summary table here")
    args = parser.parse_args()
    t = Target("record", args.host, args.port)
    rows = []
    for case in CASES:
        try:
            obs = observe(case.run, t)
        except Exception as exc:
            obs = ("exception", repr(exc))
        ok = matches(case.expected, obs)
        rows.append((case, obs, ok))
        print(f"{'  ' if ok else '!!'} {case.id}: {obs!r}")
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(_markdown(rows))


def _method_name(class_id: int, method_id: int) -> str:
    cls = spec.INDEX_MAPPING.get((class_id << 16) | method_id)
    name = cls.name.lower() if cls else "none"
    return f"{name} ({class_id},{method_id})"


def _section_of(func: Callable) -> str:
    """The ``# -- section`` comment that precedes a case function."""
    with open(__file__) as source:
        lines = source.read().splitlines()[: func.__code__.co_firstlineno]
    heads = [line[5:].strip(" -") for line in lines if line.startswith("# -- ")]
    return heads[-1] if heads else ""


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return "`" + text.replace("\n", "\\n").replace("|", "\\|") + "`"


def _markdown(rows) -> str:
    out = [
        "# RabbitMQ error replies, as observed",
        "",
        "Recorded by `tests/integration/test_differential_errors.py` (recording mode) against",
        "RabbitMQ 3.10.8 (Erlang 25, default config, guest/guest, vhost `/`).  Each row is one",
        "case of that file; the test asserts Leveret answers the same.  *scope* `channel` means",
        "the broker sent `channel.close` (soft error), `connection` means `connection.close`",
        "(hard error); *failing method* is the close's class-id/method-id (`0.0` = none).",
        "`eof` = the broker closed the TCP socket without any close method; `ok` = no error",
        "(the value is what the case returned).  Texts are exact; `\\n` marks a newline.",
        "",
    ]
    section = None
    for case, obs, ok in rows:
        sec = _section_of(case.run)
        if sec != section:
            section = sec
            out += ["", f"## {sec}", "",
                    "| case | scope | code | reply text | failing method |",
                    "|---|---|---|---|---|"]
        doc = (case.run.__doc__ or "").strip().splitlines()
        name = f"`{case.id}`" + (f" - {doc[0]}" if doc else "")
        if not ok:
            name += " **(differs from table!)**"
        if obs[0] in ("channel", "connection"):
            method = _method_name(*obs[3:5]) if len(obs) == 5 else "(pika: not shown)"
            out.append(f"| {name} | {obs[0]} | {obs[1]} | {_cell(obs[2])} | {method} |")
        elif obs[0] == "bytes":
            out.append(f"| {name} | bytes | - | {_cell(obs[1])} then {obs[2]} | - |")
        elif obs[0] == "ok":
            out.append(f"| {name} | ok | - | {_cell(obs[1])} | - |")
        else:
            out.append(f"| {name} | {obs[0]} | - | - | - |")
    out += ["", NOTES]
    return "\n".join(out)


NOTES = """## Rules that fall out of the table

* Text format is `<REPLY_NAME> - <detail>`; names (queues, exchanges, the vhost) are in single
  quotes, `in vhost '/'`.  Exception: `NOT_ALLOWED - vhost <name> not found` (no quotes).
* Soft errors (channel.close): 403, 404, 405, 406.  Hard errors (connection.close): 501, 503,
  504, 505, 530, 540; note 503 for an unknown exchange type and 530 for a reused consumer tag.
* class-id/method-id name the method that failed.  They are 0,0 for frame-level errors (bad
  frame end, oversize frame, unknown frame type, header/body frame when a method is expected),
  for the channel_max count error and for a refused login; connection.open (10,40) for an
  unknown vhost.
* Inequivalent flags: `received 'true' but current is 'false'`.  Inequivalent x-arguments: both
  present -> `received '<new>' but current is '<old>'` (no types, even when the wire types
  differ: 100000 vs 10); one side absent -> `none` and the other side is
  `the value '<v>' of type '<t>'`, `<t>` being RabbitMQ's field-type name: b=byte, s=short,
  u=unsignedshort, I=signedint, i=unsignedint, l=long, S=longstr, t=bool (value 'true').
  Unknown arguments (e.g. `x-foo`) are not compared at all.
* The 405 RESOURCE_LOCKED text is the same for every operation on another connection's exclusive
  queue (declare, passive declare, consume, get, bind, purge, delete) and for a same-connection
  redeclare whose exclusive flag differs; its method ids are those of the operation.
* ack/nack/reject of an unknown tag, a second ack, an ack after a no_ack get, and ack with
  multiple=true beyond the last tag: 406 `unknown delivery tag <tag as sent>`.
* 540 NOT_IMPLEMENTED (hard): `immediate=true`, `prefetch_size!=0 (<n>)`, `requeue=false`
  (basic.recover), `active=false` (channel.flow).
* A wrong protocol header (AMQP 0-10, AMQP 1.0, HTTP) gets exactly `AMQP\\x00\\x00\\x09\\x01` back,
  then the socket is closed.
* Wrong password: with client capability `authentication_failure_close` -> connection.close 403
  (0,0) right after start-ok; without it the socket is just closed (eof).
* Frame errors are 501 with Erlang-formatted detail: `type <T>, first 16 octets = <<...>>:
  {invalid_frame_end_marker,<octet>}` (Erlang pretty-printing inserts a newline and padding
  before the octet - the test matches it with a regex), `type 3, all octets = <<>>:
  {frame_too_large,<payload size>,<frame_max - 8>}`, `type 42, all octets = <<"hello">>:
  unknown_frame`.
* A truncated method payload is 501 `FRAME_ERROR - cannot decode <<argument bytes>>` with the
  method's ids (not 502 or 503).
* An unknown class/method id or an unknown field-table type crashes RabbitMQ 3.10's reader:
  the socket is closed with no close method (log: `{unknown_method_id,{60,999}}`).
* Channel state: a method on a never-opened channel -> 504 `expected 'channel.open'`; a
  second channel.open -> 504 `second 'channel.open' seen`; channel.open on channel 0 or a
  connection.tune-ok after open -> 504 `unexpected method in connection state running`; a
  connection-class method on channel 1 -> 503 `COMMAND_INVALID - unimplemented method`.
* channel_max limits how many channels are open (530, 0,0), not the channel number: with
  channel_max=10, channel 11 opens fine.  A heartbeat frame on channel 1 is 505
  `UNEXPECTED_FRAME - type 8, all octets = <<>>` (0,0); on channel 0 it is ignored.
* Not errors: deleting a missing queue/exchange, unbinding a missing binding, cancelling an
  unknown consumer tag, passive-declaring amq.direct with another type, basic.recover-async,
  channel.flow active=true, queue.bind with an empty queue name after a declare on the same
  channel.  Mandatory publish with no route -> basic.return 312 `NO_ROUTE`.
"""


if __name__ == "__main__":
    _main()
