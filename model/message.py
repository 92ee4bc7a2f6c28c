"""A published message, stored once however many queues it reaches.

Properties stay as the publisher's raw bytes (flags + property list) and are
relayed unchanged to consumers. Only the few fields the broker itself needs
(headers for the headers exchange, delivery-mode for persistence, later
expiration and priority) are read, lazily, by walking the property list
without building a full pamqp object.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from leveret.model.properties import decode_properties

# Property flag bits, in wire order (AMQP 0-9-1 basic class).
FLAG_CONTENT_TYPE = 1 << 15
FLAG_CONTENT_ENCODING = 1 << 14
FLAG_HEADERS = 1 << 13
FLAG_DELIVERY_MODE = 1 << 12
FLAG_PRIORITY = 1 << 11
FLAG_CORRELATION_ID = 1 << 10
FLAG_REPLY_TO = 1 << 9
FLAG_EXPIRATION = 1 << 8
FLAG_USER_ID = 1 << 4

# The peek's copies of the flags: C integers when compiled (message.pxd), so testing one is
# not a lookup of a module global on every publish.
_CT, _CE, _HD, _DM = FLAG_CONTENT_TYPE, FLAG_CONTENT_ENCODING, FLAG_HEADERS, FLAG_DELIVERY_MODE
_PR, _CI, _RT, _EX = FLAG_PRIORITY, FLAG_CORRELATION_ID, FLAG_REPLY_TO, FLAG_EXPIRATION

_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")

PERSISTENT = 2


class Message:
    """One published message: routing info, raw properties and body."""

    __slots__ = ("_peeked", "_props", "body", "exchange", "raw_properties", "routing_key", "store_id")

    def __init__(self, exchange: str, routing_key: str, raw_properties: bytes, body: bytes) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.raw_properties = raw_properties
        self.body = body
        self._props: Any = None
        # (headers offset or -1, delivery_mode, priority, expiration ms or -1) once peeked:
        # readers of one header (model/dedupe.py) start at the offset.
        self._peeked: tuple[int, int, int, int] | None = None
        self.store_id: int = 0

    def __len__(self) -> int:
        return len(self.body)

    @property
    def properties(self) -> Any:
        """The full pamqp ``Basic.Properties`` (slow path; cached).

        Raises ``ValueError`` for a malformed property list: it is only decoded
        here, lazily, so the caller maps that to a protocol error.
        """
        if self._props is None:
            self._props = decode_properties(self.raw_properties)
        return self._props

    def _peek(self) -> tuple[int, int, int, int]:
        peeked = self._peeked
        if peeked is None:
            peeked = self._peeked = _peek_properties(self.raw_properties)
        return peeked

    @property
    def delivery_mode(self) -> int:
        return self._peek()[1]

    @property
    def persistent(self) -> bool:
        return self._peek()[1] == PERSISTENT

    @property
    def priority(self) -> int:
        return self._peek()[2]

    @property
    def expiration(self) -> int:
        """Per-message TTL in ms from the ``expiration`` property; -1 when absent or invalid."""
        return self._peek()[3]

    @property
    def has_expiration(self) -> bool:
        """The expiration flag is set (checked on every publish, so no decoding)."""
        raw = self.raw_properties
        return len(raw) >= 2 and bool(_u16.unpack_from(raw, 0)[0] & FLAG_EXPIRATION)

    @property
    def has_user_id(self) -> bool:
        """The user-id flag is set (checked on every publish, so no decoding)."""
        raw = self.raw_properties
        return len(raw) >= 2 and bool(_u16.unpack_from(raw, 0)[0] & FLAG_USER_ID)

    @property
    def headers(self) -> dict[str, Any] | None:
        """Message headers, decoded only when asked for (headers exchange, x-death)."""
        if not self.raw_properties or not (_u16.unpack_from(self.raw_properties, 0)[0] & FLAG_HEADERS):
            return None
        headers = self.properties.headers
        return headers if headers is not None else None


def _peek_properties(raw: bytes) -> tuple[int, int, int, int]:
    """Walk the property list just far enough to find delivery-mode, priority, expiration.

    Returns (headers offset or -1, delivery_mode or 0, priority or 0, expiration
    in ms or -1 when absent or not a valid TTL: see ``parse_expiration``). Malformed
    properties yield zeros: they were accepted at publish time and are relayed
    as they are; only the fields the broker reads must be well-formed.
    """
    try:
        flags = _u16.unpack_from(raw, 0)[0]
        pos = 2
        if flags & 1:  # continuation flag word(s): skip them
            while _u16.unpack_from(raw, pos - 2)[0] & 1:
                pos += 2
        if flags & _CT:
            pos += 1 + raw[pos]
        if flags & _CE:
            pos += 1 + raw[pos]
        headers_at = -1
        if flags & _HD:
            headers_at = pos
            pos += 4 + _u32.unpack_from(raw, pos)[0]
        mode = 0
        if flags & _DM:
            mode = raw[pos]
            pos += 1
        prio = 0
        if flags & _PR:
            prio = raw[pos]
            pos += 1
        expiration = -1
        if flags & _EX:
            if flags & _CI:
                pos += 1 + raw[pos]
            if flags & _RT:
                pos += 1 + raw[pos]
            text = bytes(raw[pos + 1:pos + 1 + raw[pos]]).decode("ascii", "replace")
            ttl = parse_expiration(text)
            expiration = ttl if isinstance(ttl, int) else -1
        return headers_at, mode, prio, expiration
    except (IndexError, struct.error):
        return -1, 0, 0, -1


_INTEGER = re.compile(r"[+-]?[0-9]+")
# The longest per-message TTL RabbitMQ 3.10 accepts (ten years, in ms), found by probing it.
MAX_MESSAGE_TTL = 315_360_000_000


def parse_expiration(text: str) -> int | str:
    """The ``expiration`` property as RabbitMQ 3.10 reads it (rabbit_basic:parse_expiration).

    Returns the TTL in ms, or RabbitMQ's error term for ``invalid expiration '…': <term>``:
    Erlang's string:to_integer takes an optional sign and digits, nothing else (no
    spaces); negative values and values above ten years are refused. RabbitMQ 3.10
    accepts values above the 2^32-1 timer limit for messages (checked: "99999999999"
    is accepted).
    """
    match = _INTEGER.match(text)
    if match is None:
        return "no_integer"
    if match.end() != len(text):
        return f'{{leftover_string,"{text[match.end():]}"}}'
    value = int(match.group())
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > MAX_MESSAGE_TTL:
        return _erlang_pair("value_too_large", value, len(f"invalid expiration '{text}': "))
    return value


def _erlang_pair(tag: str, value: int, column: int) -> str:
    """``{tag,value}`` as Erlang's ``~p`` prints it starting at ``column``: a term that
    would reach column 79 breaks after the comma, indented one past the brace (the
    threshold and indent were probed on RabbitMQ 3.10)."""
    flat = f"{{{tag},{value}}}"
    if column + len(flat) <= 78:
        return flat
    return f"{{{tag},\n{' ' * (column + 1)}{value}}}"
