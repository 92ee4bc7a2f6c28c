"""A source partition's parts found by Arrow from the message lengths are the ones the
message-by-message walk finds (no broker, no Spark)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from leveret.spark_sink.deliveries import RawMessages, _Where
from leveret.spark_sink.schema import Layout

FRAME_MAX = 512  # bodies over 504 octets take several frames
text = st.text(max_size=30)


def delivered(tag: int, ctag: str, exchange: str, routing_key: str, props: dict,
              body: bytes) -> bytes:
    out = pframe.marshal(commands.Basic.Deliver(ctag, tag, False, exchange, routing_key), 1)
    out += pframe.marshal(pheader.ContentHeader(0, len(body), commands.Basic.Properties(
        **props)), 1)
    for start in range(0, len(body), FRAME_MAX - 8):
        out += pframe.marshal(pbody.ContentBody(body[start:start + FRAME_MAX - 8]), 1)
    return out


messages = st.lists(st.tuples(
    st.sampled_from(["ctag-1", "amq.ctag-xyz"]), st.sampled_from(["", "ex", "amq.direct"]), text,
    st.fixed_dictionaries({}, optional={"delivery_mode": st.sampled_from([1, 2]),
                                        "message_id": st.text(min_size=1, max_size=40),
                                        "content_type": st.text(min_size=1, max_size=10)}),
    st.binary(min_size=0, max_size=700)), min_size=1, max_size=10)


@settings(max_examples=200, deadline=None)
@given(messages=messages, columns=st.sampled_from([
    ["body"], ["body", "message_id"], ["message_id", "content_type", "seq"]]))
def test_arrow_spans_are_the_walks(messages, columns):
    frames = [delivered(tag, *m) for tag, m in enumerate(messages, 1)]
    blob = b"".join(frames)
    walked = _Where(blob, columns)
    found = _Where(blob, columns, [len(f) for f in frames])
    usual = all(0 < len(body) <= FRAME_MAX - 8 for *_, body in messages)
    assert (found.spans.keys() == {"body", "properties"}) == usual
    if usual:  # the walk finds properties only for a layout with a property column
        assert list(found.spans["body"]) == list(walked.spans["body"])
        if columns != ["body"]:
            assert list(found.spans["properties"]) == list(walked.spans["properties"])
    layout = Layout.of([(name, {"seq": "bigint"}.get(name, "binary" if name == "body"
                                                      else "string")) for name in columns],
                       False)
    packed = RawMessages.of(range(len(frames)), frames, layout)
    rows = [row for batch in packed.to_arrow(3) for row in batch.to_pylist()]
    packed.lengths = packed.lengths[:0]  # shipped without lengths: the walk
    packed_walk = [row for batch in _walk_only(packed) for row in batch.to_pylist()]
    assert rows == packed_walk
    if "body" in columns:
        assert [row["body"] for row in rows] == [body for *_, body in messages]


def _walk_only(packed: RawMessages) -> list:
    """What to_arrow gives when the parts are found message by message."""
    schema = packed.layout.arrow_schema()
    where = _Where(packed.frames, schema.names)
    return [where.batch(packed.seqs, start, min(start + 3, len(packed.seqs)), schema, False)
            for start in range(0, len(packed.seqs), 3)]


def test_a_partition_pickled_before_lengths_were_shipped_still_decodes():
    """Lengths absent (an empty array): the walk finds the parts."""
    frames = [delivered(1, "c", "", "q", {"message_id": "a"}, b"xyz")]
    packed = RawMessages.of([5], frames, Layout.of([("body", "binary")], False))
    packed.lengths = packed.lengths[:0]
    assert [r["body"] for b in packed.to_arrow() for r in b.to_pylist()] == [b"xyz"]
