"""After the broker sends connection.close: read only for close-ok, keep nothing.

RabbitMQ 3.10, measured with raw sockets: after a hard error on an open connection it reads
and discards what the client sends and drops the socket after 30 s (or the heartbeat, if
shorter) without close-ok; after a framing error or a refused tune-ok, after 3 s.
"""

from __future__ import annotations

import struct

import pytest
from pamqp import commands

from leveret.amqp.closing import CLOSING_TIMEOUT, SILENT_CLOSE_DELAY
from leveret.amqp.connection import CLOSED, CLOSING
from leveret.tests.unit.wire import PROTOCOL_HEADER, Client

both_feeds = pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "bytewise"])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running(heartbeat: int = 0, byte_by_byte: bool = False) -> tuple[Client, FakeClock]:
    clock = FakeClock()
    client = Client(clock=clock, byte_by_byte=byte_by_byte)
    client.handshake(heartbeat=heartbeat)
    client.open_channel(1)
    return client, clock


def hard_error(client: Client) -> None:
    frames = client.call(1, commands.Basic.Qos(prefetch_size=5))  # 540, hard
    assert [type(f) for _, f in frames] == [commands.Connection.Close]
    assert client.conn.state == CLOSING


@pytest.mark.parametrize(("heartbeat", "grace"), [(0, CLOSING_TIMEOUT), (60, CLOSING_TIMEOUT),
                                                  (10, 10.0)])
def test_hard_error_deadline_follows_rabbitmq(heartbeat: int, grace: float) -> None:
    client, clock = running(heartbeat)
    hard_error(client)
    assert client.conn.reading
    assert client.conn.close_deadline == clock.now + grace


@both_feeds
def test_publishes_after_close_are_discarded_unbuffered_and_close_ok_is_found(
        byte_by_byte: bool) -> None:
    client, _ = running()
    hard_error(client)
    client.byte_by_byte = byte_by_byte
    flood = client.publish_bytes(1, b"x" * 100_000, routing_key="q") * (3 if byte_by_byte else 50)
    # Sent in pieces that cut frames anywhere: nothing but a partial frame header is kept.
    for i in range(0, len(flood), 9_999):
        assert client.send(flood[i:i + 9_999]) == []
        assert len(client.conn._frames) < 16
    assert client.conn.state == CLOSING
    client.send(client.method(0, commands.Connection.CloseOk()))
    assert client.conn.state == CLOSED and client.conn.want_close


def test_framing_error_stops_reading_and_shortens_the_deadline() -> None:
    client, clock = running(heartbeat=60)
    frames = client.send(struct.pack(">BHI", 1, 1, 4) + b"abcd" + b"\x00")  # bad end marker
    assert [type(f) for _, f in frames] == [commands.Connection.Close]
    assert frames[0][1].reply_code == 501
    assert not client.conn.reading
    assert client.conn.close_deadline == clock.now + SILENT_CLOSE_DELAY
    # Not even close-ok is looked at any more; the adapter has stopped reading.
    client.send(b"\x00" * 1_000_000 + client.method(0, commands.Connection.CloseOk()))
    assert client.conn.state == CLOSING
    assert len(client.conn._frames) < 1_000


def test_framing_error_while_closing_stops_reading() -> None:
    client, clock = running()
    hard_error(client)
    clock.now += 5
    client.send(struct.pack(">BHI", 1, 0, 4) + b"abcd" + b"\x00")
    assert not client.conn.reading
    assert client.conn.close_deadline == clock.now + SILENT_CLOSE_DELAY


def test_refused_tune_ok_then_large_frames_keep_nothing() -> None:
    """The 1.2 GB case: tune-ok refused (530), then 64 KB frames over the initial frame_max."""
    clock = FakeClock()
    client = Client(clock=clock)
    client.send(PROTOCOL_HEADER)
    client.call(0, commands.Connection.StartOk(
        client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))
    frames = client.call(0, commands.Connection.TuneOk(channel_max=2047, frame_max=1024,
                                                       heartbeat=0))
    assert frames[0][1].reply_code == 530
    assert client.conn.close_deadline == clock.now + SILENT_CLOSE_DELAY
    publish = client.publish_bytes(1, b"x" * 65536, routing_key="q")
    for _ in range(20):
        client.send(publish)
    assert not client.conn.reading
    assert len(client.conn._frames) < 70_000


def test_prefetch_0_consumer_gets_deliveries_one_batch_per_turn() -> None:
    """A long queue is not encoded for a prefetch-0 consumer all at once."""
    from leveret.amqp.channel import DELIVERY_BATCH_BYTES

    client, _ = running()
    client.call(1, commands.Queue.Declare(queue="q"))
    for _ in range(3000):
        client.publish(1, b"x" * 1024, routing_key="q")
    client.feed(client.method(1, commands.Basic.Consume(queue="q")))
    sizes = []
    while True:
        out = client.drain_raw()
        if not out:
            break
        sizes.append(len(out))
    assert max(sizes) < DELIVERY_BATCH_BYTES + 2048
    assert sum(sizes) > 3000 * 1024  # every message came, over several turns
    assert len(sizes) >= 3
