"""The Spark bridge's client codec and confirm bookkeeping, checked against pamqp (no broker)."""

from __future__ import annotations

import datetime
import itertools
import pickle

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
            pamqp_props["timestamp"], tz=datetime.UTC)
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
    prefix = wire.publish_prefix(1, exchange, routing_key, mandatory)
    assert b"".join(wire.encode_publish(prefix, 1, props, body, frame_max=1024)) == expected


@given(messages=st.lists(st.tuples(st.sampled_from(["a", "bb", ""]), st.binary(max_size=2500),
                                    st.text(max_size=20)), max_size=8),
       shared=st.booleans())
def test_a_batch_of_publishes_is_each_publish_joined(messages, shared):
    """encode_publishes is encode_publish per message (checked against pamqp above),
    whatever the bodies: empty, one frame, several frames; one method frame or one each."""
    prefixes = [wire.publish_prefix(1, "x", "k" if shared else key, False)
                for key, _body, _mid in messages]
    props = [wire.encode_properties({"delivery_mode": 2, "message_id": mid or None})
             for _key, _body, mid in messages]
    bodies = [body for _key, body, _mid in messages]
    one = wire.publish_prefix(1, "x", "k", False)
    mine = wire.encode_publishes(one if shared else prefixes, 1, props, bodies, frame_max=1024)
    expected = [piece for pre, raw, body in zip(prefixes, props, bodies)
                for piece in wire.encode_publish(pre, 1, raw, body, frame_max=1024)]
    assert b"".join(mine) == b"".join(expected)


def test_ack_and_incoming_methods_match_pamqp():
    assert wire.encode_ack(1, 77, True) == pframe.marshal(commands.Basic.Ack(77, True), 1)
    deliver = pframe.marshal(commands.Basic.Deliver("ctag", 5, True, "ex", "rk"), 1)
    assert wire.decode_deliver(deliver[7:-1]) == (5, True, "ex", "rk")
    nack = pframe.marshal(commands.Basic.Nack(9, multiple=True), 1)
    assert wire.method_id(nack[7:-1]) == wire.BASIC_NACK
    assert wire.decode_confirm(nack[7:-1]) == (9, True)
    ack = pframe.marshal(commands.Basic.Ack(11, multiple=False), 1)
    assert wire.decode_confirm(ack[7:-1]) == (11, False)


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


def _delivery_frames(tag: int, redelivered: bool, exchange: str, routing_key: str,
                     props: dict, body: bytes, frame_max: int) -> bytes:
    """One delivered message as pamqp writes it (method, header, body frames)."""
    out = pframe.marshal(commands.Basic.Deliver("ctag-1", tag, redelivered, exchange,
                                                routing_key), 1)
    out += pframe.marshal(pheader.ContentHeader(0, len(body), commands.Basic.Properties(
        **props)), 1)
    step = frame_max - 8
    for start in range(0, len(body), step):
        out += pframe.marshal(pbody.ContentBody(body[start:start + step]), 1)
    return out


