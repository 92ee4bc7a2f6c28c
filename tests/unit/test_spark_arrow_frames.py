"""The sink's publish frames laid out by Arrow are the general encoder's, byte for byte
(no broker: the encoders only need a connection's frame size and method frames)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.spark_sink import arrow_frames, wire
from leveret.spark_sink.amqp_client import Connection
from leveret.spark_sink.publisher import PublishOptions
from leveret.spark_sink.row_encoding import arrow_encoder, general_encoder

FRAME_MAX = 1024  # small, so bodies that need two frames are cheap to generate

rows = st.lists(st.tuples(
    st.binary(min_size=0, max_size=1100),  # empty, one frame, two frames
    st.none() | st.text(max_size=90),  # the row's own message_id (up to 270 UTF-8 octets)
    st.sampled_from(["a", "b", None]),  # its routing key
), min_size=1, max_size=12)


def connection() -> Connection:
    conn = Connection("amqp://guest:guest@127.0.0.1:1/%2F")
    conn.frame_max = FRAME_MAX
    return conn


@settings(max_examples=150, deadline=None)
@given(rows=rows, own_ids=st.booleans(), keyed=st.booleans(), persistent=st.booleans(),
       first=st.integers(0, 10**9),
       body_type=st.sampled_from([pa.binary(), pa.string(), pa.large_binary()]))
def test_arrow_frames_are_the_general_encoders(rows, own_ids, keyed, persistent, first,
                                               body_type):
    as_string = body_type == pa.string()
    columns: dict[str, pa.Array] = {
        "body": pa.array([body.decode("latin-1") if as_string else body for body, _, _ in rows],
                         body_type)}
    if own_ids:
        columns["message_id"] = pa.array([mid for _, mid, _ in rows], pa.string())
    if keyed:
        columns["routing_key"] = pa.array([key for _, _, key in rows], pa.string())
    batch = pa.RecordBatch.from_pydict(columns)
    opts = PublishOptions(url="amqp://x", exchange="ex", routing_key="dflt",
                          persistent=persistent).checked(batch.schema.names)
    conn = connection()
    too_long = any(mid is not None and len(mid.encode()) > 255 for _, mid, _ in rows) and own_ids
    if too_long:
        with pytest.raises(ValueError, match="longer than 255"):
            general_encoder(conn, batch, opts, "p-", first)
        with pytest.raises(ValueError, match="longer than 255"):
            arrow_encoder(conn, batch, opts, "p-", first)
        return
    expected = general_encoder(conn, batch, opts, "p-", first)
    laid_out = arrow_encoder(conn, batch, opts, "p-", first)
    one_frame = all(0 < len(body.decode("latin-1").encode() if as_string else body)
                    <= FRAME_MAX - wire.FRAME_OVERHEAD for body, _, _ in rows)
    assert (laid_out is not None) == one_frame
    if laid_out is None:
        return
    for start in range(len(rows)):  # any chunk of rows, as the confirm window cuts them
        for stop in range(start + 1, len(rows) + 1):
            assert bytes(laid_out(start, stop)) == expected(start, stop)


def test_rows_with_other_properties_take_the_general_path():
    batch = pa.RecordBatch.from_pydict({"body": [b"x"], "content_type": ["text/plain"]})
    opts = PublishOptions(url="amqp://x").checked(batch.schema.names)
    assert arrow_encoder(connection(), batch, opts, "p-", 0) is None


def test_a_chunk_is_handed_over_without_a_copy():
    """The chunk the socket gets is a view of the batch's one frames buffer."""
    bodies = pa.array([b"x" * 100] * 3, pa.binary())
    ids = pa.array([b"1", b"22", b"333"], pa.binary())
    frames = arrow_frames.frames_of(b"M", 1, ids, bodies, True, FRAME_MAX)
    assert frames is not None and frames.buffers()[2].size == sum(
        len(value) for value in frames.to_pylist())
    batch = pa.RecordBatch.from_pydict({"body": bodies})
    opts = PublishOptions(url="amqp://x").checked(batch.schema.names)
    encode = arrow_encoder(connection(), batch, opts, "p-", 0)
    assert encode is not None and isinstance(encode(0, 2), memoryview)


def test_an_empty_column_lays_out_nothing():
    empty = pa.array([], pa.binary())
    assert arrow_frames.frames_of(b"M", 1, empty, empty, True, FRAME_MAX) is None
