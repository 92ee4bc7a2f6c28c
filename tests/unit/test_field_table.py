"""Field-table checks (amqp/field_table.py): lengths inside their container, bounded depth."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, encode

from leveret.amqp import fastpath
from leveret.amqp.codec import decode_method
from leveret.amqp.errors import FRAME_ERROR, ConnectionError_
from leveret.amqp.field_table import MAX_DEPTH, check_table


def nested(depth: int, array: bool = False) -> bytes:
    """A table ``depth`` levels deep (the outermost counts); inside it tables, or arrays."""
    inner = struct.pack(">I", 0)
    for _ in range(depth - 2 if array else depth - 1):
        value = b"A" + inner if array else b"\x01a" + b"F" + inner
        inner = struct.pack(">I", len(value)) + value
    if array:
        entry = b"\x01a" + b"A" + inner
        inner = struct.pack(">I", len(entry)) + entry
    return inner


def declare_payload(table: bytes) -> bytes:
    return struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x00" + table


def test_a_real_table_passes_and_its_end_is_returned() -> None:
    table = encode.field_table({"x-death": [{"count": 1, "queue": "q", "routing-keys": ["a"]}],
                                "n": 5, "s": "text", "b": True, "f": 1.5, "v": None})
    assert check_table(table + b"rest") == len(table)


@pytest.mark.parametrize("array", [False, True])
def test_depth_limit(array: bool) -> None:
    assert check_table(nested(MAX_DEPTH, array)) == len(nested(MAX_DEPTH, array))
    with pytest.raises(ValueError, match="nested deeper"):
        check_table(nested(MAX_DEPTH + 1, array))


@pytest.mark.parametrize("entry", [
    b"\x05x-foo" + b"S" + struct.pack(">I", 1000) + b"abc",  # longstr past the table
    b"\x05x-foo" + b"x" + struct.pack(">I", 4) + b"ab",  # byte array past the table
    b"\x05x-foo" + b"F" + struct.pack(">I", 9),  # inner table past the outer
    b"\x09x-foo",  # key past the table
    b"\x05x-foo" + b"l" + b"\x00",  # long long cut short
    b"\x05x-foo" + b"Z" + b"\x00",  # unknown type
])
def test_malformed_tables_are_refused(entry: bytes) -> None:
    with pytest.raises(ValueError):
        check_table(struct.pack(">I", len(entry)) + entry + b"\x00" * 16)


def test_table_length_past_the_data_is_refused() -> None:
    with pytest.raises(ValueError):
        check_table(struct.pack(">I", 100) + b"\x00" * 10)


def test_deep_declare_is_a_clean_501_not_a_recursion_error() -> None:
    payload = declare_payload(nested(1000))
    with pytest.raises(ConnectionError_) as info:
        decode_method(payload, (50 << 16) | 10)
    assert info.value.code == FRAME_ERROR
    assert info.value.reply_text.startswith("FRAME_ERROR - cannot decode <<")


def test_declare_at_the_limit_decodes() -> None:
    method = decode_method(declare_payload(nested(MAX_DEPTH)), (50 << 16) | 10)
    depth, table = 0, method.arguments
    while isinstance(table, dict) and table:
        depth, table = depth + 1, table["a"]
    assert depth == MAX_DEPTH - 1


def test_longstr_past_the_frame_in_start_ok_is_501() -> None:
    payload = (struct.pack(">HH", 10, 11) + b"\x00\x00\x00\x00" + b"\x05PLAIN"
               + struct.pack(">I", 100) + b"\x00guest\x00guest" + b"\x05en_US")
    with pytest.raises(ConnectionError_) as info:
        decode_method(payload, (10 << 16) | 11)
    assert info.value.code == FRAME_ERROR


def test_properties_with_deep_headers_raise_value_error() -> None:
    raw = struct.pack(">H", 0x2000) + nested(1000)
    with pytest.raises(ValueError):
        fastpath.decode_properties(raw)
    props = commands.Basic.Properties(headers={"a": {"b": [1, "x"]}}, delivery_mode=2)
    assert fastpath.decode_properties(fastpath.encode_properties(props)).headers == props.headers
