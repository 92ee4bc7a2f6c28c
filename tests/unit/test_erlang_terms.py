"""Field values printed as Erlang prints them in RabbitMQ's error texts (model/erlang_terms).

The expected strings are RabbitMQ 3.10.8's, seen in its x-match and equivalence errors
(tests/integration/test_differential_bindings.py checks them on both brokers)."""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.model import field_table as ft
from leveret.model.erlang_terms import field_term, float_text, pretty, write
from leveret.model.errors import PRECONDITION_FAILED, ChannelError


@pytest.mark.parametrize("value,text", [
    (1e100, "1.0e100"), (-0.0, "-0.0"), (100.0, "100.0"), (1e-07, "1.0e-7"),
    (123456789.0, "123456789.0"), (1e15, "1.0e15"), (1234567890123456.0, "1234567890123456.0"),
    (12345678901234567.0, "1.2345678901234568e16"), (0.0001, "0.0001"), (0.00012, "1.2e-4"),
    (5e-324, "5.0e-324"), (100000.0, "1.0e5"), (12345.678, "12345.678"), (0.0, "0.0"),
])
def test_floats_in_erlangs_shortest_form(value: float, text: str) -> None:
    assert float_text(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_printed_float_reads_back(value: float) -> None:
    text = float_text(value)
    assert float(text) == value and "." in text.split("e")[0]


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_a_32_bit_float_prints_as_the_double_it_is(value: float) -> None:
    assert float(write(field_term(ft.Float(value)))) == struct.unpack(
        ">f", struct.pack(">f", value))[0]


@pytest.mark.parametrize("value,text", [
    (ft.SignedInt(1), "1"), (True, "true"), (None, "undefined"), ("a\"b\\c\n", '<<"a\\"b\\\\c\\n">>'),
    ("café", '<<"café">>'), (bytearray(b"ab\x00"), "<<97,98,0>>"), (b"\xff", "<<255>>"),
    (datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), "1577836800"),
    (Decimal("1.50"), "{2,150}"), (Decimal("-3"), "{0,4294967293}"),
    ([ft.Long(1), "s"], '[{long,1},{longstr,<<"s">>}]'),
    ([1, ft.Byte(2)], "[{long,1},{byte,2}]"),  # an int from JSON is a long
    ({"n": {"m": None}}, '[{<<"n">>,table,[{<<"m">>,void,undefined}]}]'),
])
def test_write(value: object, text: str) -> None:
    assert write(field_term(value)) == text


def test_pretty_fits_80_columns_as_io_lib_pretty_does() -> None:
    # One line when it fits; else a nested term a line, atoms and binaries filling a line.
    assert pretty(field_term([ft.Byte(1)]), 40) == "[{byte,1}]"
    assert pretty(field_term({"a": ft.SignedInt(1), "b": "x"}), 40) == (
        '[{<<"a">>,signedint,1},\n' + " " * 41 + '{<<"b">>,longstr,<<"x">>}]')
    assert pretty(field_term({"a": "b" * 70, "c": ft.Long(1)}), 1) == (
        '[{<<"a">>,longstr,\n   <<"' + "b" * 70 + '">>},\n  {<<"c">>,long,1}]')
    assert pretty(field_term([[ft.Long(i) for i in range(3)] * 4]), 40).startswith(
        "[{array,\n" + " " * 42 + "[{long,0},\n" + " " * 43 + "{long,1},\n")


def test_a_reply_text_past_255_bytes_is_cut_as_rabbitmq_cuts_it() -> None:
    assert ChannelError(PRECONDITION_FAILED, "x" * 300).wire_text == (
        "PRECONDITION_FAILED - " + "x" * 230 + "...")
    assert len(ChannelError(PRECONDITION_FAILED, "é" * 200).wire_text.encode()) <= 255
    short = ChannelError(PRECONDITION_FAILED, "x" * 233)
    assert short.wire_text == short.reply_text  # 255 bytes exactly: kept whole
