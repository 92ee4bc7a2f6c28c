"""A source partition's messages, as delivered, into Arrow columns (on the executor).

The driver ships each partition's messages as the frames they were delivered in
(:class:`RawMessages`): one ``bytes`` to pickle, not a Python object per message, and
each message's length. The executor finds where each part lies (:class:`_Where`): with
Arrow, from the lengths, when every body is one frame (the usual case), else by walking
the frames in Python; then Arrow copies each column's values out of them. The columns and
their types are :mod:`.schema`'s.
"""

from __future__ import annotations

import array
import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import wire
from .schema import (
    ALL_COLUMNS,
    ARROW_BATCH_ROWS,
    STRING_PROPERTIES,
    Layout,
    header_value,
    headers_to_json,
)

_U64 = struct.Struct(">Q")
_FRAME_HEAD = struct.Struct(">BHI")  # frame type, channel, payload size
# The properties a source row usually carries (a persistent message with an id, what the
# sink and most publishers send): decoded without the general property walk.
_PERSISTENT_WITH_ID = (wire.PROPERTY_FLAGS[3][1] | wire.PROPERTY_FLAGS[8][1]).to_bytes(2, "big")
_PROPERTY_COLUMNS = ("message_id", *STRING_PROPERTIES, "delivery_mode", "priority", "timestamp",
                     "headers")


