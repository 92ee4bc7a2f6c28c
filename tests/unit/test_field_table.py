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

from leveret.model import field_table as ft
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
    assert ft.same_typed(ft.SignedInt(1), ft.SignedInt(1))
    assert not ft.same_typed(ft.SignedInt(1), ft.Long(1))


def test_message_headers_round_trip_through_pamqp_with_their_types() -> None:
    """pamqp uses these codecs for headers once installed (model/properties does it)."""
    headers = {"z": ft.SignedInt(7), "a": ft.Long(1), "f": ft.Float(0.5), "n": {"x": ft.Short(2)}}
    raw = encode_properties(commands.Basic.Properties(headers=headers))
    decoded = decode_properties(raw).headers
    assert typed(decoded) == typed(headers)
    assert list(decoded) == ["z", "a", "f", "n"]  # pamqp alone would sort the keys
