"""The binding-set contract every exchange type shares (bind/unbind/listing/removal)."""

from __future__ import annotations

import pytest

from leveret.exchanges import (
    EXCHANGE_TYPES,
    DirectMatcher,
    Exchange,
    FanoutMatcher,
    HeadersMatcher,
    TopicMatcher,
)


class Q:
    """A queue stand-in that compares equal by name, to prove matchers use identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Q) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Q({self.name})"


MATCHERS = [DirectMatcher, FanoutMatcher, TopicMatcher, HeadersMatcher]


def routed(matcher, key="k", headers=None):
    return list(matcher.route(key, headers))


@pytest.mark.parametrize("cls", MATCHERS)
def test_bind_is_idempotent_and_unbind_reports_missing(cls):
    m = cls()
    q = Q("q")
    assert m.bind(q, "k", {}) is True
    assert m.bind(q, "k", {}) is False
    assert len(m) == 1
    assert m.unbind(q, "k", {}) is True
    assert m.unbind(q, "k", {}) is False
    assert len(m) == 0
    assert routed(m) == []


@pytest.mark.parametrize("cls", MATCHERS)
def test_destinations_are_compared_by_identity(cls):
    m = cls()
    a, b = Q("same"), Q("same")
    assert a == b
    assert m.bind(a, "k", {}) and m.bind(b, "k", {})
    assert len(m) == 2
    out = routed(m)
    assert len(out) == 2 and any(x is a for x in out) and any(x is b for x in out)
    assert m.unbind(a, "k", {})
    assert [x is b for x in routed(m)] == [True]


@pytest.mark.parametrize("cls", MATCHERS)
def test_arguments_differing_only_in_type_are_different_bindings(cls):
    m = cls()
    q = Q("q")
    assert m.bind(q, "k", {"v": 1})
    assert m.bind(q, "k", {"v": 1.0})
    assert m.bind(q, "k", {"v": True})
    assert not m.bind(q, "k", {"v": 1})
    assert len(m) == 3
    # one destination reached by three bindings is routed to once (headers: all match)
    assert len(routed(m, headers={"v": 1})) == 1


@pytest.mark.parametrize("cls", MATCHERS)
def test_same_queue_two_bindings_routes_once_and_survives_one_unbind(cls):
    m = cls()
    q = Q("q")
    m.bind(q, "k", {})
    m.bind(q, "k", {"x-extra": "x"})  # x- args do not affect headers routing
    assert routed(m) == [q]
    m.unbind(q, "k", {})
    assert routed(m) == [q]
    m.unbind(q, "k", {"x-extra": "x"})
    assert routed(m) == []


@pytest.mark.parametrize("cls", MATCHERS)
def test_remove_destination_drops_all_its_bindings(cls):
    m = cls()
    q, r = Q("q"), Q("r")
    m.bind(q, "k", {})
    m.bind(q, "other", {})
    m.bind(q, "k", {"a": 1})
    m.bind(r, "k", {})
    assert m.remove_destination(q) == 3
    assert m.remove_destination(q) == 0
    assert len(m) == 1
    assert [x is r for x in routed(m)] == [True]
    assert [(d, k, a) for d, k, a in m.bindings()] == [(r, "k", {})]


@pytest.mark.parametrize("cls", MATCHERS)
def test_bindings_lists_copies(cls):
    m = cls()
    q = Q("q")
    args = {"a": [1, 2]}
    m.bind(q, "k", args)
    args["b"] = 2  # the caller's dict is not the stored one
    listed = list(m.bindings())
    assert listed == [(q, "k", {"a": [1, 2]})]
    listed[0][2]["c"] = 3
    assert list(m.bindings()) == [(q, "k", {"a": [1, 2]})]


@pytest.mark.parametrize("cls", MATCHERS)
def test_exchange_destinations_are_counted(cls):
    m = cls()
    x = Exchange("x", "fanout")
    assert m.exchange_bindings == 0
    m.bind(x, "k", {})
    m.bind(x, "k2", {})
    m.bind(Q("q"), "k", {})
    assert m.exchange_bindings == 2
    m.unbind(x, "k", {})
    assert m.exchange_bindings == 1
    m.remove_destination(x)
    assert m.exchange_bindings == 0


@pytest.mark.parametrize("name", ["direct", "fanout", "topic"])
def test_non_headers_types_accept_any_binding(name):
    EXCHANGE_TYPES[name].validate_binding("#.*", {"x-match": "bogus"})
