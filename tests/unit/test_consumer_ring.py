"""The consumer ring with plain values, and against a naive model (hypothesis).

The model is the list-scanning ring the queue used before: consumers in
priority order; the first one in that order with credit takes the message and
moves behind its equal-priority peers; a consumer found without credit is set
aside and rejoins behind its peers when it gets credit back (RabbitMQ's
block/unblock). The ring must pick exactly the same consumers.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.queues.consumer_ring import USE_HALF_LIFE, ConsumerRing


class C:
    def __init__(self, name: str, priority: int = 0, credit: int = 1_000_000) -> None:
        self.name = name
        self.priority = priority
        self.credit = credit

    def can_take(self) -> bool:
        return self.credit > 0

    def __repr__(self) -> str:
        return self.name


def turns(ring: ConsumerRing[C], n: int) -> list[str]:
    out = []
    for _ in range(n):
        c = ring.take_turn()
        if c is None:
            break
        c.credit -= 1
        out.append(c.name)
    return out


def test_round_robin_within_a_priority_and_priority_first() -> None:
    ring: ConsumerRing[C] = ConsumerRing()
    a, b, low, high = C("a"), C("b"), C("low", -1), C("high", 5, credit=2)
    for c in (a, low, b, high):
        ring.add(c)
    assert ring.members() == [high, a, b, low]
    assert turns(ring, 6) == ["high", "high", "a", "b", "a", "b"]
    assert ring.parked == {high: None}


def test_a_consumer_without_credit_is_parked_and_rejoins_behind_its_peers() -> None:
    ring: ConsumerRing[C] = ConsumerRing()
    a, b, c = C("a", credit=1), C("b"), C("c")
    for x in (a, b, c):
        ring.add(x)
    assert turns(ring, 4) == ["a", "b", "c", "b"]
    assert a in ring.parked
    a.credit = 1
    assert ring.unpark(a) and not ring.unpark(a)
    assert turns(ring, 3) == ["c", "b", "a"]  # ring was [c, b] when a came back


def test_a_channels_consumers_rejoin_in_the_order_they_were_parked() -> None:
    """unpark_those: a channel's room is back; park_behind: unblocked while its channel is
    still suspended, blocked again at once behind the others (RabbitMQ's unblock)."""
    ring: ConsumerRing[C] = ConsumerRing()
    zz, aa, mm, bb, other = (C(n, credit=0) for n in ("zz", "aa", "mm", "bb", "other"))
    for c in (zz, aa, mm, bb, other):
        ring.add(c)
    assert turns(ring, 1) == []
    assert list(ring.parked) == [zz, aa, mm, bb, other]
    ring.park_behind({zz, mm, bb})
    assert list(ring.parked) == [aa, other, zz, mm, bb]
    for c in (zz, aa, mm, bb, other):
        c.credit = 1
    aa.credit = 0  # full at its own prefetch: stays parked
    assert ring.unpark_those({zz, aa, mm, bb}) is True
    assert list(ring.parked) == [aa, other]
    assert turns(ring, 5) == ["zz", "mm", "bb"]
    assert ring.unpark_those({aa}) is False


def test_nobody_with_credit() -> None:
    ring: ConsumerRing[C] = ConsumerRing()
    assert ring.take_turn() is None
    x = C("x", credit=0)
    ring.add(x)
    assert ring.take_turn() is None and ring.parked == {x: None} and len(ring) == 1
    x.credit = 1
    assert ring.unpark_all() and ring.take_turn() is x


def test_remove_ready_parked_and_standby() -> None:
    ring: ConsumerRing[C] = ConsumerRing()
    a, b = C("a", 1), C("b", credit=0)
    ring.add(a)
    ring.add(b)
    ring.take_turn()
    ring.take_turn()  # b parked
    assert ring.remove(b) is None and b not in ring and len(ring) == 1
    assert ring.remove(a) is None and len(ring) == 0 and ring.members() == []
    assert ring.remove(a) is None  # twice is harmless


def test_single_active_consumer_fails_over_in_arrival_order() -> None:
    ring: ConsumerRing[C] = ConsumerRing()
    a, b, c = C("a"), C("b", 9), C("c")
    assert ring.add(a, True) and not ring.add(b, True) and not ring.add(c, True)
    assert ring.standby == [b, c] and turns(ring, 2) == ["a", "a"]
    assert ring.remove(c) is None  # a standby leaving changes nothing
    assert ring.remove(a) is b and ring.members() == [b] and ring.standby == []


class Model:
    """The naive ring: a list in priority order, scanned on every turn."""

    def __init__(self) -> None:
        self.ready: list[C] = []
        self.parked: list[C] = []

    def _insert(self, c: C) -> None:
        i = len(self.ready)
        for j, other in enumerate(self.ready):
            if other.priority < c.priority:
                i = j
                break
        self.ready.insert(i, c)

    def add(self, c: C) -> None:
        self._insert(c)

    def remove(self, c: C) -> None:
        for group in (self.ready, self.parked):
            if c in group:
                group.remove(c)

    def unpark(self, c: C) -> None:
        if c in self.parked:
            self.parked.remove(c)
            self._insert(c)

    def take_turn(self) -> C | None:
        while self.ready:
            for c in self.ready:
                if c.can_take():
                    self.ready.remove(c)
                    self._insert(c)
                    return c
                # the first one in order without credit is set aside, then look again
                self.ready.remove(c)
                self.parked.append(c)
                break
        return None


ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 3)),
    st.tuples(st.just("remove"), st.integers(0, 30)),
    st.tuples(st.just("credit"), st.integers(0, 30), st.integers(0, 3)),
    st.tuples(st.just("turns"), st.integers(1, 8)),
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(ops=ops)
def test_ring_picks_what_the_naive_model_picks(ops: list[tuple]) -> None:
    ring: ConsumerRing[C] = ConsumerRing()
    model = Model()
    ring_side: list[C] = []  # the same consumers twice: one set per side
    model_side: list[C] = []
    for op in ops:
        if op[0] == "add":
            n = len(ring_side)
            for side, target in ((ring_side, ring), (model_side, model)):
                c = C(f"c{n}", op[1], op[2])
                side.append(c)
                target.add(c)
        elif op[0] == "remove" and ring_side:
            i = op[1] % len(ring_side)
            ring.remove(ring_side[i])
            model.remove(model_side[i])
        elif op[0] == "credit" and ring_side:
            i = op[1] % len(ring_side)
            ring_side[i].credit = model_side[i].credit = op[2]
            ring.unpark(ring_side[i])  # what settling a delivery does
            model.unpark(model_side[i])
        elif op[0] == "turns":
            got = []
            want = []
            for _ in range(op[1]):
                r, m = ring.take_turn(), model.take_turn()
                got.append(r and r.name)
                want.append(m and m.name)
                for c in (r, m):
                    if c is not None:
                        c.credit -= 1
            assert got == want
        members = ring.members()
        assert sorted(c.name for c in members) == sorted(c.name for c in model.ready + model.parked)
        assert [c.priority for c in members] == sorted((c.priority for c in members), reverse=True)
        assert len(ring) == len(model.ready) + len(model.parked)
        assert {c.name for c in ring.parked} == {c.name for c in model.parked}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_utilisation_is_a_time_average_of_could_deliver_at_once() -> None:
    """Blocked (every consumer out of credit while a message waits) counts 0, otherwise 1,
    averaged with a half-life of USE_HALF_LIFE; a fresh first consumer starts at 1.0."""
    clock = _Clock()
    ring: ConsumerRing[C] = ConsumerRing(clock)
    c = C("c")
    ring.add(c)
    clock.now += 10
    assert ring.use.value() == 1.0
    c.credit = 0
    assert ring.take_turn() is None  # a message waits, no credit: blocked from now
    clock.now += USE_HALF_LIFE
    assert ring.use.value() == pytest.approx(0.5)
    c.credit = 1
    assert ring.unpark(c)  # an ack gave credit back
    clock.now += USE_HALF_LIFE
    assert ring.use.value() == pytest.approx(0.75)
    ring.remove(c)
    ring.add(c)
    assert ring.use.value() == 1.0
