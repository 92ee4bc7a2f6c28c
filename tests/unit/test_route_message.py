"""``route_message``, the publish's way into the router: compiled and pure build alike.

The router, the direct matcher and the binding set are compiled (``node/compiled.py``); the
pure modules stay the oracle. Hypothesis builds the same exchange graph twice, once from each
build's router and direct matcher (bindings to queues and exchanges, alternate exchanges, bind
and unbind), routes the same keys, CC keys and headers through both, and compares the queues
reached; both must also agree with ``route`` given the headers decoded. And headers are
decoded only when an exchange on the way may match on them: a malformed table does not stop
a direct exchange bound only to queues (RabbitMQ decodes every publish's properties, but
Leveret has already checked their shape by then).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.exchanges import Exchange
from leveret.tests.unit import compiled_build

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
pytestmark = pytest.mark.timeout(900)  # the first use may build the compiled modules

EXCHANGES = ("a", "b", "c", "d")
QUEUES = ("q1", "q2", "q3")
KEYS = ("k", "j", "")


class Q:
    def __init__(self, name: str) -> None:
        self.name = name


class Msg:
    """What routing reads of a message; counts header decodes, or refuses them."""

    def __init__(self, routing_key: str, headers: dict[str, Any] | None,
                 malformed: bool = False) -> None:
        self.routing_key = routing_key
        self._headers = headers
        self._malformed = malformed
        self.decoded = 0

    @property
    def headers(self) -> dict[str, Any] | None:
        self.decoded += 1
        if self._malformed:
            raise ValueError("malformed content properties")
        return self._headers


@pytest.fixture(scope="module")
def builds() -> tuple[tuple[ModuleType, ModuleType], tuple[ModuleType, ModuleType]]:
    """(router, direct) from the sources, and compiled from the same sources."""
    return ((compiled_build.pure("leveret.exchanges.router"),
             compiled_build.pure("leveret.exchanges.direct")),
            (compiled_build.compiled_module("leveret.exchanges.router"),
             compiled_build.compiled_module("leveret.exchanges.direct")))


types = st.sampled_from(("direct", "direct", "fanout", "topic", "headers"))
binding = st.tuples(st.sampled_from(EXCHANGES), st.sampled_from((*EXCHANGES, *QUEUES)),
                    st.sampled_from((*KEYS, "#", "k.*")), st.booleans())  # bind or unbind
graphs = st.tuples(st.lists(types, min_size=len(EXCHANGES), max_size=len(EXCHANGES)),
                   st.lists(st.sampled_from((None, *EXCHANGES, "missing")),
                            min_size=len(EXCHANGES), max_size=len(EXCHANGES)),
                   st.lists(binding, max_size=12))
publishes = st.lists(st.tuples(st.sampled_from(EXCHANGES), st.sampled_from(KEYS),
                               st.lists(st.sampled_from(KEYS), max_size=2).map(tuple),
                               st.sampled_from((None, {}, {"x-match": "any"}, {"h": 1}))),
                     min_size=1, max_size=6)


def build_graph(direct: ModuleType, shape: Any) -> tuple[dict[str, Exchange], dict[str, Q]]:
    kinds, alternates, bindings = shape
    queues = {name: Q(name) for name in QUEUES}
    exchanges: dict[str, Exchange] = {}
    for name, kind, ae in zip(EXCHANGES, kinds, alternates, strict=True):
        ex = exchanges[name] = Exchange(name, kind, arguments={"alternate-exchange": ae}
                                        if ae is not None else {})
        if kind == "direct":
            ex.matcher = direct.DirectMatcher()  # this build's
    for source, dest, key, bind in bindings:
        target = exchanges.get(dest) or queues[dest]
        matcher = exchanges[source].matcher
        args = {"x-match": "any", "h": 1} if exchanges[source].type == "headers" else {}
        if bind:
            matcher.bind(target, key, args)
        else:
            matcher.unbind(target, key, args)
    return exchanges, queues


@SETTINGS
@given(graphs, publishes)
def test_both_builds_route_alike(builds: Any, shape: Any, messages: Any) -> None:
    routed = []
    for router, direct in builds:
        exchanges, _ = build_graph(direct, shape)
        found = []
        for name, key, cc, headers in messages:
            dests = router.route_message(exchanges[name], Msg(key, headers), exchanges, cc)
            decoded = router.route(exchanges[name], key, headers, exchanges.get, cc)
            assert sorted(q.name for q in dests) == sorted(q.name for q in decoded)
            assert len({id(q) for q in dests}) == len(dests)  # each queue once
            found.append(sorted(q.name for q in dests))
        routed.append(found)
    assert routed[0] == routed[1]


@pytest.mark.parametrize("build", [0, 1], ids=["pure", "compiled"])
def test_headers_are_decoded_only_where_an_exchange_may_match_on_them(
        builds: Any, build: int) -> None:
    router, direct = builds[build]
    exchanges = {"x": Exchange("x", "direct"), "h": Exchange("h", "headers"),
                 "e2e": Exchange("e2e", "direct"), "ae": Exchange("ae", "direct", arguments={
                     "alternate-exchange": "h"})}
    for ex in exchanges.values():
        if ex.type == "direct":
            ex.matcher = direct.DirectMatcher()
    q = Q("q")
    exchanges["x"].matcher.bind(q, "k", {})
    exchanges["e2e"].matcher.bind(exchanges["x"], "k", {})
    exchanges["ae"].matcher.bind(q, "k", {})
    plain = Msg("k", None, malformed=True)
    assert list(router.route_message(exchanges["x"], plain, exchanges)) == [q]
    assert list(router.route_message(exchanges["x"], Msg("other", None, True), exchanges)) == []
    assert plain.decoded == 0
    routed_here = Msg("k", None, malformed=True)  # its AE is not needed
    assert list(router.route_message(exchanges["ae"], routed_here, exchanges)) == [q]
    assert routed_here.decoded == 0
    # A headers exchange, an E2E binding, an AE that is needed: decoded.
    for name, key in (("h", "k"), ("e2e", "k"), ("ae", "miss")):
        with pytest.raises(ValueError):
            router.route_message(exchanges[name], Msg(key, None, malformed=True), exchanges)
    policy = Exchange("p", "direct")
    policy.policy_alternate_exchange = "h"
    with pytest.raises(ValueError):
        router.route_message(policy, Msg("k", None, malformed=True), exchanges)


@pytest.mark.parametrize("build", [0, 1], ids=["pure", "compiled"])
def test_a_direct_route_is_the_prebuilt_tuple_and_follows_unbind(builds: Any, build: int) -> None:
    """No list per publish: the matcher's tuple itself, rebuilt when the bindings change."""
    router, direct = builds[build]
    ex = Exchange("x", "direct")
    ex.matcher = direct.DirectMatcher()
    q1, q2 = Q("q1"), Q("q2")
    ex.matcher.bind(q1, "k", {})
    ex.matcher.bind(q2, "k", {})
    first = router.route_message(ex, Msg("k", None), {})
    assert first is router.route_message(ex, Msg("k", None), {})
    assert list(first) == [q1, q2]
    ex.matcher.unbind(q1, "k", {})
    assert list(router.route_message(ex, Msg("k", None), {})) == [q2]
    assert list(first) == [q1, q2]  # a route handed out earlier is not changed under it
