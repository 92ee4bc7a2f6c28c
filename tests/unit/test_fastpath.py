"""The fast-path codecs must agree with pamqp byte for byte.

Encoders: for random valid field values the frame equals ``pamqp.frame.marshal``
of the same method.  Decoders: on pamqp-marshalled payloads they return what
pamqp unmarshals; on truncated, mutated or random payloads they return a value
or raise ValueError, nothing else (and where they return, pamqp agrees).
"""

from __future__ import annotations

import datetime
import string
from collections.abc import Callable

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from pamqp import base, commands, frame, header, heartbeat
from pamqp import body as pbody
from pamqp.exceptions import UnmarshalingException

from leveret.amqp import fastpath as fp
from leveret.amqp import frames as fr
from leveret.model import properties as props_codec

Basic = commands.Basic

# --- strategies -------------------------------------------------------------

channels = st.integers(0, 0xFFFF)
# Tags a broker issues; pamqp packs longlong signed so it cannot go higher.
delivery_tags = st.integers(0, 2**63 - 1)


def _fits_shortstr(value: str) -> bool:
    return len(value.encode("utf-8")) <= 255


shortstrs = st.one_of(
    st.text(max_size=40),
    st.text(max_size=255).filter(_fits_shortstr),
    st.text(alphabet=string.ascii_letters + ".-_", min_size=240, max_size=255),
)
# pamqp validates exchange names on marshal (<= 127 chars of this alphabet).
exchange_names = st.from_regex(r"[a-zA-Z0-9\-_.:@#,/+ ]{0,127}", fullmatch=True)
frame_maxes = st.one_of(
    st.just(0), st.integers(9, 64), st.integers(9, 600), st.sampled_from([4096, 131072])
)
# Hypothesis keeps binaries short, so also draw sizes that need several frames.
_PATTERN = bytes(range(256)) * 40
bodies = st.one_of(
    st.binary(max_size=64), st.integers(0, len(_PATTERN)).map(lambda n: _PATTERN[:n])
)

_timestamps = st.datetimes(
    min_value=datetime.datetime(1970, 1, 2),
    max_value=datetime.datetime(2100, 1, 1),
).map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC))
_nonempty = shortstrs.filter(bool)
_header_values = st.one_of(st.integers(-(2**31), 2**31 - 1), st.booleans(), st.text(max_size=20))
properties = st.builds(
    Basic.Properties,
    content_type=st.none() | _nonempty,
    content_encoding=st.none() | _nonempty,
    headers=st.none()
    | st.dictionaries(
        st.text(alphabet=string.ascii_letters + "-_", min_size=1, max_size=20),
        _header_values,
        min_size=1,
        max_size=4,
    ),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | _nonempty,
    reply_to=st.none() | _nonempty,
    expiration=st.none() | st.integers(0, 10**9).map(str),
    message_id=st.none() | _nonempty,
    timestamp=st.none() | _timestamps,
    message_type=st.none() | _nonempty,
    user_id=st.none() | _nonempty,
    app_id=st.none() | _nonempty,
)


def _payload(method: object, channel: int = 1) -> bytes:
    """pamqp's method frame with the 7-byte head and frame end stripped."""
    return frame.marshal(method, channel)[7:-1]  # type: ignore[arg-type]


def _pamqp_method(payload: bytes) -> base.Frame:
    """Unmarshal a method payload with pamqp (wrapping it in a frame)."""
    wire = bytes([1, 0, 1]) + len(payload).to_bytes(4, "big") + payload + b"\xce"
    method = frame.unmarshal(wire)[2]
    assert isinstance(method, base.Frame)
    return method


# --- constants --------------------------------------------------------------


