"""The Store contract, run against every implementation (MemoryStore and LmdbStore).

Tests that need a restart reopen the LMDB store on the same directory; for the
memory store (nothing survives) they check the same facts on the open store.
"""

from __future__ import annotations

import datetime
import decimal
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeAlias

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leveret.model.message import Message
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import (
    BindingDef,
    ExchangeDef,
    PolicyDef,
    QueueDef,
    QueueStats,
    StoreError,
)

from .store_harness import recording

AnyStore: TypeAlias = MemoryStore | LmdbStore
PERSISTENT_PROPS = b"\x10\x00\x02"  # flags: delivery-mode present; delivery-mode = 2

FIELD_TABLE: dict[str, Any] = {
    "str": "héllo", "empty": "", "int": 7, "neg": -(2**63), "big": 2**64 - 1,
    "float": 0.1, "negzero": -0.0, "inf": math.inf, "true": True, "false": False, "none": None,
    "bytes": b"\x00\xff", "bytearray": bytearray(b"ab"), "decimal": decimal.Decimal("-1.2300"),
    "ts": datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC),
    "naive": datetime.datetime(2001, 1, 1, 0, 0, 1),
    "list": [1, "a", [b"x", {"k": None}], decimal.Decimal(5)],
    "nested": {"m": {"b": "not a tag"}, "f": 1.5, "": []},
}


