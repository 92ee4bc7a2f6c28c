"""Routing across exchange-to-exchange bindings and alternate exchanges."""

from __future__ import annotations

import pytest

from leveret.exchanges import Exchange, route
from leveret.exchanges.router import explain


class Q:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Q({self.name})"


class Graph:
    """A few exchanges by name, with the lookup the router needs."""

    def __init__(self) -> None:
        self.exchanges: dict[str, Exchange] = {}
        self.lookups: list[str] = []

    def x(self, name: str, type: str = "direct", ae: str | bytes | None = None) -> Exchange:
        args = {"alternate-exchange": ae} if ae is not None else {}
        ex = self.exchanges[name] = Exchange(name, type, arguments=args)
        return ex

    def lookup(self, name: str) -> Exchange | None:
        self.lookups.append(name)
        return self.exchanges.get(name)

    def route(self, name: str, key: str, headers=None, cc=()) -> list:
        return route(self.exchanges[name], key, headers, self.lookup, cc)


def names(queues) -> list[str]:
    return sorted(q.name for q in queues)


def test_plain_exchange_returns_its_queues():
    g = Graph()
    x = g.x("x")
    q = Q("q")
    x.matcher.bind(q, "k", {})
    assert g.route("x", "k") == [q]
    assert g.route("x", "other") == []
    assert g.lookups == []


def test_exchange_to_exchange_chain_uses_same_key_and_headers():
    g = Graph()
    a, b, c = g.x("a", "fanout"), g.x("b", "topic"), g.x("c", "headers")
    a.matcher.bind(b, "", {})
    b.matcher.bind(c, "k.*", {})
    qb, qc = Q("qb"), Q("qc")
    b.matcher.bind(qb, "k.one", {})
    c.matcher.bind(qc, "", {"h": 1})
    assert names(g.route("a", "k.one", {"h": 1})) == ["qb", "qc"]
    assert names(g.route("a", "k.two", {"h": 1})) == ["qc"]
    assert names(g.route("a", "k.two", {"h": 2})) == []
    assert names(g.route("a", "z", {"h": 1})) == []


def test_diamond_gives_one_copy():
    g = Graph()
    top, left, right = g.x("top", "fanout"), g.x("left", "fanout"), g.x("right", "fanout")
    q, only_left = Q("q"), Q("only_left")
    top.matcher.bind(left, "", {})
    top.matcher.bind(right, "", {})
    top.matcher.bind(q, "", {})
    left.matcher.bind(q, "", {})
    right.matcher.bind(q, "", {})
    left.matcher.bind(only_left, "", {})
    out = g.route("top", "k")
    assert len(out) == 2 and names(out) == ["only_left", "q"]


def test_cycle_terminates_and_reaches_every_queue_once():
    g = Graph()
    a, b, c = g.x("a", "fanout"), g.x("b", "fanout"), g.x("c", "fanout")
    a.matcher.bind(b, "", {})
    b.matcher.bind(c, "", {})
    c.matcher.bind(a, "", {})
    for ex in (a, b, c):
        ex.matcher.bind(Q("q" + ex.name), "", {})
    assert names(g.route("b", "")) == ["qa", "qb", "qc"]


def test_self_binding_is_harmless():
    g = Graph()
    a = g.x("a", "fanout")
    a.matcher.bind(a, "", {})
    a.matcher.bind(Q("q"), "", {})
    assert names(g.route("a", "")) == ["q"]


def test_alternate_exchange_used_only_when_unroutable():
    g = Graph()
    x = g.x("x", ae="ae")
    ae = g.x("ae", "fanout")
    q, spill = Q("q"), Q("spill")
    x.matcher.bind(q, "k", {})
    ae.matcher.bind(spill, "", {})
    assert g.route("x", "k") == [q]
    assert g.lookups == []  # routed: the AE is not even looked up
    assert g.route("x", "other") == [spill]
    assert g.lookups == ["ae"]


def test_alternate_exchange_name_may_be_bytes():
    g = Graph()
    g.x("x", ae=b"ae")
    g.x("ae", "fanout").matcher.bind(Q("spill"), "", {})
    assert names(g.route("x", "k")) == ["spill"]


def test_missing_alternate_exchange_is_skipped():
    g = Graph()
    g.x("x", ae="nowhere")
    assert g.route("x", "k") == []
    assert g.lookups == ["nowhere"]


def test_alternate_exchanges_chain():
    g = Graph()
    g.x("x", ae="ae1")
    g.x("ae1", "direct", ae="ae2").matcher.bind(Q("ae1q"), "only-this", {})
    g.x("ae2", "fanout").matcher.bind(Q("ae2q"), "", {})
    assert names(g.route("x", "k")) == ["ae2q"]
    assert names(g.route("x", "only-this")) == ["ae1q"]