MESSAGES = [  # (redelivered, exchange, routing key, properties, body)
    (False, "", "q", {"delivery_mode": 2, "message_id": "m0"}, b"x" * 1024),
    (True, "ex", "k.\u00e9", {}, b""),  # no properties, empty body, non-ASCII key
    (False, "ex", "k", {"delivery_mode": 2, "message_id": "m\u00e9", "content_type": "t/p",
                        "headers": {"n": 3}}, bytes(range(256)) * 5),  # three body frames
    (False, "", "q", {"delivery_mode": 1, "message_id": "m3"}, b"y"),
]


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_raw_deliveries_are_whole_messages_fed_whole_or_byte_by_byte(chunk):
    pytest.importorskip("pyarrow")
    from leveret.spark_sink.deliveries import RawMessages
    from leveret.spark_sink.schema import ARROW_SCHEMA

    frames = [_delivery_frames(tag, *m, frame_max=512) for tag, m in enumerate(MESSAGES, 1)]
    # A confirm between deliveries goes the ordinary way; a trailing partial message waits.
    stream = frames[0] + frames[1] + pframe.marshal(commands.Basic.Ack(1), 1) + b"".join(frames[2:])
    conn = Connection("amqp://h/", raw_deliveries=True)
    conn.confirms = ConfirmState(published=1)
    data = stream + frames[0][:20]
    pieces = [data] if chunk is None else [data[i:i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        conn._feed(piece)
    assert [tag for tag, _ in conn.raw] == [1, 2, 3, 4]
    assert [whole for _, whole in conn.raw] == frames
    assert conn.confirms.outstanding == 0 and not conn.deliveries

    packed = pickle.loads(pickle.dumps(RawMessages.of([10, 11, 12, 13], frames)))
    (batch,) = list(packed.to_arrow())
    rows = batch.to_pylist()
    assert [r["seq"] for r in rows] == [10, 11, 12, 13]
    for row, (redelivered, exchange, routing_key, props, body) in zip(rows, MESSAGES):
        assert (row["redelivered"], row["exchange"], row["routing_key"], row["body"]) == (
            redelivered, exchange, routing_key, body)
        assert row["message_id"] == props.get("message_id")
        assert row["delivery_mode"] == props.get("delivery_mode")
    assert rows[2]["content_type"] == "t/p" and dict(rows[2]["headers"]) == {"n": "3"}
    assert batch.schema == ARROW_SCHEMA


@given(
    messages=st.lists(st.tuples(st.booleans(), st.sampled_from(["", "ex"]), short,
                                st.none() | short, st.binary(max_size=1500)),
                      min_size=1, max_size=8),
    cuts=st.lists(st.integers(0, 20000), max_size=12),
)
def test_raw_deliveries_survive_any_split_of_the_stream(messages, cuts):
    from leveret.spark_sink.deliveries import RawMessages

    frames = [_delivery_frames(tag, redelivered, exchange, rk,
                               {"delivery_mode": 2, **({"message_id": mid} if mid else {})},
                               body, frame_max=512)
              for tag, (redelivered, exchange, rk, mid, body) in enumerate(messages, 1)]
    stream = b"".join(frames)
    conn = Connection("amqp://h/", raw_deliveries=True)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for start, stop in itertools.pairwise(bounds):
        conn._feed(stream[start:stop])
    assert [tag for tag, _ in conn.raw] == list(range(1, len(messages) + 1))
    assert [whole for _, whole in conn.raw] == frames
    rows = [r for b in RawMessages.of(range(len(frames)), frames).to_arrow() for r in b.to_pylist()]
    assert [(r["redelivered"], r["exchange"], r["routing_key"], r["message_id"], r["body"])
            for r in rows] == messages


_PROPERTIES = st.one_of(  # what the sink publishes (the Arrow path), none, or any mix
    st.builds(lambda mid: {"delivery_mode": 2, "message_id": mid}, short),
    st.just({}),
    st.fixed_dictionaries({"delivery_mode": st.sampled_from([1, 2])},
                          optional={"message_id": short, "content_type": short,
                                    "priority": st.integers(0, 9),
                                    "headers": st.dictionaries(short, st.integers(-5, 5),
                                                               max_size=2)}),
)


@given(
    messages=st.lists(st.tuples(st.booleans(), st.sampled_from(["", "ex"]), short, _PROPERTIES,
                                st.sampled_from([b"", b"b", bytes(range(256)) * 3])),
                      min_size=1, max_size=12),
    columns=st.lists(st.sampled_from(["body", "routing_key", "exchange", "message_id",
                                      "delivery_mode", "content_type", "priority", "headers",
                                      "redelivered", "seq"]), unique=True, min_size=1),
    rows_per_batch=st.integers(1, 5),
)
def test_every_layout_and_batch_cut_gives_each_message_its_own_values(
        messages, columns, rows_per_batch):
    """Columns are gathered from the frames by offsets; a row must get its own message's
    parts whatever the columns, the batch boundaries, bodies of several frames (768
    octets at frame_max 512), empty ones, and property lists the Arrow path cannot take."""
    from leveret.spark_sink import schema
    from leveret.spark_sink.deliveries import RawMessages
    from leveret.spark_sink.schema import Layout

    frames = [_delivery_frames(tag, *m, frame_max=512) for tag, m in enumerate(messages, 1)]
    full = schema.ARROW_SCHEMA
    layout = Layout.of([(name, schema._SPARK_TYPES[str(full.field(name).type)])
                        for name in columns], False)
    packed = RawMessages.of(range(100, 100 + len(frames)), frames, layout)
    batches = list(packed.to_arrow(rows_per_batch))
    assert [b.num_rows for b in batches][:-1] == [rows_per_batch] * (len(batches) - 1)
    rows = [r for b in batches for r in b.to_pylist()]
    for seq, (row, (redelivered, exchange, routing_key, props, body)) in enumerate(
            zip(rows, messages, strict=True), 100):
        expected = {"body": body, "routing_key": routing_key, "exchange": exchange,
                    "redelivered": redelivered, "seq": seq,
                    **{name: props.get(name) for name in ("message_id", "delivery_mode",
                                                          "content_type", "priority")},
                    "headers": ({k: str(v) for k, v in props["headers"].items()}
                                if "headers" in props else None)}
        if row.get("headers") is not None:  # a map's pairs come in the table's wire order
            row["headers"] = dict(row["headers"])
        assert row == {name: expected[name] for name in columns}