def test_method_ids_match_pamqp() -> None:
    pairs: dict[int, type[base.Frame]] = {
        fp.BASIC_QOS: Basic.Qos,
        fp.BASIC_QOS_OK: Basic.QosOk,
        fp.BASIC_CONSUME: Basic.Consume,
        fp.BASIC_CONSUME_OK: Basic.ConsumeOk,
        fp.BASIC_CANCEL: Basic.Cancel,
        fp.BASIC_CANCEL_OK: Basic.CancelOk,
        fp.BASIC_PUBLISH: Basic.Publish,
        fp.BASIC_RETURN: Basic.Return,
        fp.BASIC_DELIVER: Basic.Deliver,
        fp.BASIC_GET: Basic.Get,
        fp.BASIC_GET_OK: Basic.GetOk,
        fp.BASIC_GET_EMPTY: Basic.GetEmpty,
        fp.BASIC_ACK: Basic.Ack,
        fp.BASIC_REJECT: Basic.Reject,
        fp.BASIC_RECOVER_ASYNC: Basic.RecoverAsync,
        fp.BASIC_RECOVER: Basic.Recover,
        fp.BASIC_RECOVER_OK: Basic.RecoverOk,
        fp.BASIC_NACK: Basic.Nack,
    }
    for value, cls in pairs.items():
        assert value == cls.index, cls.name


def test_frame_constants() -> None:
    assert frame.marshal(heartbeat.Heartbeat(), 0) == fr.HEARTBEAT_FRAME
    assert bytes([fr.FRAME_END]) == fr.FRAME_END_BYTE
    assert (fr.FRAME_METHOD, fr.FRAME_HEADER, fr.FRAME_BODY, fr.FRAME_HEARTBEAT) == (1, 2, 3, 8)


# --- encoders vs pamqp ------------------------------------------------------


@given(channels, shortstrs, delivery_tags, st.booleans(), exchange_names, shortstrs)
def test_encode_deliver(
    channel: int, ctag: str, tag: int, redelivered: bool, exchange: str, rkey: str
) -> None:
    expected = frame.marshal(Basic.Deliver(ctag, tag, redelivered, exchange, rkey), channel)
    assert fp.encode_deliver(channel, ctag, tag, redelivered, exchange, rkey) == expected


@given(channels, delivery_tags, st.booleans(), exchange_names, shortstrs, st.integers(0, 2**32 - 1))
def test_encode_get_ok(
    channel: int, tag: int, redelivered: bool, exchange: str, rkey: str, count: int
) -> None:
    expected = frame.marshal(Basic.GetOk(tag, redelivered, exchange, rkey, count), channel)
    assert fp.encode_get_ok(channel, tag, redelivered, exchange, rkey, count) == expected


@given(channels, st.integers(0, 0xFFFF), shortstrs, exchange_names, shortstrs)
def test_encode_return(channel: int, code: int, text: str, exchange: str, rkey: str) -> None:
    expected = frame.marshal(Basic.Return(code, text, exchange, rkey), channel)
    assert fp.encode_return(channel, code, text, exchange, rkey) == expected


@given(channels, delivery_tags, st.booleans())
def test_encode_ack(channel: int, tag: int, multiple: bool) -> None:
    assert fp.encode_ack(channel, tag, multiple) == frame.marshal(Basic.Ack(tag, multiple), channel)


@given(channels, delivery_tags, st.booleans(), st.booleans())
def test_encode_nack(channel: int, tag: int, multiple: bool, requeue: bool) -> None:
    expected = frame.marshal(Basic.Nack(tag, multiple, requeue), channel)
    assert fp.encode_nack(channel, tag, multiple, requeue) == expected


