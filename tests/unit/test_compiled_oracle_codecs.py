"""The field-table, property and content-assembly codecs: compiled and pure build alike.

As ``test_compiled_oracle.py`` does for the frame layer, each codec is loaded twice
(``compiled_build.py``): from its ``.py`` and as the extension module compiled from it. Both
get the same bytes, valid (what pamqp and our encoders write) and malformed (truncated,
flipped, inserted and random bytes, the fuzz tests' mangled payloads, the malformed property
lists of ``test_check_properties.py``). Values must come out equal and of the same wire type
(a decoded ``Byte`` is a class of its module, so types are compared by name), encodings byte
for byte, and errors with the same type and text.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands

from leveret.tests.unit import compiled_build
from leveret.tests.unit.test_check_properties import _headers, _nested
from leveret.tests.unit.test_fastpath import mangled_payloads
from leveret.tests.unit.test_fastpath import properties as property_lists
from leveret.tests.unit.test_field_table import tables

# The first test may build the compiled modules (minutes on a busy machine): a cap, not a budget.
pytestmark = pytest.mark.timeout(900)
SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
Pair = tuple[ModuleType, ModuleType]


def _pair(name: str) -> Pair:
    return compiled_build.pure(name), compiled_build.compiled_module(name)


@pytest.fixture(scope="module")
def field_table() -> Pair:
    return _pair("leveret.model.field_table")


@pytest.fixture(scope="module")
def props_codec() -> Pair:
    return _pair("leveret.model.properties")


@pytest.fixture(scope="module")
def assembler() -> Pair:
    return _pair("leveret.amqp.assembler")


def picture(value: Any) -> Any:
    """A value with the name of every nested type beside it: builds compare by this."""
    if isinstance(value, dict):
        return ("dict", sorted((k, picture(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [picture(v) for v in value])
    if isinstance(value, commands.Basic.Properties):
        return ("Properties", [(name, picture(getattr(value, name)))
                               for name in value.__slots__])
    if isinstance(value, float) and value != value:
        return (type(value).__name__, "nan")
    return (type(value).__name__, value)


_WIRE_TYPES = ("Byte", "UnsignedByte", "Short", "UnsignedShort", "SignedInt", "UnsignedInt",
               "Long", "UnsignedLong", "Float", "Timestamp")


def in_types_of(module: ModuleType, value: Any) -> Any:
    """``value`` with every wire-typed number rebuilt from ``module``'s own classes: each
    build tells wire types apart by its classes, so each must get values of its own."""
    if isinstance(value, dict):
        return {k: in_types_of(module, v) for k, v in value.items()}
    if isinstance(value, list):
        return [in_types_of(module, v) for v in value]
    name = type(value).__name__
    if name in _WIRE_TYPES:
        return getattr(module, name)(value)
    return value


def outcome(function: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What a call gives: a picture of its value, or its exception's type and text."""
    try:
        return "value", picture(function(*args))
    except Exception as exc:  # compared, not handled
        return "raised", (type(exc).__name__, str(exc))


def _mutate(data: bytes, how: int, pos: int, byte: int) -> bytes:
    if not data:
        return data
    pos %= len(data)
    return [data[:pos], data[:pos] + bytes([byte]) + data[pos + 1:],
            data[:pos] + bytes([byte]) + data[pos:], data[:pos] + data[pos + 1:]][how % 4]


# -- field tables -----------------------------------------------------------------


@SETTINGS
@given(table=tables, how=st.integers(0, 4), pos=st.integers(0, 4096), byte=st.integers(0, 255))
def test_tables_encode_and_decode_alike(field_table: Pair, table: dict[str, Any], how: int,
                                        pos: int, byte: int) -> None:
    py, c = field_table
    ours, theirs = in_types_of(c, table), in_types_of(py, table)
    encoded = outcome(py.encode_table, theirs)
    assert outcome(c.encode_table, ours) == encoded
    if encoded[0] != "value":
        return
    raw = py.encode_table(theirs)
    assert c.encode_table(ours) == raw  # bytes, not only equal pictures
    data = raw if how == 4 else _mutate(raw, how, pos, byte)
    for name in ("decode_table", "decode_array", "check_long_string", "check_short_string"):
        assert outcome(getattr(c, name), data) == outcome(getattr(py, name), data), name
    for name in ("decode_table", "decode_array"):  # the two that take a view as well
        view = memoryview(data)
        assert outcome(getattr(c, name), view) == outcome(getattr(py, name), view), name


@SETTINGS
@given(data=st.binary(max_size=200), depth=st.integers(0, 130))
@example(data=b"\x00\x00\x00\x06\x01aF\x00\x00\x00\x00", depth=127)  # at the depth limit
@example(data=b"\x00\x00\x00\x03\x01\xffI", depth=0)  # a key that is not UTF-8
@example(data=b"\x00\x00\x00\x0a\x01aD\x02\x00\x00\x00\x7b", depth=0)  # a decimal
@example(data=b"\x00\x00\x00\x0b\x01aT\x00\x00\x00\x00\x5f\x5e\x10\x00", depth=0)  # timestamp
def test_random_bytes_decode_alike(field_table: Pair, data: bytes, depth: int) -> None:
    py, c = field_table
    for name in ("decode_table", "decode_array"):
        assert outcome(getattr(c, name), data, depth) == outcome(getattr(py, name), data, depth)


