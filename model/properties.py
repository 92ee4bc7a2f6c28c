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

# --- properties (slow path, via pamqp) -------------------------------------

# What pamqp's property decoders raise on hostile input: struct/type errors
# are mostly converted by pamqp itself; timestamps can overflow datetime.
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
