"""``check_properties``: what a publish's property list must be before it is relayed.

Checked against pamqp's encoder (every list it writes passes, none of its
truncations or extensions does) and against the cases recorded from RabbitMQ
3.10 in ``tests/integration/test_differential_properties.py``.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.model.properties import check_properties, decode_properties
from leveret.tests.unit.test_fastpath import properties


@given(properties)
def test_every_list_pamqp_writes_passes(props: object) -> None:
    raw = props.marshal()  # type: ignore[attr-defined]
    check_properties(raw)
    decode_properties(raw)  # and what passes, the broker can decode later


@given(properties.filter(lambda p: p.marshal() != b"\x00\x00"), st.data())
def test_every_truncation_fails(props: object, data: st.DataObject) -> None:
    raw = props.marshal()  # type: ignore[attr-defined]
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ValueError):
        check_properties(raw[:cut])


@given(properties, st.binary(min_size=1, max_size=8))
def test_bytes_after_the_list_fail(props: object, extra: bytes) -> None:
    with pytest.raises(ValueError):
        check_properties(props.marshal() + extra)  # type: ignore[attr-defined]


def _headers(entries: bytes) -> bytes:
    return b"\x20\x00" + struct.pack(">I", len(entries)) + entries


def _nested(depth: int) -> bytes:
    """A table holding a table holding ... ``depth`` levels, walked without recursion."""
    inner = b""
    for _ in range(depth):
        inner = b"\x01aF" + struct.pack(">I", len(inner)) + inner
    return inner


@pytest.mark.parametrize("raw", [
    b"\x00\x02",  # the unused bit 1: ignored, as RabbitMQ
    b"\x80\x00\x02\xff\xfe",  # a short string that is not UTF-8: RabbitMQ relays it
    _headers(b"\x00I\x00\x00\x00\x01\x01aI\x00\x00\x00\x01\x01aI\x00\x00\x00\x02"),
    _headers(b"\x01ht\x02\x01fV\x01gD\x01\x00\x00\x00\x01"),
    _headers(_nested(5000)),  # RabbitMQ relays any depth; decoding stops at MAX_DEPTH later
    _headers(b"\x01aA" + struct.pack(">I", 12) + b"F" + struct.pack(">I", 7) + b"\x01bI\x00\x00\x00\x01"),
])
def test_unusual_but_well_formed(raw: bytes) -> None:
    check_properties(raw)


@pytest.mark.parametrize("raw", [
    b"",
    b"\x00",
    b"\x00\x01",  # the continuation bit: one flag word only (RabbitMQ ignores the bit)
    b"\x10\x00",
    b"\x00\x40\x00\x00\x00\x01",
    b"\xa0\x00\x02ab\x00\x00\x00\x09\x01aZ",
    _headers(b"\x01aZ"),
    _headers(b"\x01aU\x00\x01"),
    _headers(b"\x05ab"),
    _headers(b"\x01aS\x00\x00\x00\x09ab"),
    _headers(b"\x01aA\x00\x00\x00\x01Z"),
    _headers(b"\x01\xffI\x00\x00\x00\x01"),  # a key that is not UTF-8 (RabbitMQ relays it)
    _headers(_nested(3000)[:-1] + b"Z"),  # deep down, a length past its container
    _headers(b"\x01aA" + struct.pack(">I", 9) + b"F" + struct.pack(">I", 4) + b"\x01b"),
])
def test_malformed(raw: bytes) -> None:
    with pytest.raises(ValueError):
        check_properties(raw)
