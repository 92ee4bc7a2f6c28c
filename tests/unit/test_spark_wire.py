"""The Spark bridge's client codec and confirm bookkeeping, checked against pamqp (no broker)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from leveret.spark_sink import wire
from leveret.spark_sink.amqp_client import ConfirmState, Connection, parse_url

short = st.text(min_size=1, max_size=40)  # pamqp leaves empty strings unset


@given(
    content_type=st.none() | short,
    message_id=st.none() | short,
    correlation_id=st.none() | short,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 9),
    timestamp=st.none() | st.integers(0, 2**32),
    headers=st.none() | st.dictionaries(st.text(min_size=1, max_size=8), st.integers(-5, 5)),
)
def test_properties_match_pamqp(**props):
    mine = wire.encode_properties(props)
    pamqp_props = {k: v for k, v in props.items() if v is not None}
    if "headers" in pamqp_props:  # the bridge writes keys sorted, as plain pamqp does
        pamqp_props["headers"] = dict(sorted(pamqp_props["headers"].items()))
    if "timestamp" in pamqp_props:
        pamqp_props["timestamp"] = datetime.datetime.fromtimestamp(
            pamqp_props["timestamp"], tz=datetime.timezone.utc)
    expected = pheader.ContentHeader(0, 0, commands.Basic.Properties(**pamqp_props)).marshal()
    assert mine == expected[12:]  # after class, weight, body size
    decoded = wire.decode_properties(mine)
    assert decoded == {k: v for k, v in props.items() if v is not None}


@given(exchange=st.from_regex(r"[a-zA-Z0-9_.:-]{0,40}", fullmatch=True), routing_key=short, mandatory=st.booleans(),
       body=st.binary(max_size=3000))
def test_publish_frames_match_pamqp(exchange, routing_key, mandatory, body):
    props = wire.encode_properties({"delivery_mode": 2, "message_id": "m"})
    mine = wire.publish_prefix(1, exchange, routing_key, mandatory) + wire.encode_content(
        1, props, body, frame_max=1024)
    expected = pframe.marshal(
        commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory), 1)
    expected += pframe.marshal(pheader.ContentHeader(0, len(body), commands.Basic.Properties(
        delivery_mode=2, message_id="m")), 1)
    for start in range(0, len(body), 1024 - 8):
        expected += pframe.marshal(pbody.ContentBody(body[start:start + 1016]), 1)
    assert mine == expected


def test_ack_and_incoming_methods_match_pamqp():
    assert wire.encode_ack(1, 77, True) == pframe.marshal(commands.Basic.Ack(77, True), 1)
    deliver = pframe.marshal(commands.Basic.Deliver("ctag", 5, True, "ex", "rk"), 1)
    assert wire.decode_deliver(deliver[7:-1]) == (5, True, "ex", "rk")
    nack = pframe.marshal(commands.Basic.Nack(9, multiple=True), 1)
    assert wire.method_id(nack[7:-1]) == wire.BASIC_NACK
    assert wire.decode_confirm(nack[7:-1]) == (9, True)


def test_short_string_limit_is_an_error():
    with pytest.raises(ValueError, match="255"):
        wire.encode_properties({"message_id": "x" * 256})


def test_confirm_state_settles_ranges_and_out_of_order_singles():
    state = ConfirmState(published=10)
    state.settle(3, multiple=True, nack=False)
    assert (state.settled_upto, state.outstanding) == (3, 7)
    state.settle(5, multiple=False, nack=False)
    state.settle(6, multiple=False, nack=True)
    assert state.outstanding == 5 and state.nacked == 1
    state.settle(4, multiple=False, nack=False)
    assert state.settled_upto == 6 and not state.singles
    state.settle(10, multiple=True, nack=True)
    assert state.outstanding == 0 and state.nacked == 5


def test_parse_url_and_lazy_connection():
    assert parse_url("amqp://u:p%40ss@h:1234/%2Fv") == {
        "host": "h", "port": 1234, "user": "u", "password": "p@ss", "vhost": "/v"}
    assert parse_url("amqp://localhost")["vhost"] == "/"
    conn = Connection("amqp://guest:guest@127.0.0.1:1/%2F")  # constructing never connects
    assert conn.sock is None
    with pytest.raises(ValueError):
        parse_url("amqps://h/")