@pytest.mark.parametrize("value", [
    0, -1, 127, 128, 255, 2**15, 2**31, 2**63 - 1, 2**63, 2**64, True, 1.5, float("inf"),
    "é", b"\xff", bytearray(b"\x00"), None, [1, [2, {"a": 3}]],
    decimal.Decimal("1.25"), decimal.Decimal("1e300"), decimal.Decimal("NaN"),
    datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC), object(),
])
def test_values_encode_alike(field_table: Pair, value: Any) -> None:
    py, c = field_table
    assert outcome(c.encode_value, value) == outcome(py.encode_value, value)
    assert outcome(c.type_name, value) == outcome(py.type_name, value)


# -- content properties ---------------------------------------------------------------

_MALFORMED_PROPERTIES = [
    b"", b"\x00", b"\x00\x01", b"\x10\x00", b"\x00\x40\x00\x00\x00\x01",
    b"\xa0\x00\x02ab\x00\x00\x00\x09\x01aZ", _headers(b"\x01aZ"), _headers(b"\x01aU\x00\x01"),
    _headers(b"\x05ab"), _headers(b"\x01aS\x00\x00\x00\x09ab"), _headers(b"\x01aA\x00\x00\x00\x01Z"),
    _headers(b"\x01\xffI\x00\x00\x00\x01"), _headers(_nested(3000)[:-1] + b"Z"),
    _headers(b"\x01aA" + struct.pack(">I", 9) + b"F" + struct.pack(">I", 4) + b"\x01b"),
    b"\x00\x02", b"\x80\x00\x02\xff\xfe", _headers(_nested(300)),
]


@SETTINGS
@given(props=property_lists, how=st.integers(0, 4), pos=st.integers(0, 4096),
       byte=st.integers(0, 255))
def test_property_lists_alike(props_codec: Pair, props: commands.Basic.Properties, how: int,
                              pos: int, byte: int) -> None:
    py, c = props_codec
    raw = py.encode_properties(props)
    assert c.encode_properties(props) == raw
    data = raw if how == 4 else _mutate(raw, how, pos, byte)
    for name in ("check_properties", "decode_properties"):
        assert outcome(getattr(c, name), data) == outcome(getattr(py, name), data), name


@pytest.mark.parametrize("raw", _MALFORMED_PROPERTIES)
def test_unusual_and_malformed_property_lists_alike(props_codec: Pair, raw: bytes) -> None:
    py, c = props_codec
    for name in ("check_properties", "decode_properties"):
        assert outcome(getattr(c, name), raw) == outcome(getattr(py, name), raw), name


@settings(max_examples=500, deadline=None)
@given(mangled_payloads())
def test_mangled_payloads_check_alike(props_codec: Pair, data: bytes) -> None:
    py, c = props_codec
    assert outcome(c.check_properties, data) == outcome(py.check_properties, data)


# -- content assembly -----------------------------------------------------------------

_HEAD = struct.Struct(">HHQ")
_steps = st.lists(st.one_of(
    st.tuples(st.just("start"), st.tuples(st.text(max_size=3), st.text(max_size=3),
                                          st.booleans())),
    st.tuples(st.just("header"), st.tuples(
        st.sampled_from([60, 60, 60, 50]), st.integers(0, 40) | st.just(2**64 - 1),
        st.sampled_from([b"\x00\x00", b"\x80\x00\x0atext/plain", b"\x10", b""]),
        st.integers(0, 64) | st.just(1 << 20))),
    st.tuples(st.just("body"), st.binary(max_size=20)),
    st.tuples(st.just("check_method"), st.none()),
    st.tuples(st.just("reset"), st.none()),
    st.tuples(st.just("whole"), st.tuples(st.integers(0, 40), st.binary(max_size=40),
                                          st.integers(0, 64))),
    st.tuples(st.just("raw_header"), st.binary(max_size=16)),
), max_size=12)


def _assemble(module: ModuleType, steps: list[tuple[str, Any]]) -> list[Any]:
    a = module.ContentAssembler()
    seen: list[Any] = []
    for step, arg in steps:
        if step == "start":
            call: Callable[[], Any] = lambda arg=arg: a.start(arg)  # noqa: E731
        elif step == "header":
            cls, size, props, max_size = arg
            payload = _HEAD.pack(cls, 0, size) + props
            call = lambda p=payload, m=max_size: a.header(p, m)  # noqa: E731
        elif step == "raw_header":
            call = lambda arg=arg: a.header(arg, 1 << 20)  # noqa: E731
        elif step == "body":
            call = lambda arg=arg: a.body(arg)  # noqa: E731
        elif step == "whole":
            size, body, max_size = arg
            header = _HEAD.pack(60, 0, size) + b"\x00\x00"
            call = lambda h=header, b=body, m=max_size: a.whole(("x", "k", False), h, b, m)  # noqa: E731
        else:
            call = getattr(a, step)
        seen.append((step, outcome(call), a.state))
    return seen


@SETTINGS
@given(steps=_steps)
def test_content_assembles_alike(assembler: Pair, steps: list[tuple[str, Any]]) -> None:
    py, c = assembler
    assert _assemble(c, steps) == _assemble(py, steps)
