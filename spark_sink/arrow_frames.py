"""A batch of rows' publish frames built by Arrow: no Python object per row.

Theory of operation
-------------------
A sink row whose only property besides its delivery mode is its ``message_id`` (what a
source row carries, or the generated id), and whose body fits one frame, is published as
the same twelve pieces every time: its ``Basic.Publish`` frame, the content header frame
(whose size fields depend only on the id's length and the body's), the property list, the
body frame. Each piece is a column (or one value for all rows), so Arrow's
``binary_join_element_wise`` lays the whole batch's frames out in one buffer, in C, with
the body copied once; the publisher sends slices of that buffer. Python's share of a row
is then nothing: the 1 KB body never becomes a ``bytes``, and no tuple of pieces is built
(``wire.encode_publishes`` does both, and stays the general path and this one's oracle:
``tests/unit/test_spark_arrow_frames.py`` checks the two byte for byte).

The numbers inside the frames vary per row: the header frame's payload size and the id's
length octet depend on the id's length (0-255), so they come from a 256-entry table by
``take``; the body size is four big-endian octets (a body that fits one frame is below
2**32), split with Arrow's shifts into one-octet columns.
"""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

from .wire import BASIC_CLASS, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_OVERHEAD, PROPERTY_FLAGS

_FLAGS = {name: flag for name, flag, _kind in PROPERTY_FLAGS}
_HEADER_START = struct.Struct(">BHIHH")  # type, channel, payload size, class, weight
_BODY_START = struct.Struct(">BBH")  # the header frame's end octet, body frame type, channel
_SIZE_HIGH = b"\x00\x00\x00\x00"  # the body size's upper half: a one-frame body is < 2**32
_PERSISTENT = b"\x02"
_HEADER_FIXED = 12  # class, weight, body size


def frames_of(
    method_frames: bytes | pa.Array, channel: int, ids: pa.Array, bodies: pa.Array,
    persistent: bool, frame_max: int,
) -> pa.Array | None:
    """Row ``i``'s whole publish (method, header and body frames) as value ``i``, or None
    when a body is empty or needs more than one frame (the general path encodes those).

    ``method_frames`` is one ``Basic.Publish`` frame for all rows or a binary column of
    them; ``ids`` a binary column of message ids (no nulls, each at most 255 octets);
    ``bodies`` a binary or large binary column without nulls."""
    rows = len(bodies)
    if not rows:
        return None
    sizes = pc.binary_length(bodies)
    low_high = pc.min_max(sizes).as_py()
    if low_high["min"] < 1 or low_high["max"] > frame_max - FRAME_OVERHEAD:
        return None
    kind = bodies.type
    id_lengths = pc.binary_length(ids)
    size4 = pc.binary_join_element_wise(*_octets(sizes, 4, kind), pa.scalar(b"", kind))
    header_start, props_start = _id_tables(channel, persistent, kind)
    method = (pa.scalar(method_frames, kind) if isinstance(method_frames, bytes)
              else method_frames.cast(kind))
    return pc.binary_join_element_wise(
        method,
        header_start.take(id_lengths), pa.scalar(_SIZE_HIGH, kind), size4,
        props_start.take(id_lengths), ids.cast(kind),
        pa.scalar(_BODY_START.pack(FRAME_END, FRAME_BODY, channel), kind), size4,
        bodies, pa.scalar(bytes((FRAME_END,)), kind),
        pa.scalar(b"", kind))


def _octets(values: pa.Array, width: int, kind: pa.DataType) -> list[pa.Array]:
    """``values`` (non-negative integers) as ``width`` one-octet columns, most significant
    first."""
    count = len(values)
    offsets = _counting(count + 1)
    out = []
    for shift in range(8 * (width - 1), -8, -8):
        octet = pc.bit_wise_and(pc.shift_right(values, shift), 0xFF).cast(pa.uint8())
        out.append(pa.Array.from_buffers(pa.binary(), count, [None, offsets, octet.buffers()[1]]
                                         ).cast(kind))
    return out


def _counting(count: int) -> pa.Buffer:
    """0, 1, 2, ... as int32 (at least ``count`` of them): offsets of one-octet values."""
    global _COUNTING
    if len(_COUNTING) < count:
        _COUNTING = pa.array(range(max(count, 1 << 14)), pa.int32())
    buffer: pa.Buffer = _COUNTING.buffers()[1]
    return buffer


_COUNTING = pa.array([], pa.int32())
_TABLES: dict[tuple[int, bool, pa.DataType], tuple[pa.Array, pa.Array]] = {}


def _id_tables(channel: int, persistent: bool, kind: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """By id length: the header frame's start (its payload size depends on it) and the
    property list's start up to the id (flags, delivery mode, the id's length octet)."""
    key = (channel, persistent, kind)
    tables = _TABLES.get(key)
    if tables is None:
        flags = _FLAGS["message_id"] | (_FLAGS["delivery_mode"] if persistent else 0)
        head = flags.to_bytes(2, "big") + (_PERSISTENT if persistent else b"")
        starts = [_HEADER_START.pack(FRAME_HEADER, channel,
                                     _HEADER_FIXED + len(head) + 1 + length, BASIC_CLASS, 0)
                  for length in range(256)]
        tables = _TABLES[key] = (pa.array(starts, kind),
                                 pa.array([head + bytes((n,)) for n in range(256)], kind))
    return tables