class Stores:
    """Opens the store under test; ``reopen`` simulates a restart where one is possible."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        self.path = path
        self.opened: list[AnyStore] = []

    @property
    def durable(self) -> bool:
        return self.kind == "lmdb"

    def open(self) -> AnyStore:
        store: AnyStore = recording(MemoryStore() if self.kind == "memory"
                                    else LmdbStore(self.path))
        self.opened.append(store)
        return store

    def reopen(self, store: AnyStore) -> AnyStore:
        if not self.durable:
            return store
        store.close()
        return self.open()

    def close_all(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["memory", "lmdb"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    s = Stores(request.param, tmp_path / "store")
    yield s
    s.close_all()


def commit(store: AnyStore) -> None:
    store.write_batch(store.take_batch())


def msg(body: bytes = b"body", routing_key: str = "rk") -> Message:
    return Message("amq.direct", routing_key, PERSISTENT_PROPS, body)


def read_all(store: AnyStore, qid: int) -> list[tuple[int, int, bytes]]:
    return [(e.seq, e.delivery_count, e.message.body) for e in store.read_queue(qid, 0, 1 << 30)]


def message_count(store: AnyStore) -> int:
    return store._message_count()


# -- definitions ---------------------------------------------------------------------------

def test_definitions_round_trip(stores: Stores) -> None:
    store = stores.open()
    exchange = ExchangeDef("/", "ex", "topic", auto_delete=True, internal=True,
                           arguments=FIELD_TABLE)
    store.put_definition(exchange)
    qid = store.put_queue(QueueDef("vh", "q", arguments={"x-max-length": 10, "t": FIELD_TABLE}))
    binding = BindingDef("vh", "ex", "q", "queue", "a.#", {"x-match": "all", "h": b"\x01"})
    store.put_definition(binding)
    assert store.load_definitions().exchanges == []  # reads see committed data only
    commit(store)
    store = stores.reopen(store)

    defs = store.load_definitions()
    assert defs.exchanges == [exchange]
    assert defs.exchanges[0].arguments["bytearray"].__class__ is bytearray
    assert defs.exchanges[0].arguments["ts"].tzinfo is not None
    assert math.copysign(1, defs.exchanges[0].arguments["negzero"]) == -1
    assert defs.queues == [QueueDef("vh", "q", arguments={"x-max-length": 10, "t": FIELD_TABLE},
                                    qid=qid)]
    assert defs.bindings == [binding]
    assert qid > 0


def test_policies_round_trip_replace_and_delete(stores: Stores) -> None:
    store = stores.open()
    first = PolicyDef("/", "limits", "^q\\.", "queues", {"max-length": 5, "overflow": "drop-head"}, 3)
    other_vhost = PolicyDef("vh", "limits", ".*", "all", {"message-ttl": 1000})
    ae = PolicyDef("/", "ae", "^x", "exchanges", {"alternate-exchange": "alt"}, -1)
    for policy in (first, other_vhost, ae):
        store.put_definition(policy)
    assert store.load_definitions().policies == []  # committed data only
    commit(store)
    store = stores.reopen(store)
    key = lambda p: (p.vhost, p.name)  # noqa: E731
    assert sorted(store.load_definitions().policies, key=key) == sorted(
        [first, other_vhost, ae], key=key)
    replaced = PolicyDef("/", "limits", "^r", "all", {"expires": 60000}, 0)
    store.put_definition(replaced)  # same (vhost, name): replaces
    store.delete_policy("/", "ae")
    store.delete_policy("/", "never-set")  # harmless
    commit(store)
    store = stores.reopen(store)
    defs = store.load_definitions()
    assert sorted(defs.policies, key=key) == [replaced, other_vhost]
    assert defs.exchanges == [] and defs.queues == [] and defs.bindings == []


def test_queue_ids_are_stable_and_fresh_after_delete(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "a"))
    assert store.put_queue(QueueDef("/", "a", arguments={"x": 1})) == qid  # redeclare
    other = store.put_queue(QueueDef("/", "b"))
    assert other != qid
    commit(store)
    store = stores.reopen(store)
    assert store.put_queue(QueueDef("/", "a")) == qid
    store.delete_queue("/", "a", qid)
    fresh = store.put_queue(QueueDef("/", "a"))
    assert fresh not in (qid, other)
    commit(store)
    store = stores.reopen(store)
    assert {q.name: q.qid for q in store.load_definitions().queues} == {"a": fresh, "b": other}
    assert store.put_queue(QueueDef("/", "c")) not in (qid, other, fresh)


def test_deletes_cascade_to_bindings(stores: Stores) -> None:
    store = stores.open()
    for name in ("e1", "e2"):
        store.put_definition(ExchangeDef("/", name, "direct"))
    qid = store.put_queue(QueueDef("/", "q"))
    b_q = BindingDef("/", "e1", "q", "queue", "k")
    b_e = BindingDef("/", "e1", "e2", "exchange", "k")
    b_other_vhost = BindingDef("v2", "e1", "q", "queue", "k")
    b_args = BindingDef("/", "e2", "q", "queue", "k", {"a": 1})
    for b in (b_q, b_e, b_other_vhost, b_args):
        store.put_definition(b)
    commit(store)
    store.delete_binding(BindingDef("/", "e2", "q", "queue", "k", {"a": 2}))  # other args: kept
    store.delete_exchange("/", "e2")  # drops b_e (destination) and b_args (source)
    commit(store)
    defs = stores.reopen(store).load_definitions() if stores.durable else store.load_definitions()
    store = stores.opened[-1]
    assert sorted(b.destination for b in defs.bindings) == ["q", "q"]
    assert [e.name for e in defs.exchanges] == ["e1"]
    store.delete_queue("/", "q", qid)
    commit(store)
    assert store.load_definitions().bindings == [b_other_vhost]
    assert store.load_definitions().queues == []


def test_unstorable_argument_is_refused_at_record_time(stores: Stores) -> None:
    store = stores.open()
    with pytest.raises(StoreError):
        store.put_definition(ExchangeDef("/", "x", "direct", arguments={"bad": object()}))
    with pytest.raises(StoreError):
        store.put_queue(QueueDef("/", "q", arguments={"bad": {1, 2}}))
    assert not store.has_pending()
    assert store.put_queue(QueueDef("/", "q")) == 1  # the refused queue took no id


# -- entries -----------------------------------------------------------------------------------

def test_enqueue_read_remove(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    messages = [msg(b"m%d" % i, routing_key=f"key.{i}") for i in range(5)]
    for seq, m in enumerate(messages):
        store.enqueue(qid, seq, m)
    assert all(m.store_id for m in messages)
    assert len({m.store_id for m in messages}) == 5
    commit(store)
    store = stores.reopen(store)

    entries = store.read_queue(qid, 0, 100)
    assert [e.seq for e in entries] == [0, 1, 2, 3, 4]
    first = entries[0].message
    assert (first.exchange, first.routing_key, first.raw_properties, first.body) == (
        "amq.direct", "key.0", PERSISTENT_PROPS, b"m0")
    assert first.persistent
    assert [e.message.store_id for e in entries] == [m.store_id for m in messages]
    assert [e.seq for e in store.read_queue(qid, 2, 2)] == [2, 3]
    assert store.read_queue(qid, 5, 10) == []
    assert store.read_queue(qid + 1, 0, 10) == []

    store.remove(qid, 1, entries[1].message)
    store.remove(qid, 3, entries[3].message)
    commit(store)
    assert [e.seq for e in store.read_queue(qid, 0, 100)] == [0, 2, 4]
    assert message_count(store) == 3
    # By number (a priority queue's per-level tails): in the order asked, absent ones left out.
    by_seq = store.read_entries(qid, [4, 1, 0, 9])
    assert [(e.seq, e.message.body) for e in by_seq] == [(4, b"m4"), (0, b"m0")]
    assert store.read_entries(qid + 1, [0]) == [] and store.read_entries(qid, []) == []


def test_message_in_three_queues_is_stored_once(stores: Stores) -> None:
    store = stores.open()
    qids = [store.put_queue(QueueDef("/", f"q{i}")) for i in range(3)]
    m = msg(b"x" * 1000)
    for qid in qids:
        store.enqueue(qid, 0, m)
    commit(store)
    assert message_count(store) == 1
    store = stores.reopen(store)
    ids = {store.read_queue(qid, 0, 1)[0].message.store_id for qid in qids}
    assert ids == {m.store_id}

    store.remove(qids[0], 0, m)
    commit(store)
    store.remove(qids[1], 0, m)
    commit(store)
    store = stores.reopen(store)
    assert message_count(store) == 1
    assert read_all(store, qids[2]) == [(0, 0, b"x" * 1000)]
    store.remove(qids[2], 0, m)
    commit(store)
    assert message_count(store) == 0
    assert all(read_all(store, qid) == [] for qid in qids)


def test_expiry_time_persists_and_survives_mark_delivered(stores: Stores) -> None:
    """Entries keep their TTL expiry (absolute wall-clock ms; 0 = none) across restarts."""
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    a, b, c = msg(b"a"), msg(b"b"), msg(b"c")
    expiry = 1_700_000_000_123
    store.enqueue(qid, 0, a, expires_at=expiry)
    store.enqueue(qid, 1, b)
    store.enqueue(qid, 2, c, False, 2**63)  # the largest value fits
    commit(store)
    store.mark_delivered(qid, 0, a, 3)
    commit(store)
    store = stores.reopen(store)
    entries = store.read_queue(qid, 0, 10)
    assert [(e.seq, e.delivery_count, e.expires_at) for e in entries] == [
        (0, 3, expiry), (1, 0, 0), (2, 0, 2**63)]
    store.mark_delivered(qid, 0, a, 4)  # a later batch: the stored expiry is kept
    commit(store)
    store = stores.reopen(store)
    assert store.read_queue(qid, 0, 1)[0].expires_at == expiry
    store.remove(qid, 0, a)
    commit(store)
    assert [e.seq for e in store.read_queue(qid, 0, 10)] == [1, 2]


def test_delivery_count_persists(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    a, b = msg(b"a"), msg(b"b")
    store.enqueue(qid, 0, a)
    store.enqueue(qid, 1, b)
    store.mark_delivered(qid, 1, b, 1)  # folded into the pending enqueue
    commit(store)
    store.mark_delivered(qid, 0, a, 3)
    commit(store)
    store = stores.reopen(store)
    assert read_all(store, qid) == [(0, 3, b"a"), (1, 1, b"b")]


def test_publish_and_ack_in_one_batch_cancel_out(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    commit(store)
    m = msg()
    store.enqueue(qid, 0, m)
    store.mark_delivered(qid, 0, m, 1)
    store.remove(qid, 0, m)
    assert not store.has_pending()
    kept = msg(b"kept")
    store.enqueue(qid, 1, kept)
    commit(store)
    assert message_count(store) == 1
    assert read_all(store, qid) == [(1, 0, b"kept")]
    assert store.queue_stats(qid).count == 1


def test_remove_of_entry_never_written_is_harmless(stores: Stores) -> None:
    """A batch that failed (here: taken and dropped) leaves later removes as no-ops."""
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    shared = msg(b"shared")
    store.enqueue(qid, 0, shared)
    commit(store)
    lost = msg(b"lost")
    store.enqueue(qid, 1, lost)
    store.enqueue(qid + 1, 0, shared)
    store.take_batch()  # never written
    store.remove(qid, 1, lost)
    store.remove(qid + 1, 0, shared)
    commit(store)
    assert read_all(store, qid) == [(0, 0, b"shared")]
    assert message_count(store) == 1
    store.remove(qid, 0, shared)
    commit(store)
    assert message_count(store) == 0


def test_transient_entries_are_dropped_at_restart(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    keep, paged = msg(b"keep"), msg(b"paged")
    store.enqueue(qid, 0, keep)
    store.enqueue(qid, 1, paged, transient=True)
    store.enqueue(qid + 1, 0, keep, transient=True)  # same message, transient elsewhere
    commit(store)
    assert [e.seq for e in store.read_queue(qid, 0, 10)] == [0, 1]
    assert store.queue_stats(qid) == QueueStats(2, 0, 2, 9, 1, 5)
    if not stores.durable:
        return
    store = stores.reopen(store)
    assert read_all(store, qid) == [(0, 0, b"keep")]
    assert read_all(store, qid + 1) == []
    assert message_count(store) == 1
    assert store.queue_stats(qid) == QueueStats(1, 0, 2, 4)
    store = stores.reopen(store)  # and nothing left to drop the second time
    assert message_count(store) == 1


def test_purge_and_delete_queue(stores: Stores) -> None:
    store = stores.open()
    q1 = store.put_queue(QueueDef("/", "q1"))
    q2 = store.put_queue(QueueDef("/", "q2"))
    shared = msg(b"shared")
    store.enqueue(q2, 0, shared)
    for seq in range(10):
        store.enqueue(q1, seq, shared if seq == 0 else msg(b"%d" % seq),
                      transient=seq == 9)
    commit(store)
    store.purge(q1, from_seq=5)  # the paged tail only
    store.enqueue(q1, 10, msg(b"after purge"))  # recorded after the purge: survives it
    commit(store)
    assert [e.seq for e in store.read_queue(q1, 0, 100)] == [0, 1, 2, 3, 4, 10]
    assert store.queue_stats(q1) == QueueStats(6, 0, 11, 6 + 4 + 11)
    store.purge(q1)
    commit(store)
    assert store.read_queue(q1, 0, 100) == []
    assert store.queue_stats(q1) == QueueStats(0, 0, 11)
    assert message_count(store) == 1  # shared, still in q2
    store.enqueue(q1, 11, msg(b"again"))
    store.delete_queue("/", "q2", q2)
    commit(store)
    store = stores.reopen(store)
    # Gone from the commit that deleted it; its entries may leave later, in slices.
    assert [q.name for q in store.load_definitions().queues] == ["q1"]
    assert store.queue_stats(q2) == QueueStats(0, 0, 0)
    while store.reclaiming:
        store.reclaim()
    assert read_all(store, q2) == []
    assert message_count(store) == 1


def test_purge_cancels_pending_enqueues(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    store.enqueue(qid, 0, msg(b"old"))
    commit(store)
    store.enqueue(qid, 1, msg(b"pending"))
    store.purge(qid, 1)
    commit(store)
    assert read_all(store, qid) == [(0, 0, b"old")]
    assert message_count(store) == 1


def test_truncate_drops_the_entries_below_and_survives_restart(stores: Stores) -> None:
    """A stream's retention: one operation removes every entry below an offset (and the
    messages only they held); an enqueue below it pending in the same batch is cancelled."""
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "s", arguments={"x-queue-type": "stream"}))
    other = store.put_queue(QueueDef("/", "q"))
    shared = msg(b"shared")
    store.enqueue(other, 0, shared)
    for seq in range(8):
        store.enqueue(qid, seq, shared if seq == 1 else msg(b"%d" % seq), expires_at=1000 + seq)
    commit(store)
    store.enqueue(qid, 8, msg(b"8"))
    store.truncate(qid, 5)
    commit(store)
    store = stores.reopen(store)
    assert [(e.seq, e.expires_at) for e in store.read_queue(qid, 0, 100)] == [
        (5, 1005), (6, 1006), (7, 1007), (8, 0)]
    assert store.queue_stats(qid) == QueueStats(4, 5, 9, 4)
    assert store.read_stamps(qid, 6, 2) == [(6, 1006, 1), (7, 1007, 1)]
    assert [e.message.body for e in store.read_queue(other, 0, 10)] == [b"shared"]
    assert message_count(store) == 5


def test_reads_see_only_written_batches(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    store.enqueue(qid, 0, msg())
    assert store.has_pending()
    assert store.read_queue(qid, 0, 10) == []
    batch = store.take_batch()
    assert not store.has_pending()
    store.enqueue(qid, 1, msg())  # into the next batch
    assert store.read_queue(qid, 0, 10) == []
    assert store.queue_stats(qid) == QueueStats(0, 0, 0)
    store.write_batch(batch)
    assert [e.seq for e in store.read_queue(qid, 0, 10)] == [0]
    commit(store)
    assert [e.seq for e in store.read_queue(qid, 0, 10)] == [0, 1]


def test_message_ids_never_repeat(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    seen = set()
    for round_ in range(3):
        for seq in range(round_ * 5, round_ * 5 + 5):
            m = msg()
            store.enqueue(qid, seq, m)
            seen.add(m.store_id)
        dropped = msg()
        store.enqueue(qid, 1000 + round_, dropped)
        store.remove(qid, 1000 + round_, dropped)  # cancelled: its id must not come back either
        seen.add(dropped.store_id)
        commit(store)
        store = stores.reopen(store)
    assert len(seen) == 18
    fresh = msg()
    store.enqueue(qid, 99, fresh)
    assert fresh.store_id not in seen


def test_queue_stats(stores: Stores) -> None:
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    assert store.queue_stats(qid) == QueueStats(0, 0, 0)
    for seq in range(3, 8):
        store.enqueue(qid, seq, msg())
    commit(store)
    entries = store.read_queue(qid, 0, 10)
    store.remove(qid, 3, entries[0].message)
    store.remove(qid, 7, entries[-1].message)
    commit(store)
    store = stores.reopen(store)
    assert store.queue_stats(qid) == QueueStats(3, 4, 8, 3 * 4)


def test_queue_stats_keep_body_bytes(stores: Stores) -> None:
    """Byte totals follow every way an entry comes and goes (replaced, delivered, removed,
    purged; transient ones apart) and survive a restart, without reading the messages."""
    store = stores.open()
    qid = store.put_queue(QueueDef("/", "q"))
    for seq, size in enumerate((10, 20, 30, 40)):
        store.enqueue(qid, seq, msg(b"x" * size), transient=seq == 3)
    commit(store)
    assert store.queue_stats(qid) == QueueStats(4, 0, 4, 100, 1, 40)
    store.mark_delivered(qid, 1, msg(), 2)  # rewrites the index value: keeps the size
    store.enqueue(qid, 2, msg(b"y" * 7))  # (qid, seq) reused: replaces the 30-byte entry
    commit(store)
    assert store.queue_stats(qid) == QueueStats(4, 0, 4, 77, 1, 40)
    entries = store.read_queue(qid, 0, 10)
    store.remove(qid, 0, entries[0].message)
    store.remove(qid, 3, entries[3].message)
    commit(store)
    assert store.queue_stats(qid) == QueueStats(2, 1, 4, 27)
    if stores.durable:
        store = stores.reopen(store)
        assert store.queue_stats(qid) == QueueStats(2, 1, 4, 27)
    store.enqueue(qid, 4, msg(b"z" * 5), transient=True)
    commit(store)
    store.purge(qid, 2)  # the 7-byte entry and the transient one
    commit(store)
    assert store.queue_stats(qid) == QueueStats(1, 1, 5, 20)
    store.purge(qid)
    commit(store)
    assert store.queue_stats(qid) == QueueStats(0, 0, 5)


def test_closed_store_refuses_writes(stores: Stores) -> None:
    store = stores.open()
    store.put_queue(QueueDef("/", "q"))
    batch = store.take_batch()
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError):
        store.write_batch(batch)


# -- property test: random operation sequences against a naive model ----------------------------

QIDS = (1, 2, 3)

op_strategy = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(QIDS), st.integers(0, 5), st.booleans(),
              st.booleans()),  # (kind, qid, message choice, new message?, transient)
    st.tuples(st.just("deliver"), st.sampled_from(QIDS), st.integers(0, 50), st.integers(1, 5)),
    st.tuples(st.just("remove"), st.sampled_from(QIDS), st.integers(0, 50)),
    st.tuples(st.just("deliver_below"), st.sampled_from(QIDS), st.integers(0, 50)),
    st.tuples(st.just("purge"), st.sampled_from(QIDS), st.integers(0, 8)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("drop_batch")),  # a batch whose write failed
    st.tuples(st.just("restart")),
)


class Model:
    """What a store should contain: entries applied at once, snapshot at commit."""

    def __init__(self) -> None:
        self.pending: dict[int, dict[int, tuple[Message, int, bool]]] = {q: {} for q in QIDS}
        self.committed: dict[int, dict[int, tuple[Message, int, bool]]] = {q: {} for q in QIDS}
        self.next_seq = dict.fromkeys(QIDS, 0)

    def snapshot(self) -> dict[int, dict[int, tuple[Message, int, bool]]]:
        return {q: dict(entries) for q, entries in self.pending.items()}


def check(store: AnyStore, model: Model) -> None:
    live: set[int] = set()
    for qid in QIDS:
        expected = [(seq, dc, m.body) for seq, (m, dc, _) in sorted(model.committed[qid].items())]
        assert read_all(store, qid) == expected
        assert store.queue_stats(qid).count == len(expected)
        live.update(m.store_id for m, _, _ in model.committed[qid].values())
    assert message_count(store) == len(live)


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_strategy, max_size=60))
def test_random_operations_match_model(kind: str, ops: list[tuple[Any, ...]]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="leveret-store-"))
    stores = Stores(kind, tmp / "store")
    try:
        run_model(stores, ops)
    finally:
        stores.close_all()
        shutil.rmtree(tmp)


def run_model(stores: Stores, ops: list[tuple[Any, ...]]) -> None:
    store = stores.open()
    model = Model()
    messages: list[Message] = []
    body = iter(range(10**6))

    def pending_seq(qid: int, pick: int) -> int | None:
        seqs = sorted(model.pending[qid])
        return seqs[pick % len(seqs)] if seqs else None

    for op in ops:
        kind = op[0]
        if kind == "enqueue":
            _, qid, choice, new, transient = op
            if new or not messages:
                messages.append(msg(b"%d" % next(body)))
            m = messages[choice % len(messages)]
            seq = model.next_seq[qid]
            model.next_seq[qid] += 1
            store.enqueue(qid, seq, m, transient)
            model.pending[qid][seq] = (m, 0, transient)
        elif kind in ("deliver", "remove"):
            qid = op[1]
            picked = pending_seq(qid, op[2])
            if picked is None:
                continue
            seq = picked
            m, _, transient = model.pending[qid][seq]
            if kind == "deliver":
                store.mark_delivered(qid, seq, m, op[3])
                model.pending[qid][seq] = (m, op[3], transient)
            else:
                store.remove(qid, seq, m)
                del model.pending[qid][seq]
        elif kind == "deliver_below":
            # A FIFO queue's first deliveries: every entry under the mark reads as delivered.
            below = op[2] % (model.next_seq[op[1]] + 1)  # never above a seq handed out
            store.mark_delivered_below(op[1], below)
            model.pending[op[1]] = {s: (m, dc or int(s < below), t)
                                    for s, (m, dc, t) in model.pending[op[1]].items()}
        elif kind == "purge":
            _, qid, from_seq = op
            store.purge(qid, from_seq)
            model.pending[qid] = {s: e for s, e in model.pending[qid].items() if s < from_seq}
        elif kind == "commit":
            commit(store)
            model.committed = model.snapshot()
            check(store, model)
        elif kind == "drop_batch":
            # Everything since the last commit is lost; the loop goes on from what is on disk.
            store.take_batch()
            model.pending = {q: dict(e) for q, e in model.committed.items()}
            check(store, model)
        elif kind == "restart" and stores.durable:
            store.take_batch()
            store = stores.reopen(store)
            model.committed = {q: {s: e for s, e in entries.items() if not e[2]}
                               for q, entries in model.committed.items()}
            model.pending = {q: dict(e) for q, e in model.committed.items()}
            # A restarted broker only knows the messages it reads back from the store.
            messages = list({id(m): m for entries in model.committed.values()
                             for m, _, _ in entries.values()}.values())
            check(store, model)
    commit(store)
    model.committed = model.snapshot()
    check(store, model)