@given(channels, shortstrs, delivery_tags, st.booleans(), shortstrs, shortstrs)
def test_encoders_roundtrip_through_pamqp_for_any_exchange_name(
    channel: int, ctag: str, tag: int, redelivered: bool, exchange: str, rkey: str
) -> None:
    # pamqp refuses to *marshal* some names the fast path accepts, but unmarshals them.
    _, ch, deliver = frame.unmarshal(
        fp.encode_deliver(channel, ctag, tag, redelivered, exchange, rkey)
    )
    assert ch == channel
    assert isinstance(deliver, Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == (
        ctag,
        tag,
        redelivered,
    )
    assert (deliver.exchange, deliver.routing_key) == (exchange, rkey)
    _, _, ret = frame.unmarshal(fp.encode_return(channel, 312, ctag, exchange, rkey))
    assert isinstance(ret, Basic.Return)
    assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (
        312,
        ctag,
        exchange,
        rkey,
    )


@given(channels, properties, bodies, frame_maxes)
def test_encode_content(channel: int, props: Basic.Properties, body: bytes, frame_max: int) -> None:
    raw = props_codec.encode_properties(props)
    frames = fp.encode_content(channel, raw, body, frame_max)
    assert all(type(f) is bytes for f in frames)
    expected_header = frame.marshal(header.ContentHeader(0, len(body), props), channel)
    assert frames[0] == expected_header
    chunk = frame_max - 8 if frame_max else max(len(body), 1)
    expected_bodies = [
        frame.marshal(pbody.ContentBody(body[i : i + chunk]), channel)
        for i in range(0, len(body), chunk)
    ]
    assert frames[1:] == expected_bodies
    if not body:
        assert len(frames) == 1  # no empty body frame, as RabbitMQ
    if frame_max:
        assert all(len(f) <= frame_max for f in frames[1:])
    # A memoryview body gives the same frames.
    assert fp.encode_content(channel, raw, memoryview(body), frame_max) == frames


@given(
    channels,
    shortstrs,
    delivery_tags,
    st.booleans(),
    shortstrs,
    shortstrs,
    properties,
    bodies,
    frame_maxes,
)
def test_encode_deliver_with_content_is_the_concatenation(
    channel: int,
    ctag: str,
    tag: int,
    redelivered: bool,
    exchange: str,
    rkey: str,
    props: Basic.Properties,
    body: bytes,
    frame_max: int,
) -> None:
    raw = props_codec.encode_properties(props)
    joined = fp.encode_deliver_with_content(
        channel, ctag, tag, redelivered, exchange, rkey, raw, body, frame_max
    )
    expected = fp.encode_deliver(channel, ctag, tag, redelivered, exchange, rkey) + b"".join(
        fp.encode_content(channel, raw, body, frame_max)
    )
    assert joined == expected
    assert (
        fp.encode_deliver_with_content(
            channel, ctag, tag, redelivered, exchange, rkey, raw, memoryview(body), frame_max
        )
        == expected
    )


@pytest.mark.parametrize("size", [0, 1, 4087, 4088, 4089, 8176, 8177, 100_000])
def test_body_split_at_frame_max_boundaries(size: int) -> None:
    body = (_PATTERN * (size // len(_PATTERN) + 1))[:size]
    frames = fp.encode_content(7, b"\x00\x00", body, 4096)
    chunk = 4096 - 8
    assert len(frames) == 1 + -(-size // chunk)
    assert all(len(f) == 4096 for f in frames[1:-1])
    assert b"".join(f[7:-1] for f in frames[1:]) == body
    assert [f[0] for f in frames] == [fr.FRAME_HEADER] + [fr.FRAME_BODY] * (len(frames) - 1)


def test_encoders_reject_out_of_range_values() -> None:
    long = "x" * 256
    with pytest.raises(ValueError):
        fp.encode_deliver(1, long, 1, False, "", "")
    with pytest.raises(ValueError):
        fp.encode_deliver(1, "", 1, False, "", "é" * 128)  # 256 bytes of UTF-8
    with pytest.raises(ValueError):
        fp.encode_get_ok(1, 1, False, "", long, 0)
    with pytest.raises(ValueError):
        fp.encode_return(1, 312, long, "", "")
    with pytest.raises(ValueError):
        fp.encode_deliver(1, "", -1, False, "", "")
    with pytest.raises(ValueError):
        fp.encode_ack(70000, 1, False)
    with pytest.raises(ValueError):
        fp.encode_nack(1, 2**64, False, True)
    with pytest.raises(ValueError):
        fp.encode_get_ok(1, 1, False, "", "", 2**32)
    with pytest.raises(ValueError):
        fp.encode_content(1, b"\x00\x00", b"abc", 8)
    with pytest.raises(ValueError):
        fp.encode_deliver_with_content(1, "", 1, False, "", "", b"\x00\x00", b"abc", 5)
    # 255 bytes is fine.
    fp.encode_deliver(1, "x" * 255, 1, False, "", "é" * 127)


def test_full_width_delivery_tags_are_unsigned() -> None:
    wire = fp.encode_ack(1, 2**64 - 1, True)
    assert fp.decode_ack(wire[7:-1]) == (2**64 - 1, True)


def test_shortstr_cache_is_bounded() -> None:
    for i in range(fp.SHORTSTR_CACHE_MAX * 2 + 10):
        fp.encode_deliver(1, f"ctag-{i}", i, False, "amq.direct", f"rk-{i}")
    assert len(fp._shortstr_cache) <= fp.SHORTSTR_CACHE_MAX


# --- decoders vs pamqp ------------------------------------------------------


@given(exchange_names, shortstrs, st.booleans(), st.booleans(), st.booleans())
def test_decode_publish(
    exchange: str, rkey: str, mandatory: bool, immediate: bool, as_view: bool
) -> None:
    payload = _payload(Basic.Publish(0, exchange, rkey, mandatory, immediate))
    data = memoryview(payload) if as_view else payload
    method = _pamqp_method(payload)
    assert isinstance(method, Basic.Publish)
    assert fp.decode_publish(data) == (
        method.exchange,
        method.routing_key,
        method.mandatory,
        method.immediate,
    )
    assert fp.decode_publish(data) == (exchange, rkey, mandatory, immediate)


@given(delivery_tags, st.booleans(), st.booleans())
def test_decode_ack(tag: int, multiple: bool, as_view: bool) -> None:
    payload = _payload(Basic.Ack(tag, multiple))
    assert fp.decode_ack(memoryview(payload) if as_view else payload) == (tag, multiple)


@given(delivery_tags, st.booleans(), st.booleans(), st.booleans())
def test_decode_nack(tag: int, multiple: bool, requeue: bool, as_view: bool) -> None:
    payload = _payload(Basic.Nack(tag, multiple, requeue))
    data = memoryview(payload) if as_view else payload
    assert fp.decode_nack(data) == (tag, multiple, requeue)


@given(delivery_tags, st.booleans(), st.booleans())
def test_decode_reject(tag: int, requeue: bool, as_view: bool) -> None:
    payload = _payload(Basic.Reject(tag, requeue))
    assert fp.decode_reject(memoryview(payload) if as_view else payload) == (tag, requeue)


@given(properties, st.integers(0, 2**63 - 1), st.booleans())
def test_decode_content_header(props: Basic.Properties, size: int, as_view: bool) -> None:
    wire = frame.marshal(header.ContentHeader(0, size, props), 1)
    payload = wire[7:-1]
    class_id, body_size, raw = fp.decode_content_header(memoryview(payload) if as_view else payload)
    _, _, pamqp_header = frame.unmarshal(wire)
    assert isinstance(pamqp_header, header.ContentHeader)
    assert (class_id, body_size) == (pamqp_header.class_id, pamqp_header.body_size) == (60, size)
    assert type(raw) is bytes
    assert raw == payload[12:] == props_codec.encode_properties(props)
    assert props_codec.decode_properties(raw) == pamqp_header.properties == props
    assert props_codec.decode_properties(memoryview(raw)) == props


def test_decode_publish_invalid_utf8_raises_like_pamqp() -> None:
    payload = bytes(_payload(Basic.Publish(0, "ex", "ab")))
    bad = payload.replace(b"\x02ab", b"\x02\xff\xfe")
    with pytest.raises(UnmarshalingException):
        _pamqp_method(bad)
    with pytest.raises(ValueError):
        fp.decode_publish(bad)


def test_decoders_check_the_method_id() -> None:
    ack = _payload(Basic.Ack(5, False))
    with pytest.raises(ValueError):
        fp.decode_nack(ack)
    with pytest.raises(ValueError):
        fp.decode_reject(ack)
    with pytest.raises(ValueError):
        fp.decode_publish(_payload(Basic.Deliver("c", 1, False, "", "")))


# --- hostile input ----------------------------------------------------------

_DECODERS = [
    fp.decode_publish,
    fp.decode_ack,
    fp.decode_nack,
    fp.decode_reject,
    fp.decode_content_header,
    props_codec.decode_properties,
]


@st.composite
def valid_payloads(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["publish", "ack", "nack", "reject", "header", "props"]))
    if kind == "publish":
        method: object = Basic.Publish(
            0, draw(exchange_names), draw(shortstrs), draw(st.booleans()), draw(st.booleans())
        )
        return _payload(method)
    if kind == "ack":
        return _payload(Basic.Ack(draw(delivery_tags), draw(st.booleans())))
    if kind == "nack":
        return _payload(Basic.Nack(draw(delivery_tags), draw(st.booleans()), draw(st.booleans())))
    if kind == "reject":
        return _payload(Basic.Reject(draw(delivery_tags), draw(st.booleans())))
    props = draw(properties)
    if kind == "header":
        return header.ContentHeader(0, draw(st.integers(0, 2**40)), props).marshal()
    return props_codec.encode_properties(props)


@st.composite
def mangled_payloads(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(valid_payloads()))
    how = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "random"]))
    if how == "random":
        return draw(st.binary(max_size=80))
    if how == "truncate":
        return bytes(data[: draw(st.integers(0, len(data)))])
    if not data:
        return bytes(data)
    pos = draw(st.integers(0, len(data) - 1))
    if how == "flip":
        data[pos] = draw(st.integers(0, 255))
    elif how == "insert":
        data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
    else:
        del data[pos]
    return bytes(data)


