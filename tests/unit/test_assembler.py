"""The content assembler alone: frames in, one content (or RabbitMQ's error) out."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands

from leveret.amqp.assembler import BODY, HEADER, IDLE, ContentAssembler
from leveret.amqp.fastpath import encode_content
from leveret.model.errors import ChannelError, ConnectionError_
from leveret.model.properties import encode_properties

PROPS = encode_properties(commands.Basic.Properties(content_type="text/plain", delivery_mode=2))
PUBLISH = ("ex", "rk", True)


def header_payload(body_size: int, class_id: int = 60) -> bytes:
    frame = encode_content(1, PROPS, b"x" * body_size, 0, class_id)[0]
    return frame[7:-1]  # strip the frame head and end octet


@given(body=st.binary(max_size=2000), cuts=st.lists(st.integers(0, 2000), max_size=6))
def test_any_split_of_the_body_gives_the_same_content(body: bytes, cuts: list[int]) -> None:
    a = ContentAssembler()
    a.start(PUBLISH)
    done = a.header(header_payload(len(body)), 1 << 20)
    bounds = sorted({0, len(body), *(c for c in cuts if c <= len(body))})
    chunks = [body[x:y] for x, y in itertools.pairwise(bounds)]
    for chunk in chunks:
        assert done is None
        done = a.body(chunk)
    assert done == (PUBLISH, PROPS, body)
    assert a.state == IDLE


def test_states_and_transitions() -> None:
    a = ContentAssembler()
    assert a.state == IDLE
    a.check_method()  # methods are fine between contents
    a.start(PUBLISH)
    assert a.state == HEADER
    assert a.header(header_payload(3), 100) is None
    assert a.state == BODY
    assert a.body(b"ab") is None
    assert a.body(b"c") == (PUBLISH, PROPS, b"abc")
    assert a.state == IDLE


def test_empty_body_completes_at_the_header() -> None:
    a = ContentAssembler()
    a.start(PUBLISH)
    assert a.header(header_payload(0), 100) == (PUBLISH, PROPS, b"")


@pytest.mark.parametrize(("state", "text"), [
    (HEADER, "expected content header for class 60, got non content header frame instead"),
    (BODY, "expected content body for class 60, got non content body frame instead"),
])
def test_a_method_inside_a_content_is_unexpected(state: int, text: str) -> None:
    a = ContentAssembler()
    a.start(PUBLISH)
    if state == BODY:
        a.header(header_payload(5), 100)
    with pytest.raises(ConnectionError_) as err:
        a.check_method()
    assert (err.value.code, err.value.detail, err.value.method) == (505, text, (60, 40))


def test_frames_out_of_order_get_rabbitmqs_texts() -> None:
    a = ContentAssembler()
    with pytest.raises(ConnectionError_, match="expected method frame, got non method frame"):
        a.header(header_payload(1), 100)
    with pytest.raises(ConnectionError_, match="expected method frame, got non method frame"):
        a.body(b"x")
    a.start(PUBLISH)
    with pytest.raises(ConnectionError_, match="expected content header for class 60"):
        a.body(b"x")


def test_body_past_the_announced_size_is_a_frame_error() -> None:
    a = ContentAssembler()
    a.start(PUBLISH)
    a.header(header_payload(2), 100)
    with pytest.raises(ConnectionError_) as err:
        a.body(b"abc")
    assert err.value.code == 501


def test_oversized_content_is_refused_at_the_header_and_resets() -> None:
    a = ContentAssembler()
    a.start(PUBLISH)
    with pytest.raises(ChannelError) as err:
        a.header(header_payload(101), 100)
    assert err.value.code == 406
    assert err.value.detail == "message size 101 is larger than configured max size 100"
    assert a.state == IDLE


def test_header_of_another_class_is_unexpected() -> None:
    a = ContentAssembler()
    a.start(PUBLISH)
    with pytest.raises(ConnectionError_, match="content header for class 50"):
        a.header(header_payload(1, class_id=50), 100)
