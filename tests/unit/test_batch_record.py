"""The group-commit batch as a self-contained record: numbered, serialisable, and applied
by one function to any store (what a follower replica will do with its leader's batches)."""

from __future__ import annotations

from pathlib import Path

from leveret.model.message import Message
from leveret.persistence.batch import Batch, Recorder
from leveret.persistence.batch_codec import decode_batch, encode_batch
from leveret.persistence.lmdb_store import LmdbStore
from leveret.persistence.memory import MemoryStore
from leveret.persistence.store import BindingDef, ExchangeDef, PolicyDef, QueueDef

PROPS = b"\x10\x00\x02"


def record_some(recorder: Recorder) -> list[Batch]:
    batches = []
    recorder.put_definition(ExchangeDef("/", "x", "topic", arguments={"f": 1.5, "b": b"\x00"}))
    q1 = recorder.put_queue(QueueDef("/", "q1", arguments={"x-max-length": 10}))
    q2 = recorder.put_queue(QueueDef("/", "q2"))
    recorder.put_definition(BindingDef("/", "x", "q1", "queue", "a.#"))
    recorder.put_definition(BindingDef("/", "x", "q2", "queue", "b.*"))
    recorder.put_definition(PolicyDef("/", "p", "^q", definition={"max-length": 5}))
    shared = Message("x", "a.b", PROPS, b"fanned out")
    for seq in range(5):
        recorder.enqueue(q1, seq, Message("x", "a.b", PROPS, b"m%d" % seq), seq == 4,
                         expires_at=1234 if seq == 3 else 0)
    recorder.enqueue(q1, 5, shared)
    recorder.enqueue(q2, 0, shared)
    recorder.remove(q1, 0, shared)  # cancels its enqueue: never written, never sent
    batches.append(recorder.take_batch())
    assert recorder.take_batch().seq == 0  # nothing recorded: not numbered
    recorder.mark_delivered(q1, 1, shared, 3)
    recorder.mark_delivered_below(q1, 3)  # seq 3 reads as delivered once; 1 keeps its 3
    recorder.mark_delivered_below(q1, 4)  # raises the same operation
    recorder.mark_delivered_below(q2, 1)  # cancelled with its queue
    recorder.remove(q1, 2, shared)
    recorder.truncate(q1, 2)  # a stream's retention: the entries below 2 (seq 1)
    recorder.purge(q1, 4)
    recorder.delete_binding(BindingDef("/", "x", "q1", "queue", "a.#"))
    recorder.delete_policy("/", "p")
    recorder.delete_queue("/", "q2", q2)
    batches.append(recorder.take_batch())
    recorder.delete_exchange("/", "x")
    batches.append(recorder.take_batch())
    return batches


def contents(store) -> tuple:
    defs = store.load_definitions()
    entries = {qid: [(e.seq, e.delivery_count, e.expires_at, e.message.body, e.message.exchange,
                      e.message.routing_key, e.message.raw_properties)
                     for e in store.read_queue(qid, 0, 100)] for qid in (1, 2)}
    return (sorted(map(repr, defs.exchanges)), sorted(map(repr, defs.queues)),
            sorted(map(repr, defs.bindings)), sorted(map(repr, defs.policies)), entries)


def test_batches_are_numbered_and_the_number_survives_a_restart(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "store")
    recorder = Recorder(store.state())
    batches = record_some(recorder)
    assert [b.seq for b in batches] == [1, 2, 3]
    for batch in batches:
        store.write_batch(batch)
    store.close()
    store = LmdbStore(tmp_path / "store")
    assert store.state().last_seq == 3
    assert Recorder(store.state()).take_batch().seq == 0
    recorder = Recorder(store.state())
    recorder.put_queue(QueueDef("/", "again"))
    assert recorder.take_batch().seq == 4
    store.close()


def test_a_decoded_batch_applies_to_another_store_with_the_same_result(tmp_path: Path) -> None:
    leader = MemoryStore()
    follower = LmdbStore(tmp_path / "follower")
    for batch in record_some(Recorder(leader.state())):
        wire = encode_batch(batch)
        copy = decode_batch(wire)
        assert copy.seq == batch.seq and encode_batch(copy) == wire
        leader.write_batch(batch)
        follower.write_batch(copy)
        while follower.reclaiming:  # a deleted queue's entries: slices after its delete
            follower.reclaim()
        assert contents(follower) == contents(leader)
    state, copied = leader.state(), follower.state()
    assert (copied.next_msg_id, copied.next_qid, copied.last_seq) == (
        state.next_msg_id, state.next_qid, state.last_seq)
    follower.close()


def test_batches_written_in_one_transaction_leave_what_one_by_one_does(tmp_path: Path) -> None:
    # A cluster follower catching up applies the batches that arrived together at once.
    leader = MemoryStore()
    follower = LmdbStore(tmp_path / "follower")
    batches = record_some(Recorder(leader.state()))
    for batch in batches:
        leader.write_batch(batch)
    follower.write_batches([decode_batch(encode_batch(b)) for b in batches[:2]])
    assert follower.state().last_seq == 2
    follower.write_batches([decode_batch(encode_batch(batches[2]))])  # carries a slice
    assert contents(follower) == contents(leader)
    state, copied = leader.state(), follower.state()
    assert (copied.next_msg_id, copied.next_qid, copied.last_seq) == (
        state.next_msg_id, state.next_qid, state.last_seq)
    follower.close()


def test_a_message_in_several_queues_travels_once() -> None:
    recorder = Recorder()
    shared = Message("", "q", PROPS, b"x" * 1000)
    for qid in (1, 2, 3):
        recorder.enqueue(qid, 0, shared)
    assert len(encode_batch(recorder.take_batch())) < 1200


def _record_acks(many: bool) -> tuple[bytes, int, list[str]]:
    """Entries 0-9 of queue 1 committed, 10-14 pending, a delivery mark pending on 3;
    then an ack of 2..13, as one multiple ack or one by one: the batch that results."""
    recorder = Recorder()
    messages = [Message("", "q", PROPS, b"m%d" % seq) for seq in range(15)]
    for seq in range(10):
        recorder.enqueue(1, seq, messages[seq])
    recorder.take_batch()
    for seq in range(10, 15):
        recorder.enqueue(1, seq, messages[seq])
    recorder.enqueue(2, 5, messages[5])  # another queue's entry under an acked seq stays
    recorder.mark_delivered(1, 3, messages[3], 1)
    acked = list(range(2, 14))
    if many:
        recorder.remove_many(1, acked)
    else:
        for seq in acked:
            recorder.remove(1, seq)
    batch = recorder.take_batch()
    live = [f"{type(op).__name__}({op.qid},{getattr(op, 'seq', '')})" for op in batch.ops
            if not getattr(op, "cancelled", False)]
    return encode_batch(batch), batch.live, live


def test_a_multiple_ack_records_what_the_single_acks_would() -> None:
    encoded, live, ops = _record_acks(many=True)
    assert (encoded, live, ops) == _record_acks(many=False)
    # The pending enqueues of 10-13 cancel (never written), 3's pending delivery mark
    # gives way to its remove, the committed entries become removes in ack order.
    assert ops == (["Enqueue(1,14)", "Enqueue(2,5)"]
                   + [f"Remove(1,{seq})" for seq in range(2, 10)])
    assert live == len(ops)