class RawMessages:
    """A partition's messages as they were delivered: their frames in one blob.

    The driver only numbers deliveries and ships them (one ``bytes`` to pickle, not
    a Python object per message); :meth:`to_arrow` decodes them on the executor.
    """

    def __init__(self, layout: Layout = ALL_COLUMNS) -> None:
        self.layout = layout
        self.seqs = array.array("q")
        self.frames = b""
        self.lengths = array.array("q")  # each message's frames' octets, in order

    @classmethod
    def of(cls, seqs: Sequence[int], frames: Sequence[bytes], layout: Layout = ALL_COLUMNS
           ) -> RawMessages:
        """``frames[i]`` is message ``seqs[i]``'s Basic.Deliver, header and body frames."""
        packed = cls(layout)
        packed.seqs = array.array("q", seqs)
        packed.frames = b"".join(frames)
        packed.lengths = array.array("q", map(len, frames))
        return packed

    def __len__(self) -> int:
        return len(self.seqs)

    def to_arrow(self, rows_per_batch: int = ARROW_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        schema = self.layout.arrow_schema()
        where = _Where(self.frames, schema.names, self.lengths)
        for start in range(0, len(self.seqs), rows_per_batch):
            yield where.batch(self.seqs, start, min(start + rows_per_batch, len(self.seqs)),
                              schema, self.layout.headers_as_json)


class _Where:
    """Where each message's parts lie in a partition's frames.

    A part is kept as its two offsets into the frames, not as a ``bytes`` of its own:
    Arrow gathers a column's values out of the frames in one C call (:meth:`gather`).
    The offsets of bodies and property lists come from Arrow (:func:`_spans_by_arrow`)
    when the message lengths were shipped and every body is one frame; otherwise one
    walk finds them, and it was all the Python an executor spent on a row (0.8 us of
    1.6-2.2 for 1 KB messages). The walk finds only the parts the layout's columns need;
    a body cut into several frames is joined once, on its own.
    """

    def __init__(self, blob: bytes, columns: Sequence[str],
                 lengths: Sequence[int] | None = None) -> None:
        self.blob = blob
        self.buffer = pa.py_buffer(blob)
        self.joined: dict[int, bytes] = {}  # message index -> a body of several frames
        self.redelivered: list[bool] = []
        self.spans: dict[str, array.array[int] | memoryview] = {}
        wants_names = "exchange" in columns or "routing_key" in columns
        if lengths is not None and not wants_names and "redelivered" not in columns:
            spans = _spans_by_arrow(self.buffer, lengths)
            if spans is not None:
                self.spans = spans
                return
        self._walk(blob, columns)

    def _walk(self, blob: bytes, columns: Sequence[str]) -> None:
        """Find the parts message by message (any message, and the names and flags)."""
        wants_names = "exchange" in columns or "routing_key" in columns
        wants_properties = any(name in columns for name in _PROPERTY_COLUMNS)
        bodies: list[int] = []  # start, end of each message's body
        exchanges: list[int] = []  # start, end of each exchange name
        routing_keys: list[int] = []
        properties: list[int] = []  # start, end of each raw property list
        unpack = _FRAME_HEAD.unpack_from
        pos, end = 0, len(blob)
        redelivered = self.redelivered if "redelivered" in columns else None
        while pos < end:
            _type, _channel, size = unpack(blob, pos)
            if redelivered is not None or wants_names:
                at = pos + 12 + blob[pos + 11]  # past the method id and the consumer tag
                if redelivered is not None:
                    redelivered.append(bool(blob[at + 8] & 1))  # after the delivery tag
                if wants_names:
                    at += 10
                    after = at + blob[at - 1]
                    exchanges.append(at)
                    exchanges.append(after)
                    routing_keys.append(after + 1)
                    routing_keys.append(after + 1 + blob[after])
            pos += 8 + size
            _type, _channel, size = unpack(blob, pos)
            if _type != wire.FRAME_HEADER:
                raise ValueError(f"malformed delivery at byte {pos}: frame type {_type}")
            if wants_properties:
                properties.append(pos + 19)
                properties.append(pos + 7 + size)
            (remaining,) = _U64.unpack_from(blob, pos + 11)
            pos += 8 + size
            if remaining:
                _type, _channel, size = unpack(blob, pos)
                if size == remaining:  # the usual case: one body frame
                    bodies.append(pos + 7)
                    bodies.append(pos + 7 + size)
                    pos += 8 + size
                    continue
                bodies.append(pos)  # an empty span where the body's frames start
                bodies.append(pos)
                self.joined[len(bodies) // 2 - 1], pos = self._join_body(pos, remaining)
            else:
                bodies.append(pos)
                bodies.append(pos)
        # As 64-bit integers, so Arrow reads a run of them without a Python call each.
        self.spans = {part: array.array("q", offsets) for part, offsets in (
            ("body", bodies), ("exchange", exchanges), ("routing_key", routing_keys),
            ("properties", properties))}

    def _join_body(self, pos: int, remaining: int) -> tuple[bytes, int]:
        """A body of several frames from ``pos``, and where the frame after them starts."""
        chunks = []
        while remaining > 0:
            _type, _channel, size = _FRAME_HEAD.unpack_from(self.blob, pos)
            chunks.append(self.blob[pos + 7 : pos + 7 + size])
            remaining -= size
            pos += 8 + size
        return b"".join(chunks), pos

    def batch(self, seqs: Sequence[int], start: int, stop: int, schema: pa.Schema,
              headers_as_json: bool) -> pa.RecordBatch:
        """Rows ``start`` to ``stop`` in ``schema``'s columns."""
        props = (self._properties(start, stop, headers_as_json)
                 if any(name in _PROPERTY_COLUMNS for name in schema.names) else {})
        arrays = []
        for name, field in zip(schema.names, schema, strict=True):
            if name in self.spans:
                column = self.gather(name, start, stop, field.type)
                joined = [i for i in self.joined if start <= i < stop] if name == "body" else ()
                if joined:  # rare: put the bodies of several frames in their places
                    values = column.to_pylist()
                    for i in joined:
                        values[i - start] = self.joined[i]
                    column = pa.array(values, field.type)
            elif name == "redelivered":
                column = pa.array(self.redelivered[start:stop], field.type)
            elif name == "seq":
                column = pa.array(seqs[start:stop], field.type)
            else:
                column = props.get(name)
                if column is None:
                    column = pa.nulls(stop - start, field.type)
                elif not isinstance(column, pa.Array):
                    column = pa.array(column, field.type)
            arrays.append(column)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _properties(self, start: int, stop: int, headers_as_json: bool
                    ) -> dict[str, list[Any] | pa.Array]:
        """The property columns of rows ``start`` to ``stop``: in Arrow when every row
        carries exactly a delivery mode and a message id (what the sink publishes), else
        decoded row by row."""
        blob, offsets = self.blob, self.spans["properties"]
        count = stop - start
        usual = _mode_and_id(self.gather("properties", start, stop, pa.binary()))
        if usual is not None:
            return dict(zip(("delivery_mode", "message_id"), usual, strict=True))
        columns: dict[str, list[Any] | pa.Array] = {
            name: [None] * count for name in _PROPERTY_COLUMNS}
        for i in range(count):
            at, end = offsets[2 * (start + i)], offsets[2 * (start + i) + 1]
            if end - at == 2 and blob[at] == 0 and blob[at + 1] == 0:
                continue  # no properties
            for name, value in wire.decode_properties(blob[at:end]).items():
                if name == "headers":
                    if headers_as_json:
                        value = headers_to_json(value)
                    else:
                        value = [(str(k), header_value(v)) for k, v in value.items()]
                elif name == "timestamp":
                    value = value * 1_000_000
                elif name == "cluster_id":
                    continue
                columns[name][i] = value
        return columns

    def gather(self, part: str, start: int, stop: int, type_: pa.DataType) -> pa.Array:
        """Rows ``start`` to ``stop`` of a binary or string column: row ``i`` is the blob
        between ``self.spans[part][2 * i]`` and the offset after it.

        The offsets ascend, so they also describe a binary array over the whole blob
        whose values alternate between wanted parts and what lies between them; taking
        every other value copies the wanted ones out in C. A string column's UTF-8 is
        checked by the cast, as ``pa.array`` checks it."""
        count = stop - start
        bounds = pa.py_buffer(memoryview(self.spans[part])[2 * start : 2 * stop])
        spans = pa.Array.from_buffers(pa.large_binary(), max(0, 2 * count - 1),
                                      [None, bounds, self.buffer])
        return spans.take(_every_other(count)).cast(type_)


def _spans_by_arrow(blob: pa.Buffer, lengths: Sequence[int]
                    ) -> dict[str, array.array[int] | memoryview] | None:
    """The body and property spans of every message, found by Arrow from where each
    message starts: a few dozen C calls for a partition instead of a Python loop over its
    messages. Only for the usual shape, every body one frame and not empty; None for any
    other, which the walk takes (and names, if malformed).

    A message is its method frame, header frame and body frame back to back; each frame's
    size is a big-endian uint32 three octets in, so the next frame's start is a vector sum.
    """
    count = len(lengths)
    if not count:
        return None
    starts_all = array.array("q", itertools.accumulate(lengths, initial=0))
    starts = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(starts_all)])
    ends = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(starts_all)], offset=1)
    if starts_all[-1] != blob.size:
        return None
    octets = pa.Array.from_buffers(pa.uint8(), blob.size, [None, blob])

    def at(positions: pa.Array, plus: int) -> pa.Array:
        return octets.take(pc.add(positions, plus)).cast(pa.int64())

    def u32(positions: pa.Array, plus: int) -> pa.Array:
        high = pc.bit_wise_or(pc.shift_left(at(positions, plus), 24),
                              pc.shift_left(at(positions, plus + 1), 16))
        low = pc.bit_wise_or(pc.shift_left(at(positions, plus + 2), 8), at(positions, plus + 3))
        return pc.bit_wise_or(high, low)

    if pc.min(pc.subtract(ends, starts)).as_py() < 8:
        return None  # not even a frame: the walk says what is wrong
    header = pc.add(starts, pc.add(u32(starts, 3), 8))
    if not (pc.all(pc.less_equal(pc.add(header, 19), ends)).as_py()
            and _all_equal(at(header, 0), wire.FRAME_HEADER)):
        return None
    header_size = u32(header, 3)
    body_size = u32(header, 15)  # the low half of the 64-bit body size
    body = pc.add(header, pc.add(header_size, 8))
    if (not _all_equal(u32(header, 11), 0) or pc.min(body_size).as_py() < 1
            or not _all_equal(pc.subtract(ends, body), pc.add(body_size, 8))):
        return None  # an empty body, a body of several frames, or not a body frame next
    if not (_all_equal(at(body, 0), wire.FRAME_BODY)
            and _all_equal(pc.subtract(u32(body, 3), body_size), 0)):
        return None
    body_start = pc.add(body, 7)
    return {"body": _interleaved(body_start, pc.add(body_start, body_size)),
            "properties": _interleaved(pc.add(header, 19), pc.add(header, pc.add(header_size, 7)))}


