"""The sans-IO protocol core over an in-memory wire (docs/STYLE.md principle 1).

Every scenario is driven through ``tests/unit/wire.Client``, which feeds
``Connection.receive_data`` and parses what ``data_to_send()`` returns with
pamqp. Scenarios that matter for framing are run twice, fed whole and byte
by byte, and must produce the same bytes.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pamqp import body as pbody
from pamqp import commands, frame
from pamqp import header as pheader
from pamqp import heartbeat as pheartbeat

from leveret.amqp.connection import CLOSED, CLOSING, HEADER, RUNNING
from leveret.config import Config
from leveret.tests.unit.wire import PROTOCOL_HEADER, Client, content_frames

Basic = commands.Basic

CONN_CLOSE = commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
CHAN_CLOSE = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)

both_feeds = pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "bytewise"])


def types(frames: list[tuple[int, Any]]) -> list[type]:
    return [type(f) for _, f in frames]


def running(byte_by_byte: bool = False, **kw: Any) -> Client:
    client = Client(byte_by_byte=byte_by_byte, **kw)
    client.handshake()
    client.open_channel(1)
    return client


def only(frames: list[tuple[int, Any]], cls: type) -> Any:
    assert types(frames) == [cls], frames
    return frames[0][1]


# -- handshake ------------------------------------------------------------------


@both_feeds
def test_handshake(byte_by_byte: bool) -> None:
    client = Client(byte_by_byte=byte_by_byte)
    assert client.conn.state == HEADER
    frames = client.handshake()
    assert types(frames) == [commands.Connection.Start, commands.Connection.Tune,
                             commands.Connection.OpenOk]
    start = frames[0][1]
    assert (start.version_major, start.version_minor) == (0, 9)
    assert "PLAIN" in start.mechanisms.split()
    assert start.locales == "en_US"
    props = start.server_properties
    assert props["product"] == "Leveret"
    for key in ("version", "platform", "copyright", "information", "cluster_name"):
        assert props[key]
    caps = props["capabilities"]
    for cap in ("publisher_confirms", "basic.nack", "consumer_cancel_notify",
                "exchange_exchange_bindings", "authentication_failure_close"):
        assert caps[cap] is True
    tune = frames[1][1]
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)
    assert client.conn.state == RUNNING
    assert client.conn.user == "guest"
    assert client.conn in client.broker.connections


def test_pipelined_handshake_in_one_chunk_matches_step_by_step() -> None:
    stepwise = Client()
    stepwise.handshake()
    stepwise.open_channel(1)

    piped = Client()
    data = PROTOCOL_HEADER + b"".join(Client.method(0, m) for m in (
        commands.Connection.StartOk(client_properties={"product": "wire", "capabilities": {
            "consumer_cancel_notify": True, "publisher_confirms": True}},
            mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"),
        commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0),
        commands.Connection.Open(virtual_host="/"),
    )) + Client.method(1, commands.Channel.Open())
    piped.send(data)
    assert bytes(piped.wire_out) == bytes(stepwise.wire_out)
    assert piped.conn.state == RUNNING


def test_frame_larger_than_initial_frame_max_right_after_tune_ok_in_same_chunk() -> None:
    """tune-ok raises frame_max for the frames that follow it, even in the same chunk."""
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.call(0, commands.Connection.StartOk(mechanism="PLAIN",
                                               response="\x00guest\x00guest", locale="en_US"))
    body = b"b" * 20000
    frames = client.send(
        Client.method(0, commands.Connection.TuneOk(channel_max=10, frame_max=131072, heartbeat=0))
        + Client.method(0, commands.Connection.Open(virtual_host="/"))
        + Client.method(1, commands.Channel.Open())
        + Client.method(1, commands.Queue.Declare(queue="big"))
        + Client.method(1, Basic.Publish(routing_key="big"))
        + content_frames(1, body, 131072)
    )
    assert types(frames) == [commands.Connection.OpenOk, commands.Channel.OpenOk,
                             commands.Queue.DeclareOk]
    assert client.broker.vhosts["/"].queues["big"].message_count == 1


def test_refused_login_is_access_refused() -> None:
    client = Client(peer=("10.0.0.1", 4000))  # guest is loopback-only
    client.send(PROTOCOL_HEADER)
    close = only(client.call(0, commands.Connection.StartOk(
        client_properties={"capabilities": {"authentication_failure_close": True}},
        mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US")),
        commands.Connection.Close)
    assert close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused")
    assert (close.class_id, close.method_id) == (0, 0)  # as RabbitMQ 3.10


@pytest.mark.parametrize("header", [
    b"AMQP\x00\x00\x09\x00",  # wrong revision
    b"AMQP\x01\x01\x00\x09",  # RabbitMQ's old 0-9 header
    b"AMQP\x00\x01\x00\x00",  # AMQP 1.0
    b"GET / HTTP/1.1\r\n\r\n",
])
@both_feeds
def test_wrong_protocol_header(header: bytes, byte_by_byte: bool) -> None:
    client = Client(byte_by_byte=byte_by_byte)
    client.feed(header)
    assert client.drain_raw() == PROTOCOL_HEADER
    assert client.conn.want_close
    assert client.conn.state == CLOSED
    client.feed(b"more")  # ignored once closed
    assert client.drain_raw() == b""


def test_bad_header_detected_before_eight_bytes() -> None:
    client = Client()
    client.feed(b"HT")
    assert client.drain_raw() == PROTOCOL_HEADER
    assert client.conn.want_close


# -- publish / consume ---------------------------------------------------------------


@both_feeds
def test_publish_consume_deliver_ack(byte_by_byte: bool) -> None:
    client = running(byte_by_byte)
    only(client.call(1, commands.Queue.Declare(queue="work")), commands.Queue.DeclareOk)
    props = Basic.Properties(content_type="text/plain", delivery_mode=2,
                             headers={"k": "v"}, message_id="m1")
    assert client.publish(1, b"first", routing_key="work", properties=props) == []
    assert client.broker.vhosts["/"].queues["work"].message_count == 1

    frames = client.call(1, Basic.Consume(queue="work", consumer_tag="c1"))
    assert types(frames) == [Basic.ConsumeOk, Basic.Deliver, pheader.ContentHeader,
                             pbody.ContentBody]
    deliver, header, body = frames[1][1], frames[2][1], frames[3][1]
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == ("c1", 1, False)
    assert (deliver.exchange, deliver.routing_key) == ("", "work")
    assert header.body_size == 5
    assert header.properties.content_type == "text/plain"
    assert header.properties.headers == {"k": "v"}
    assert header.properties.message_id == "m1"
    assert body.value == b"first"

    # A second publish goes straight to the consumer.
    frames = client.publish(1, b"second", routing_key="work")
    assert types(frames) == [Basic.Deliver, pheader.ContentHeader, pbody.ContentBody]
    assert frames[0][1].delivery_tag == 2

    queue = client.broker.vhosts["/"].queues["work"]
    assert queue.unacked == 2
    assert client.call(1, Basic.Ack(delivery_tag=2, multiple=True)) == []
    assert queue.unacked == 0 and queue.message_count == 0


def test_nack_requeue_redelivers_with_redelivered_flag() -> None:
    client = running()
    client.call(1, commands.Queue.Declare(queue="q"))
    client.publish(1, b"m", routing_key="q")
    client.call(1, Basic.Qos(prefetch_count=1))
    frames = client.call(1, Basic.Consume(queue="q", consumer_tag="c"))
    assert frames[1][1].redelivered is False
    frames = client.call(1, Basic.Nack(delivery_tag=1, requeue=True))
    assert types(frames) == [Basic.Deliver, pheader.ContentHeader, pbody.ContentBody]
    assert (frames[0][1].delivery_tag, frames[0][1].redelivered) == (2, True)


def test_mandatory_unroutable_is_returned() -> None:
    client = running()
    frames = client.publish(1, b"lost", routing_key="nowhere", mandatory=True)
    assert types(frames) == [Basic.Return, pheader.ContentHeader, pbody.ContentBody]
    ret = frames[0][1]
    assert (ret.reply_code, ret.reply_text, ret.routing_key) == (312, "NO_ROUTE", "nowhere")
    assert frames[2][1].value == b"lost"


@both_feeds
def test_each_publish_goes_where_its_own_method_says(byte_by_byte: bool) -> None:
    """A channel keeps the last basic.publish it decoded, for a publisher that repeats
    its exchange and key: a publish that differs in any field is decoded afresh."""
    client = running(byte_by_byte)
    for name in ("a", "b"):
        only(client.call(1, commands.Queue.Declare(queue=name)), commands.Queue.DeclareOk)
    sent = [("a", False), ("a", False), ("b", False), ("a", False), ("nowhere", True),
            ("nowhere", False), ("b", False), ("nowhere", True)]
    returned = []
    for n, (key, mandatory) in enumerate(sent):
        for _, reply in client.publish(1, b"m%d" % n, routing_key=key, mandatory=mandatory):
            if isinstance(reply, Basic.Return):
                returned.append(reply.routing_key)
    queues = client.broker.vhosts["/"].queues
    assert (queues["a"].message_count, queues["b"].message_count) == (3, 2)
    assert returned == ["nowhere", "nowhere"]  # mandatory ones only
    close = expect_connection_close(client, client.call(1, Basic.Publish(
        routing_key="a", immediate=True)), 540, (60, 40))
    assert close.reply_text == "NOT_IMPLEMENTED - immediate=true"


@both_feeds
def test_content_split_by_small_frame_max(byte_by_byte: bool) -> None:
    client = Client(byte_by_byte=byte_by_byte)
    client.handshake(frame_max=4096)
    client.open_channel(1)
    client.call(1, commands.Queue.Declare(queue="big"))
    payload = bytes(range(256)) * 40  # 10240 bytes: three 4088-byte body frames in
    data = client.publish_bytes(1, payload, routing_key="big")
    assert data.count(b"\xce\x03\x00\x01") == 3  # the client split it too
    assert client.send(data) == []
    frames = client.call(1, Basic.Consume(queue="big", consumer_tag="c"))
    assert types(frames) == [Basic.ConsumeOk, Basic.Deliver, pheader.ContentHeader] + \
        [pbody.ContentBody] * 3
    bodies = [f.value for _, f in frames[3:]]
    assert [len(b) for b in bodies] == [4088, 4088, 10240 - 2 * 4088]
    assert b"".join(bodies) == payload
    assert frames[2][1].body_size == len(payload)


def test_whole_and_bytewise_feeds_write_the_same_bytes() -> None:
    def script(client: Client) -> None:
        client.handshake(frame_max=4096)
        client.open_channel(1)
        client.call(1, commands.Queue.Declare(queue="q"))
        client.call(1, commands.Confirm.Select())
        client.call(1, Basic.Consume(queue="q", consumer_tag="ctag"))
        client.send(b"".join(client.publish_bytes(1, bytes([i]) * (3000 * i), routing_key="q")
                             for i in range(4)))
        client.call(1, Basic.Ack(delivery_tag=0, multiple=True))
        client.call(1, commands.Queue.Declare(queue="missing", passive=True))
        client.call(0, CONN_CLOSE)

    outputs = []
    for bytewise in (False, True):
        client = Client(byte_by_byte=bytewise)
        script(client)
        outputs.append(bytes(client.wire_out))
        assert client.conn.state == CLOSED and client.conn.want_close
    # connection.start carries the platform and version only: identical across runs.
    assert outputs[0] == outputs[1]


def test_body_larger_than_announced_size_is_frame_error() -> None:
    client = running()
    data = (client.method(1, Basic.Publish(routing_key="x"))
            + frame.marshal(pheader.ContentHeader(0, 2, Basic.Properties()), 1)
            + frame.marshal(pbody.ContentBody(b"abc"), 1))
    close = only(client.send(data), commands.Connection.Close)
    assert close.reply_code == 501


# -- error mapping ---------------------------------------------------------------------


def test_channel_error_closes_the_channel_with_rabbitmq_text() -> None:
    client = running()
    close = only(client.call(1, commands.Queue.Declare(queue="nope", passive=True)),
                 commands.Channel.Close)
    assert close.reply_code == 404
    assert close.reply_text == "NOT_FOUND - no queue 'nope' in vhost '/'"
    assert (close.class_id, close.method_id) == (50, 10)
    assert client.conn.state == RUNNING
    # Until close-ok everything on the channel is dropped (content too) ...
    assert client.call(1, commands.Queue.Declare(queue="x")) == []
    assert client.publish(1, b"zz", routing_key="x") == []
    assert "x" not in client.broker.vhosts["/"].queues
    # ... a channel.close crossing ours is answered ...
    assert types(client.call(1, CHAN_CLOSE)) == [commands.Channel.CloseOk]
    # ... and after close-ok the number can be reused.
    assert client.call(1, commands.Channel.CloseOk()) == []
    client.open_channel(1)
    assert types(client.call(1, commands.Queue.Declare(queue="x"))) == [commands.Queue.DeclareOk]


def test_unknown_exchange_on_publish_is_channel_404() -> None:
    client = running()
    close = only(client.publish(1, b"m", exchange="nope", routing_key="k"), commands.Channel.Close)
    assert close.reply_code == 404
    assert close.reply_text == "NOT_FOUND - no exchange 'nope' in vhost '/'"
    assert (close.class_id, close.method_id) == (60, 40)


def test_unknown_delivery_tag_is_406() -> None:
    client = running()
    close = only(client.call(1, Basic.Ack(delivery_tag=7)), commands.Channel.Close)
    assert close.reply_code == 406
    assert close.reply_text == "PRECONDITION_FAILED - unknown delivery tag 7"
    assert (close.class_id, close.method_id) == (60, 80)


def expect_connection_close(client: Client, frames: list, code: int,
                            method: tuple[int, int] | None = None) -> Any:
    close = only(frames, commands.Connection.Close)
    assert close.reply_code == code, close.reply_text
    assert close.reply_text.startswith(close.reply_text.split(" - ")[0] + " - ")
    if method is not None:
        assert (close.class_id, close.method_id) == method
    assert client.conn.state == CLOSING
    assert not client.conn.want_close
    return close


def test_closing_state_ignores_everything_but_close_ok() -> None:
    client = running()
    client.call(1, commands.Queue.Declare(queue="q"))
    expect_connection_close(client, client.call(1, Basic.Publish(immediate=True)), 540)
    # Channel methods, content, heartbeats and junk methods are all dropped.
    assert client.call(1, commands.Queue.Declare(queue="other")) == []
    assert client.send(content_frames(1, b"body")) == []
    assert client.send(b"\x08\x00\x00\x00\x00\x00\x00\xce") == []
    assert client.call(0, commands.Connection.Open()) == []
    assert "other" not in client.broker.vhosts["/"].queues
    assert client.conn.state == CLOSING
    assert client.call(0, commands.Connection.CloseOk()) == []
    assert client.conn.state == CLOSED and client.conn.want_close
    assert client.conn not in client.broker.connections


def test_close_crossing_in_closing_state_is_answered() -> None:
    client = running()
    expect_connection_close(client, client.call(1, Basic.Publish(immediate=True)), 540)
    assert types(client.call(0, CONN_CLOSE)) == [commands.Connection.CloseOk]
    assert client.conn.state == CLOSED and client.conn.want_close


@both_feeds
def test_content_header_without_publish_is_505(byte_by_byte: bool) -> None:
    client = running(byte_by_byte)
    frames = client.send(frame.marshal(pheader.ContentHeader(0, 1, Basic.Properties()), 1))
    close = expect_connection_close(client, frames, 505)
    assert close.reply_text.startswith("UNEXPECTED_FRAME - ")


def test_body_without_publish_is_505() -> None:
    client = running()
    expect_connection_close(client, client.send(frame.marshal(pbody.ContentBody(b"x"), 1)), 505)


def test_method_instead_of_content_header_is_505() -> None:
    client = running()
    frames = client.send(client.method(1, Basic.Publish(routing_key="q"))
                         + client.method(1, commands.Queue.Declare(queue="q")))
    close = expect_connection_close(client, frames, 505, (60, 40))  # the publish, as RabbitMQ
    assert "expected content header for class 60" in close.reply_text


def test_method_on_unopened_channel_is_504() -> None:
    client = running()
    close = expect_connection_close(client, client.call(5, commands.Queue.Declare(queue="q")),
                                    504, (50, 10))
    assert close.reply_text == "CHANNEL_ERROR - expected 'channel.open'"


def test_second_channel_open_is_504() -> None:
    client = running()
    expect_connection_close(client, client.call(1, commands.Channel.Open()), 504, (20, 10))


def test_channel_max_bounds_the_open_channel_count_not_numbers() -> None:
    """As RabbitMQ: channel 4 opens with channel_max=2; a third open channel is 530."""
    client = Client()
    client.handshake(channel_max=2)
    client.open_channel(4)
    client.open_channel(1)
    close = expect_connection_close(client, client.call(2, commands.Channel.Open()), 530)
    assert "has reached the negotiated channel_max (2)" in close.reply_text


def test_heartbeat_on_nonzero_channel_is_505() -> None:
    """RabbitMQ 3.10, sent a raw heartbeat frame on channel 1, answers 505 (0,0).

    (An older differential case sent it with pamqp, which always puts heartbeats on channel 0.)
    """
    client = running()
    close = expect_connection_close(client, client.send(b"\x08\x00\x01\x00\x00\x00\x00\xce"),
                                    505, (0, 0))
    assert close.reply_text == "UNEXPECTED_FRAME - type 8, all octets = <<>>"


def test_heartbeat_on_channel_zero_is_accepted() -> None:
    client = running()
    assert client.send(b"\x08\x00\x00\x00\x00\x00\x00\xce") == []
    assert client.conn.state == RUNNING


@both_feeds
def test_publish_immediate_is_540(byte_by_byte: bool) -> None:
    client = running(byte_by_byte)
    close = expect_connection_close(client, client.call(1, Basic.Publish(immediate=True)), 540,
                                    (60, 40))
    assert close.reply_text == "NOT_IMPLEMENTED - immediate=true"


def test_bad_frame_end_is_501_and_earlier_frames_in_the_chunk_still_count() -> None:
    client = running()
    bad = bytearray(client.method(1, commands.Queue.Declare(queue="b")))
    bad[-1] = 0
    frames = client.send(client.method(1, commands.Queue.Declare(queue="a")) + bytes(bad))
    assert types(frames) == [commands.Queue.DeclareOk, commands.Connection.Close]
    assert frames[1][1].reply_code == 501
    assert "a" in client.broker.vhosts["/"].queues


def test_oversized_frame_is_501() -> None:
    client = Client()
    client.handshake(frame_max=4096)
    client.open_channel(1)
    frames = client.send(client.method(1, Basic.Publish(routing_key="q"))
                         + frame.marshal(pheader.ContentHeader(0, 5000, Basic.Properties()), 1)
                         + frame.marshal(pbody.ContentBody(b"x" * 5000), 1))
    close = expect_connection_close(client, frames, 501)
    assert "frame_too_large" in close.reply_text


def test_connection_method_on_a_channel_is_503() -> None:
    client = running()
    expect_connection_close(client, client.call(1, commands.Connection.Open()), 503, (10, 40))


def test_non_connection_method_on_channel_zero_is_504() -> None:
    client = running()
    close = expect_connection_close(client, client.call(0, commands.Queue.Declare(queue="q")),
                                    504, (50, 10))
    assert close.reply_text == "CHANNEL_ERROR - unexpected method in connection state running"


def test_channel_method_before_open_ok_is_503() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.call(0, commands.Connection.StartOk(mechanism="PLAIN",
                                               response="\x00guest\x00guest", locale="en_US"))
    client.call(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    expect_connection_close(client, client.call(1, commands.Channel.Open()), 503)


def test_unknown_vhost_is_530() -> None:
    client = Client()
    client.send(PROTOCOL_HEADER)
    client.call(0, commands.Connection.StartOk(mechanism="PLAIN",
                                               response="\x00guest\x00guest", locale="en_US"))
    client.call(0, commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    close = expect_connection_close(client, client.call(0, commands.Connection.Open(
        virtual_host="nope")), 530, (10, 40))
    assert close.reply_text == "NOT_ALLOWED - vhost nope not found"


def test_unknown_method_is_540_and_undecodable_arguments_are_501() -> None:
    client = running()
    raw = b"\x01\x00\x01\x00\x00\x00\x04\x00\x3c\x00\x63\xce"  # basic method 99
    expect_connection_close(client, client.send(raw), 540, (60, 99))
    client = running()
    payload = Client.method(1, commands.Queue.Declare(queue="q"))[7:-1]
    raw = b"\x01\x00\x01" + (len(payload) - 3).to_bytes(4, "big") + payload[:-3] + b"\xce"
    close = expect_connection_close(client, client.send(raw), 501, (50, 10))
    assert close.reply_text.startswith("FRAME_ERROR - cannot decode")


def test_channel_close_releases_unacked_messages() -> None:
    client = running()
    client.call(1, commands.Queue.Declare(queue="q"))
    client.publish(1, b"m", routing_key="q")
    client.call(1, Basic.Consume(queue="q", consumer_tag="c"))
    queue = client.broker.vhosts["/"].queues["q"]
    assert queue.message_count == 0 and queue.unacked == 1
    assert types(client.call(1, CHAN_CLOSE)) == [commands.Channel.CloseOk]
    assert queue.message_count == 1 and queue.unacked == 0 and not queue.consumers


def test_connection_lost_requeues_and_forgets_the_connection() -> None:
    client = running()
    client.call(1, commands.Queue.Declare(queue="q"))
    client.publish(1, b"m", routing_key="q")
    client.call(1, Basic.Consume(queue="q", consumer_tag="c"))
    client.conn.connection_lost()
    queue = client.broker.vhosts["/"].queues["q"]
    assert client.conn.state == CLOSED
    assert queue.message_count == 1 and not queue.consumers
    assert client.conn not in client.broker.connections
    client.feed(client.method(1, Basic.Get(queue="q")))
    assert client.drain_raw() == b""


# -- publisher confirms -------------------------------------------------------------------


@both_feeds
def test_confirms_for_one_chunk_are_a_single_multiple_ack(byte_by_byte: bool) -> None:
    client = running(byte_by_byte)
    client.call(1, commands.Queue.Declare(queue="q"))
    only(client.call(1, commands.Confirm.Select()), commands.Confirm.SelectOk)
    n = 25
    chunk = b"".join(client.publish_bytes(1, b"m%d" % i, routing_key="q") for i in range(n))
    if byte_by_byte:
        # Byte by byte, the batch is what accumulated before the adapter flushes.
        client.feed(chunk)
        frames = client.drain()
    else:
        frames = client.send(chunk)
    ack = only(frames, Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (n, True)
    assert client.broker.vhosts["/"].queues["q"].message_count == n
    # Next batch: one more publish, confirmed on its own.
    ack = only(client.publish(1, b"x", routing_key="q"), Basic.Ack)
    assert (ack.delivery_tag, ack.multiple) == (n + 1, False)


def test_confirm_for_unroutable_message_is_an_ack() -> None:
    client = running()
    client.call(1, commands.Confirm.Select())
    frames = client.publish(1, b"m", routing_key="nowhere", mandatory=True)
    assert types(frames) == [Basic.Return, pheader.ContentHeader, pbody.ContentBody, Basic.Ack]


def test_confirms_wake_the_adapter() -> None:
    client = running()
    client.call(1, commands.Queue.Declare(queue="q"))
    client.call(1, commands.Confirm.Select())
    before = client.output_signals
    client.feed(client.publish_bytes(1, b"m", routing_key="q"))
    assert client.output_signals == before + 1  # on_output asked for a flush
    assert types(client.drain()) == [Basic.Ack]


# -- heartbeats ----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_heartbeat_tick() -> None:
    clock = FakeClock()
    client = Client(clock=clock)
    client.handshake(heartbeat=10)
    assert client.conn.heartbeat == 10
    assert client.conn.heartbeat_tick() is True
    assert client.drain() == []  # just talked: nothing to send

    clock.now += 5  # half an interval of silence on our side
    assert client.conn.heartbeat_tick() is True
    assert types(client.drain()) == [pheartbeat.Heartbeat]

    clock.now += 5
    client.send(b"\x08\x00\x00\x00\x00\x00\x00\xce")  # the peer is alive
    clock.now += 19
    assert client.conn.heartbeat_tick() is True
    clock.now += 2  # 21 s since the peer's last byte > 2 * 10
    assert client.conn.heartbeat_tick() is False
    assert client.conn.want_close and client.conn.state == CLOSED


def test_heartbeat_disabled_never_times_out() -> None:
    clock = FakeClock()
    client = Client(clock=clock)
    client.handshake(heartbeat=0)
    clock.now += 10_000
    assert client.conn.heartbeat_tick() is True
    assert client.drain() == []


def test_no_heartbeat_when_output_is_pending() -> None:
    clock = FakeClock()
    client = Client(clock=clock)
    client.handshake(heartbeat=10)
    client.open_channel(1)
    client.feed(client.method(1, commands.Queue.Declare(queue="q")))  # not drained yet
    clock.now += 6
    assert client.conn.heartbeat_tick() is True
    assert types(client.drain()) == [commands.Queue.DeclareOk]


def test_no_internal_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    """The scenarios above in one run, with the catch-all watched."""
    with caplog.at_level(logging.WARNING, logger="leveret"):
        test_publish_consume_deliver_ack(False)
        test_channel_error_closes_the_channel_with_rabbitmq_text()
        test_content_split_by_small_frame_max(False)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("how", ["error", "lost"])
def test_dying_connection_does_not_redeliver_to_its_own_consumers(how: str) -> None:
    """Releasing channel 1 requeues its messages; channel 2 (same connection) must not get them."""
    client = running()
    client.open_channel(2)
    client.call(1, commands.Queue.Declare(queue="q"))
    client.call(1, Basic.Consume(queue="q", consumer_tag="a"))
    client.call(2, Basic.Consume(queue="q", consumer_tag="b"))
    for i in range(4):
        client.publish(1, b"m%d" % i, routing_key="q")
    queue = client.broker.vhosts["/"].queues["q"]
    assert queue.unacked == 4
    if how == "error":
        frames = client.call(1, Basic.Publish(immediate=True))
        assert types(frames) == [commands.Connection.Close]  # and nothing after it
    else:
        client.conn.connection_lost()
        assert client.drain() == []
    assert queue.message_count == 4 and queue.unacked == 0 and not queue.consumers


def test_a_burst_is_handled_in_slices_of_frames_per_turn() -> None:
    from leveret.amqp.connection import FRAMES_PER_TURN

    client = running()
    # A publish that arrives whole with its header and body counts as one frame.
    burst = client.publish_bytes(1, b"x", routing_key="nowhere") * (3 * FRAMES_PER_TURN)
    client.conn.receive_data(burst)
    assert client.conn.input_pending  # a third of it handled: the rest waits for the next turn
    turns = 1
    while client.conn.input_pending:
        client.conn.receive_data(b"")
        turns += 1
    assert turns in (3, 4)  # 4 when the last slice ends exactly on the budget
    client.call(1, commands.Confirm.Select())  # the connection is intact after the slices


@pytest.mark.parametrize("case", ["unopened-channel", "closing-channel", "too-large",
                                  "no-exchange"])
def test_a_whole_publish_is_answered_as_its_frames_one_by_one(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish that arrives with its content in one chunk is handled in one call
    (``frames.FRAME_PUBLISH``); whatever goes wrong, the server writes the same bytes as
    when the frames come one by one."""
    from leveret.amqp.connection import Connection
    from leveret.tests.unit import wire

    whole_items: list[int] = []  # channels of the FRAME_PUBLISH items the connection got

    class Counting(Connection):  # compiled, Connection's own type cannot be patched
        def _on_publish(self, number: int, *payloads: bytes) -> bool:
            whole_items.append(number)
            return super()._on_publish(number, *payloads)

    monkeypatch.setattr(wire, "Connection", Counting)
    out = []
    for byte_by_byte in (False, True):
        client = running(byte_by_byte=byte_by_byte, config=Config(max_message_size=64))
        client.call(1, commands.Queue.Declare(queue="q"))
        script = b""
        if case == "closing-channel":  # the client closes channel 1, then publishes on it
            script += client.method(1, commands.Channel.Close(reply_code=200, class_id=0,
                                                              method_id=0))
        channel = 2 if case == "unopened-channel" else 1
        body = b"x" * (100 if case == "too-large" else 10)
        exchange = "nope" if case == "no-exchange" else ""  # 404 when the content is complete
        script += client.publish_bytes(channel, body, exchange, routing_key="q") * 2
        script += client.method(1, commands.Basic.Qos(prefetch_count=1))
        client.feed(script)
        out.append(client.drain_raw())
        # Fed whole, the first publish came as one item; byte by byte, none did.
        assert bool(whole_items) != byte_by_byte
        whole_items.clear()
    assert out[0] == out[1] and out[0]
