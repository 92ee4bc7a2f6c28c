"""Basic content properties: the property-flags word(s) and the property list.

Messages keep their properties as the publisher's bytes (``Message.raw_properties``);
this is the slow path that decodes them when routing (headers exchange), TTL,
priority, CC/BCC or dead-lettering need a value, and encodes the copies
dead-lettering and the broker make. pamqp does the field-table work.
"""

from __future__ import annotations

import struct

from pamqp import commands

from leveret.model import field_table

# Every table pamqp reads or writes (headers here, arguments in amqp.codec) keeps its types.
field_table.install()

try:  # Compiled, ``cython.compiled`` is true at compile time; pure, Cython's shadow says False.
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False

# --- properties (slow path, via pamqp) -------------------------------------

# What pamqp's property decoders raise on hostile input: struct/type errors
# are mostly converted by pamqp itself; timestamps can overflow datetime.
_u32 = struct.Struct(">I")

_PROPERTY_DECODE_ERRORS = (
    struct.error,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    OverflowError,
    OSError,
)


def decode_properties(raw_properties: bytes | memoryview) -> commands.Basic.Properties:
    """Decode raw property flags + list (as from decode_content_header)."""
    data = bytes(raw_properties)
    flags = 0
    offset = 0
    word_index = 0
    while True:
        if len(data) < offset + 2:
            raise ValueError("content header property flags are truncated")
        word = (data[offset] << 8) | data[offset + 1]
        flags |= word << (16 * word_index)
        offset += 2
        word_index += 1
        if not word & 1:  # low bit set means another flag word follows
            break
    props = commands.Basic.Properties()
    try:
        field_table.unmarshal_properties(props, flags, data[offset:])
    except _PROPERTY_DECODE_ERRORS as exc:
        raise ValueError(f"malformed content properties: {exc}") from exc
    return props


def encode_properties(props: commands.Basic.Properties) -> bytes:
    """Encode properties to raw flags + list (pamqp's own marshal)."""
    try:
        return props.marshal()
    except (TypeError, struct.error) as exc:
        raise ValueError(f"cannot encode content properties: {exc}") from exc


# --- validation (on publish, before anything is relayed) ---------------------

_SHORTSTR, _OCTET, _TIMESTAMP, _TABLE = range(4)
# basic's properties in wire order: (flag bit, encoding); the two low bits are not properties.
_LAYOUT = (
    (1 << 15, _SHORTSTR),  # content-type
    (1 << 14, _SHORTSTR),  # content-encoding
    (1 << 13, _TABLE),  # headers
    (1 << 12, _OCTET),  # delivery-mode
    (1 << 11, _OCTET),  # priority
    (1 << 10, _SHORTSTR),  # correlation-id
    (1 << 9, _SHORTSTR),  # reply-to
    (1 << 8, _SHORTSTR),  # expiration
    (1 << 7, _SHORTSTR),  # message-id
    (1 << 6, _TIMESTAMP),  # timestamp
    (1 << 5, _SHORTSTR),  # type
    (1 << 4, _SHORTSTR),  # user-id
    (1 << 3, _SHORTSTR),  # app-id
    (1 << 2, _SHORTSTR),  # cluster-id
)
_PLANS: dict[int, tuple[int, ...]] = {}  # flag word -> its properties' kinds, in wire order


def _plan(flags: int) -> tuple[int, ...]:
    """The kinds of the properties ``flags`` announces, in wire order (cached per flag
    word: at most 2**15, and a publisher uses a few)."""
    plan = _PLANS[flags] = tuple(kind for bit, kind in _LAYOUT if flags & bit)
    return plan


def check_properties(raw: bytes) -> None:
    """Raise ``ValueError`` unless ``raw`` is a property list that can be relayed.

    As RabbitMQ 3.10 decodes every publish's properties (rabbit_binary_parser):
    every flagged property present and well-formed, ``headers`` a field table
    (known types, every length inside its container, at any depth: walked, not
    decoded), and nothing after the list. Strings are not checked for UTF-8 (RabbitMQ does
    not). Stricter than RabbitMQ on purpose: a set continuation bit (bit 0) is
    refused, since basic has one flag word and clients that honour the bit (pamqp)
    could not read the relayed header; and a table key must be UTF-8, as
    everywhere Leveret decodes tables.
    """
    end = len(raw)
    if end < 2:
        raise ValueError("property flags are truncated")
    # Compiled (``properties.pxd``), ``p`` is a C pointer into ``raw`` and every read below
    # is a C read, each after its bounds test; pure, ``p`` is ``raw`` and the same lines index it.
    p: bytes = raw
    flags = (p[0] << 8) | p[1]
    if flags & 1:
        raise ValueError("a second property flag word (basic has one)")
    pos = 2
    for kind in _PLANS.get(flags) or _plan(flags):
        if pos >= end:
            raise ValueError("property list is truncated")
        if kind == _SHORTSTR:
            pos += 1 + p[pos]
        elif kind == _TABLE:
            pos = _check_table(raw, pos, end)
        elif kind == _OCTET:
            pos += 1
        else:  # _TIMESTAMP
            pos += 8
        if pos > end:
            raise ValueError("property list is truncated")
    if pos != end:
        raise ValueError(f"{end - pos} byte(s) after the property list")


# Field value type codes of a fixed size (field_table's types); S and x carry a length.
_FIXED = {b: n for n, codes in ((0, b"V"), (1, b"bBt"), (2, b"su"), (4, b"Iif"), (5, b"D"),
                                (8, b"lLdT")) for b in codes}
_LENGTH = frozenset(b"Sx")
_TABLE_CODE, _ARRAY_CODE = ord("F"), ord("A")


def _check_table(raw: bytes, pos: int, end: int) -> int:
    """Walk the field table at ``pos``; its end, or ``ValueError``. Iterative, so any depth
    RabbitMQ relays is relayed too (decoding stops at field_table.MAX_DEPTH, later)."""
    stack: list[tuple[int, bool]] = []  # (end of an enclosing container, is it a table)
    in_table = True
    if pos + 4 > end:
        raise ValueError("headers table length is truncated")
    stop = pos + 4 + _u32.unpack_from(raw, pos)[0]
    if stop > end:
        raise ValueError("headers table runs past the property list")
    pos += 4
    while True:
        if pos == stop:
            if not stack:
                return pos
            stop, in_table = stack.pop()
            continue
        if in_table:
            key_end = pos + 1 + raw[pos]
            if key_end > stop:
                raise ValueError("field table key runs past its table")
            try:
                raw[pos + 1:key_end].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"field table key is not UTF-8: {exc}") from exc
            pos = key_end
            if pos >= stop:
                raise ValueError("field value type is missing")
        code = raw[pos]
        pos += 1
        size = _FIXED.get(code)
        if size is None:
            if code in _LENGTH:
                if pos + 4 > stop:
                    raise ValueError("field value runs past its container")
                size = 4 + _u32.unpack_from(raw, pos)[0]
            elif code in (_TABLE_CODE, _ARRAY_CODE):
                if pos + 4 > stop:
                    raise ValueError("field container length runs past its container")
                inner = pos + 4 + _u32.unpack_from(raw, pos)[0]
                if inner > stop:
                    raise ValueError("field container runs past its container")
                stack.append((stop, in_table))
                stop, in_table, pos = inner, code == _TABLE_CODE, pos + 4
                continue
            else:
                raise ValueError(f"unknown field value type {bytes([code])!r}")
        pos += size
        if pos > stop:
            raise ValueError("field value runs past its container")