def _all_equal(values: pa.Array, value: int) -> bool:
    return bool(pc.all(pc.equal(values, value)).as_py())


def _interleaved(firsts: pa.Array, seconds: pa.Array) -> memoryview:
    """firsts[0], seconds[0], firsts[1], ... as 64-bit integers."""
    count = len(firsts)
    order = _counting(2 * count)
    picks = pc.add(pc.shift_right(order, 1), pc.multiply(pc.bit_wise_and(order, 1), count))
    both = pa.concat_arrays([firsts.cast(pa.int64()), seconds.cast(pa.int64())])
    return memoryview(both.take(picks).buffers()[1]).cast("q")[: 2 * count]


def _counting(count: int) -> pa.Array:
    """0, 1, 2, ... (``count`` of them)."""
    global _COUNTING
    if len(_COUNTING) < count:
        _COUNTING = pa.array(range(max(count, 2 * ARROW_BATCH_ROWS)), pa.int64())
    return _COUNTING.slice(0, count)


_COUNTING = pa.array([], pa.int64())


def _every_other(count: int) -> pa.Array:
    """0, 2, 4, ... (``count`` of them)."""
    global _EVERY_OTHER
    if len(_EVERY_OTHER) < count:
        _EVERY_OTHER = pa.array(range(0, 2 * max(count, ARROW_BATCH_ROWS), 2), pa.int64())
    return _EVERY_OTHER.slice(0, count)


_EVERY_OTHER = pa.array([], pa.int64())


def _mode_and_id(properties: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """(delivery_mode, message_id) columns when every raw property list in
    ``properties`` holds exactly those two, else None."""
    if not len(properties) or pc.min(pc.binary_length(properties)).as_py() < 4:
        return None
    flags = pc.binary_slice(properties, 0, 2)
    if not pc.all(pc.equal(flags, pa.scalar(_PERSISTENT_WITH_ID, pa.binary()))).as_py():
        return None
    id_length = _octets(pc.binary_slice(properties, 3, 4)).cast(pa.int32())
    if not pc.all(pc.equal(pc.binary_length(properties),
                           pc.add(id_length, pa.scalar(4, pa.int32())))).as_py():
        return None  # malformed: the flags name two properties, the octets hold more
    return (_octets(pc.binary_slice(properties, 2, 3)).cast(pa.int32()),
            pc.binary_slice(properties, 4, 4 + 255).cast(pa.string()))


def _octets(one_byte_values: pa.Array) -> pa.Array:
    """A binary array of one-byte values (fresh from a slice: no offset) as uint8."""
    return pa.Array.from_buffers(pa.uint8(), len(one_byte_values),
                                 [None, one_byte_values.buffers()[2]])
