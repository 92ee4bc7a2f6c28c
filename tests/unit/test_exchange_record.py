"""The Exchange record and the type registry."""

import pytest

from leveret import exchanges
from leveret.exchanges import (
    EXCHANGE_TYPES,
    DirectMatcher,
    Exchange,
    FanoutMatcher,
    HeadersMatcher,
    TopicMatcher,
)
from leveret.exchanges.exchange import ROUTING_TYPES


def test_registry_maps_the_builtin_types():
    assert {
        "direct": DirectMatcher,
        "fanout": FanoutMatcher,
        "topic": TopicMatcher,
        "headers": HeadersMatcher,
        "x-message-deduplication": FanoutMatcher,  # the plugin's type routes as fanout
    } == {name: EXCHANGE_TYPES[name] for name in ROUTING_TYPES}
    assert set(EXCHANGE_TYPES) == {*ROUTING_TYPES, "x-delayed-message"}
    assert "x-consistent-hash" not in EXCHANGE_TYPES


def test_a_delayed_exchange_routes_with_its_delayed_types_matcher():
    for type_name in ROUTING_TYPES:
        x = Exchange("x", "x-delayed-message", arguments={"x-delayed-type": type_name})
        assert type(x.matcher) is EXCHANGE_TYPES[type_name]
        assert x.type == "x-delayed-message"


def test_defaults_and_matcher_per_type():
    for type_name in ROUTING_TYPES:
        cls = EXCHANGE_TYPES[type_name]
        x = Exchange("x", type_name)
        assert (x.name, x.type, x.durable, x.auto_delete, x.internal) == (
            "x",
            type_name,
            False,
            False,
            False,
        )
        assert x.arguments == {} and x.vhost == "/"
        assert type(x.matcher) is cls
    assert Exchange("a", "direct").matcher is not Exchange("b", "direct").matcher


def test_arguments_are_copied_and_slots_only():
    args = {"alternate-exchange": "ae"}
    x = Exchange("x", "topic", True, True, True, args, vhost="v")
    args["alternate-exchange"] = "changed"
    assert (x.durable, x.auto_delete, x.internal, x.vhost) == (True, True, True, "v")
    assert x.alternate_exchange == "ae"
    with pytest.raises(AttributeError):
        x.unexpected = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "args,expected",
    [({}, None), ({"alternate-exchange": "ae"}, "ae"), ({"alternate-exchange": b"ae"}, "ae")],
)
def test_alternate_exchange(args, expected):
    assert Exchange("x", "direct", arguments=args).alternate_exchange == expected


def test_unknown_type_is_refused():
    with pytest.raises(ValueError, match="x-nope"):
        Exchange("x", "x-nope")


def test_public_names():
    for name in ("EXCHANGE_TYPES", "Exchange", "route", "DirectMatcher", "TopicMatcher"):
        assert name in exchanges.__all__ and hasattr(exchanges, name)