@settings(max_examples=1000)
@given(mangled_payloads(), st.booleans())
@example(b"", False)
@example(b"\x00\x3c\x00\x28\x00\x00\x05ab", False)
@example(b"\x00\x3c\x00\x28\x00\x00\x00\x05", True)
@example(b"\x00\x00\x00\x80\x00\x00", False)  # two flag words, no list
@example(b"\x00\x01", False)  # continuation bit, second word missing
def test_decoders_only_raise_value_error(data: bytes, as_view: bool) -> None:
    buf = memoryview(data) if as_view else data
    for decode in _DECODERS:
        try:
            decode(buf)
        except ValueError:
            pass


@settings(max_examples=500)
@given(mangled_payloads())
def test_where_fast_decoders_succeed_pamqp_agrees(data: bytes) -> None:
    assume(len(data) >= 4)
    cases: list[tuple[Callable[[bytes], tuple[object, ...]], type[base.Frame]]] = [
        (fp.decode_publish, Basic.Publish),
        (fp.decode_ack, Basic.Ack),
        (fp.decode_nack, Basic.Nack),
        (fp.decode_reject, Basic.Reject),
    ]
    for decode, cls in cases:
        try:
            ours = decode(data)
        except ValueError:
            continue
        method = _pamqp_method(data)
        assert isinstance(method, cls)
        fields = [f for f in cls.__slots__ if f != "ticket"]
        theirs = tuple(getattr(method, f) for f in fields)
        # pamqp reads longlong as signed; compare tags modulo 2**64.
        theirs = tuple(v % 2**64 if f == "delivery_tag" else v for f, v in zip(fields, theirs))
        assert ours == theirs


def test_the_deliver_heads_cache_is_bounded_and_keyed_by_all_four() -> None:
    for i in range(fp.SHORTSTR_CACHE_MAX * 2 + 10):
        fp.encode_deliver_with_content(1 + i % 3, f"ctag-{i}", i, False, "amq.direct",
                                       f"rk-{i}", b"\x00\x00", b"x", 0)
    assert len(fp._deliver_heads) <= fp.SHORTSTR_CACHE_MAX
    for channel, ctag, exchange, rkey in [(1, "a", "", "q"), (2, "a", "", "q"),
                                          (1, "b", "", "q"), (1, "a", "x", "q"),
                                          (1, "a", "", "r"), (1, "a", "", "q")]:
        assert fp.encode_deliver_with_content(
            channel, ctag, 7, True, exchange, rkey, b"\x00\x00", b"body", 0) == (
            fp.encode_deliver(channel, ctag, 7, True, exchange, rkey)
            + b"".join(fp.encode_content(channel, b"\x00\x00", b"body", 0)))
