"""Field tables keep their wire types: decode(encode(t)) is t, byte for byte and type for type."""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp import encode as pamqp_encode

from leveret.amqp.codec import decode_method
from leveret.model import field_table as ft
from leveret.model.errors import FRAME_ERROR, ConnectionError_
from leveret.model.field_table import MAX_DEPTH, decode_table
from leveret.model.properties import decode_properties, encode_properties

INT_TYPES = [ft.Byte, ft.UnsignedByte, ft.Short, ft.UnsignedShort, ft.SignedInt,
             ft.UnsignedInt, ft.Long]
RANGES = {ft.Byte: (-128, 127), ft.UnsignedByte: (0, 255), ft.Short: (-(2**15), 2**15 - 1),
          ft.UnsignedShort: (0, 2**16 - 1), ft.SignedInt: (-(2**31), 2**31 - 1),
          ft.UnsignedInt: (0, 2**32 - 1), ft.Long: (-(2**63), 2**63 - 1)}

typed_ints = st.one_of(*(st.integers(*RANGES[cls]).map(cls) for cls in INT_TYPES))
scalars = st.one_of(
    typed_ints,
    st.booleans(),
    st.floats(allow_nan=False, width=64),
    st.floats(allow_nan=False, width=32).map(ft.Float),
    st.text(max_size=20),
    st.binary(max_size=20).filter(lambda b: _not_utf8(b)),
    st.binary(max_size=20).map(bytearray),
    st.integers(0, 2**32).map(lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC)),
    st.builds(lambda m, s: decimal.Decimal(m).scaleb(-s), st.integers(-(2**31), 2**31 - 1),
              st.integers(0, 20)),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(min_size=0, max_size=10), inner, max_size=4),
    max_leaves=20,
)
tables = st.dictionaries(st.text(max_size=12), values, max_size=6)


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def typed(value: Any) -> Any:
    """A comparable picture of a value including every nested wire type."""
    if isinstance(value, dict):
        return ("table", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("array", [typed(v) for v in value])
    if isinstance(value, decimal.Decimal):
        return ("decimal", str(value))
    return (ft.type_name(value), value)


@given(tables)
def test_decoded_tables_keep_types_order_and_bytes(table: dict[str, Any]) -> None:
    raw = ft.encode_table(table)
    used, decoded = ft.decode_table(raw)
    assert used == len(raw)
    assert typed(decoded) == typed(table)
    assert ft.encode_table(decoded) == raw


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_arbitrary_bytes_decode_or_raise_value_error(raw: bytes) -> None:
    """Hostile input: a ValueError or a table; whatever decodes re-encodes to itself.

    (Not always to the input bytes: a boolean octet of 2, or a key sent twice, is
    normalised once.)"""
    try:
        _, table = ft.decode_table(struct.pack(">I", len(raw)) + raw)
    except ValueError:
        return
    again = ft.encode_table(table)
    assert ft.encode_table(ft.decode_table(again)[1]) == again


@pytest.mark.parametrize("depth", [ft.MAX_DEPTH + 1, 1000])
def test_deep_nesting_is_a_clean_value_error(depth: int) -> None:
    raw = b"\x00\x00\x00\x00"
    for _ in range(depth):
        entry = b"\x01kF" + raw
        raw = struct.pack(">I", len(entry)) + entry
    with pytest.raises(ValueError, match="nested deeper"):
        ft.decode_table(raw)


def test_plain_ints_take_the_smallest_type_as_pamqp() -> None:
    assert ft.encode_value(1) == b"b\x01"
    assert ft.encode_value(300)[:1] == b"s"
    assert ft.encode_value(40000)[:1] == b"u"
    assert ft.encode_value(2**31 - 1)[:1] == b"I"
    assert ft.encode_value(2**40)[:1] == b"l"


def test_type_names_are_rabbitmqs() -> None:
    assert [ft.type_name(cls(1)) for cls in INT_TYPES] == [
        "byte", "unsignedbyte", "short", "unsignedshort", "signedint", "unsignedint", "long"]
    assert ft.type_name("x") == "longstr" and ft.type_name(True) == "bool"
    assert ft.type_name(1.5) == "double" and ft.type_name(ft.Float(1.5)) == "float"


def test_typed_values_are_numbers_to_the_rest_of_the_code() -> None:
    assert ft.SignedInt(5) == 5 and hash(ft.Long(5)) == hash(5) and ft.Byte(2) + 1 == 3
    # Equal as numbers, still telling their wire types apart.
    assert ft.type_name(ft.SignedInt(1)) == ft.type_name(ft.SignedInt(1)) == "signedint"
    assert ft.SignedInt(1) == ft.Long(1) and ft.type_name(ft.Long(1)) != "signedint"


def test_message_headers_round_trip_through_pamqp_with_their_types() -> None:
    """pamqp uses these codecs for headers once installed (model/properties does it)."""
    headers = {"z": ft.SignedInt(7), "a": ft.Long(1), "f": ft.Float(0.5), "n": {"x": ft.Short(2)}}
    raw = encode_properties(commands.Basic.Properties(headers=headers))
    decoded = decode_properties(raw).headers
    assert typed(decoded) == typed(headers)
    assert list(decoded) == ["z", "a", "f", "n"]  # pamqp alone would sort the keys


# -- hostile tables: lengths inside their container, bounded depth ----

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
    table = pamqp_encode.field_table({"x-death": [{"count": 1, "queue": "q", "routing-keys": ["a"]}],
                                "n": 5, "s": "text", "b": True, "f": 1.5, "v": None})
    assert decode_table(table + b"rest")[0] == len(table)


@pytest.mark.parametrize("array", [False, True])
def test_depth_limit(array: bool) -> None:
    assert decode_table(nested(MAX_DEPTH, array))[0] == len(nested(MAX_DEPTH, array))
    with pytest.raises(ValueError, match="nested deeper"):
        decode_table(nested(MAX_DEPTH + 1, array))


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
        decode_table(struct.pack(">I", len(entry)) + entry + b"\x00" * 16)


def test_table_length_past_the_data_is_refused() -> None:
    with pytest.raises(ValueError):
        decode_table(struct.pack(">I", 100) + b"\x00" * 10)


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
        decode_properties(raw)
    props = commands.Basic.Properties(headers={"a": {"b": [1, "x"]}}, delivery_mode=2)
    assert decode_properties(encode_properties(props)).headers == props.headers