def test_alternate_exchange_cycle_terminates():
    g = Graph()
    g.x("x", ae="y")
    g.x("y", ae="z")
    g.x("z", ae="x")
    assert g.route("x", "k") == []
    assert g.lookups == ["y", "z", "x"]


def test_alternate_exchange_applies_to_exchanges_reached_by_e2e():
    g = Graph()
    src = g.x("src", "fanout")
    inner = g.x("inner", "direct", ae="inner-ae")
    src.matcher.bind(inner, "", {})
    inner.matcher.bind(Q("hit"), "k", {})
    g.x("inner-ae", "fanout").matcher.bind(Q("inner-spill"), "", {})
    assert names(g.route("src", "k")) == ["hit"]
    assert names(g.route("src", "miss")) == ["inner-spill"]


def test_own_alternate_exchange_not_used_when_only_an_exchange_matched():
    # RabbitMQ tests "no destinations", not "no queues": src matched inner, so
    # src's AE stays unused even though inner routes nowhere.
    g = Graph()
    src = g.x("src", "fanout", ae="src-ae")
    inner = g.x("inner", "direct")
    src.matcher.bind(inner, "", {})
    inner.matcher.bind(Q("hit"), "k", {})
    g.x("src-ae", "fanout").matcher.bind(Q("src-spill"), "", {})
    assert names(g.route("src", "miss")) == []
    assert "src-ae" not in g.lookups


def test_alternate_exchange_already_visited_is_not_routed_twice():
    g = Graph()
    a = g.x("a", "fanout")
    b = g.x("b", "direct", ae="a")
    a.matcher.bind(b, "", {})
    a.matcher.bind(Q("qa"), "", {})
    assert names(g.route("a", "k")) == ["qa"]


def test_extra_routing_keys_are_unioned_and_deduplicated():
    g = Graph()
    x = g.x("x", ae="ae")
    q1, q2, both = Q("q1"), Q("q2"), Q("both")
    x.matcher.bind(q1, "k1", {})
    x.matcher.bind(q2, "k2", {})
    x.matcher.bind(both, "k1", {})
    x.matcher.bind(both, "k2", {})
    g.x("ae", "fanout").matcher.bind(Q("spill"), "", {})
    out = g.route("x", "k1", cc=["k2", "k1"])
    assert len(out) == 3 and names(out) == ["both", "q1", "q2"]
    assert names(g.route("x", "none", cc=["k2"])) == ["both", "q2"]
    assert names(g.route("x", "none", cc=["nope"])) == ["spill"]


def test_extra_routing_keys_follow_e2e_bindings():
    g = Graph()
    a, b = g.x("a", "direct"), g.x("b", "direct")
    a.matcher.bind(b, "cc-key", {})
    b.matcher.bind(Q("deep"), "rk", {})
    assert names(g.route("a", "rk", cc=["cc-key"])) == ["deep"]
    assert names(g.route("a", "rk")) == []


@pytest.mark.parametrize("with_ae", [False, True])
def test_fast_path_result_is_a_fresh_list(with_ae):
    g = Graph()
    x = g.x("x", "fanout", ae="ae" if with_ae else None)
    q = Q("q")
    x.matcher.bind(q, "", {})
    out = g.route("x", "")
    out.append("junk")
    assert g.route("x", "") == [q]


def test_explain_walks_the_same_graph_as_route():
    """``explain`` (message tracing) reports each exchange, how it was reached and what it
    matched; the queues it ends on are the ones ``route`` returns."""
    g = Graph()
    src = g.x("src", "fanout")
    inner = g.x("inner", "direct", ae="inner-ae")
    src.matcher.bind(inner, "", {})
    inner.matcher.bind(Q("hit"), "k", {})
    g.x("inner-ae", "fanout").matcher.bind(Q("spill"), "", {})
    for key, queues in (("k", ["hit"]), ("miss", ["spill"])):
        steps = explain(g.exchanges["src"], key, None, g.lookup)
        reached = sorted(dest for _, _, matched in steps for kind, dest in matched
                         if kind == "queue")
        assert reached == names(g.route("src", key)) == queues
    assert explain(g.exchanges["src"], "miss", None, g.lookup) == (
        ("src", "published", (("exchange", "inner"),)),
        ("inner", "exchange-binding", ()),
        ("inner-ae", "alternate-exchange", (("queue", "spill"),)),
    )
    assert explain(g.exchanges["inner-ae"], "x", None, g.lookup) == (
        ("inner-ae", "published", (("queue", "spill"),)),)
