"""Headers exchange: the four x-match modes, x- arguments, value comparison, validation."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest

from leveret.exchanges import HeadersMatcher
from leveret.model import field_table as ft
from leveret.model.errors import PRECONDITION_FAILED, ChannelError


def hits(binding: dict, headers: dict | None) -> bool:
    m = HeadersMatcher()
    q = object()
    m.bind(q, "", binding)
    out = list(m.route("ignored", headers))
    assert out in ([], [q])
    return out == [q]


@pytest.mark.parametrize(
    "binding,headers,expected",
    [
        # all (explicit and default)
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 0}, True),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "y"}, False),
        ({"a": 1, "b": "x"}, {"a": 1}, False),
        ({"a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
        # any
        ({"x-match": "any", "a": 1, "b": "x"}, {"b": "x"}, True),
        ({"x-match": "any", "a": 1, "b": "x"}, {"a": 2, "b": "y"}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, {}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, None, False),
        # empty bindings: all matches everything, any matches nothing
        ({}, None, True),
        ({"x-match": "all"}, {"z": 1}, True),
        ({"x-match": "any"}, {"z": 1}, False),
        # x- arguments are ignored by all/any ...
        ({"x-match": "all", "x-tag": "t"}, {}, True),
        ({"x-match": "all", "x-tag": "t", "a": 1}, {"a": 1}, True),
        ({"x-match": "any", "x-tag": "t"}, {"x-tag": "t"}, False),
        ({"x-match": "any", "x-tag": "t", "a": 1}, {"x-tag": "t"}, False),
        # ... and matched by the -with-x modes
        ({"x-match": "all-with-x", "x-tag": "t", "a": 1}, {"a": 1}, False),
        ({"x-match": "all-with-x", "x-tag": "t", "a": 1}, {"a": 1, "x-tag": "t"}, True),
        ({"x-match": "all-with-x", "x-tag": "t"}, {"x-tag": "u"}, False),
        ({"x-match": "any-with-x", "x-tag": "t", "a": 1}, {"x-tag": "t"}, True),
        ({"x-match": "any-with-x", "x-tag": "t", "a": 1}, {"x-tag": "u", "a": 2}, False),
        ({"x-match": "any-with-x"}, {"x-match": "any-with-x"}, False),
        # x-match itself never takes part, even in -with-x modes
        ({"x-match": "all-with-x"}, {}, True),
        # void binding value = presence only
        ({"a": None}, {"a": "anything"}, True),
        ({"a": None}, {"a": None}, True),
        ({"a": None}, {"b": 1}, False),
        ({"x-match": "any", "a": None, "b": 2}, {"a": 0}, True),
        ({"a": "x"}, {"a": None}, False),
    ],
)
def test_match_modes(binding, headers, expected):
    assert hits(binding, headers) is expected


@pytest.mark.parametrize(
    "bound,sent,expected",
    [
        (1, 1.0, True),  # Erlang ==: numeric comparison across int/float
        (2.5, 2.5, True),
        (1, 2, False),
        (True, 1, False),  # booleans are atoms in RabbitMQ, never numbers
        (1, True, False),
        (False, 0, False),
        (True, True, True),
        ("abc", b"abc", True),  # longstr and byte array are both binaries
        ("abc", "abd", False),
        ("1", 1, False),
        (Decimal("1.5"), Decimal("1.5"), True),
        (Decimal("1.0"), Decimal("1.00"), False),  # {Scale, Value} differ
        (Decimal(1), 1, False),
        (datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), 1577836800, True),
        (1577836800, datetime.datetime(2020, 1, 1), True),  # naive datetime taken as UTC
        # Arrays and tables compare their elements' wire types too (RabbitMQ keeps
        # {Type, Value}); a plain int (from JSON) is a long.
        ([1, "a"], [1, b"a"], True),
        ([1], [ft.Long(1)], True),
        ([1], [ft.SignedInt(1)], False),
        ([1, "a"], [1.0, b"a"], False),
        ([ft.SignedInt(1)], [ft.Long(1)], False),
        ([ft.Long(1)], [ft.Long(1)], True),
        (["a"], [bytearray(b"a")], False),
        ([1, 2], [2, 1], False),
        ({"k": 1}, {"k": 1}, True),
        ({"k": 1}, {"k": 2}, False),
        ({"k": ft.SignedInt(1)}, {"k": ft.Long(1)}, False),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),  # nested tables keep their wire order
        ([ft.Float(1.5)], [1.5], False),
    ],
)
def test_value_comparison(bound, sent, expected):
    assert hits({"h": bound}, {"h": sent}) is expected


def test_routes_each_destination_once_in_bind_order():
    m = HeadersMatcher()
    q, r = object(), object()
    m.bind(r, "", {"x-match": "any", "a": 1})
    m.bind(q, "", {"x-match": "any", "b": 1})
    m.bind(r, "", {"x-match": "any", "b": 1})
    assert list(m.route("", {"a": 1, "b": 1})) == [r, q]
    assert list(m.route("", {"b": 1})) == [q, r]
    m.unbind(q, "", {"x-match": "any", "b": 1})
    assert list(m.route("", {"b": 1})) == [r]


def test_routing_key_is_not_used():
    m = HeadersMatcher()
    q = object()
    m.bind(q, "some-key", {"a": 1})
    assert list(m.route("other-key", {"a": 1})) == [q]


def test_unvalidated_bad_x_match_routes_as_all():
    assert hits({"x-match": "bogus", "a": 1, "b": 2}, {"a": 1}) is False
    assert hits({"x-match": "bogus", "a": 1, "b": 2}, {"a": 1, "b": 2}) is True


@pytest.mark.parametrize("value", ["all", "any", "all-with-x", "any-with-x", b"any"])
def test_validate_accepts_the_four_modes(value):
    HeadersMatcher.validate_binding("", {"x-match": value, "a": 1})
    HeadersMatcher().validate_binding("", {"a": 1})  # absent is allowed


@pytest.mark.parametrize(
    "value,detail",
    [
        (
            "ALL",
            'Invalid x-match field value <<"ALL">>; expected all, any, all-with-x, or any-with-x',
        ),
        (
            "",
            'Invalid x-match field value <<"">>; expected all, any, all-with-x, or any-with-x',
        ),
        (ft.Long(5), "Invalid x-match field type long (value 5); expected longstr"),
        (ft.SignedInt(5), "Invalid x-match field type signedint (value 5); expected longstr"),
        (ft.Float(2.5), "Invalid x-match field type float (value 2.5); expected longstr"),
        ([ft.Long(1), "s"],
         'Invalid x-match field type array (value [{long,1},{longstr,<<"s">>}]); expected longstr'),
        (True, "Invalid x-match field type bool (value true); expected longstr"),
    ],
)
def test_validate_refuses_bad_x_match(value, detail):
    with pytest.raises(ChannelError) as info:
        HeadersMatcher.validate_binding("", {"x-match": value})
    assert info.value.code == PRECONDITION_FAILED
    assert info.value.detail == detail
    assert info.value.reply_text == "PRECONDITION_FAILED - " + detail
