"""Message deduplication: the window of seen keys, the keys, and the declare-time arguments.

Theory of operation
-------------------
A publisher that retries after a lost confirm sends the same message twice; a header names
it (``x-deduplication-header`` by default), and a broker that remembers the names it has
seen can drop the second copy. Two user bases name the feature differently, and both are
accepted (``settings_for_exchange``):

* the RabbitMQ plugin's exchange type ``x-message-deduplication`` (routes as fanout), with
  ``x-cache-size`` (required), ``x-cache-ttl`` and ``x-cache-persistence``, refused with the
  plugin's 406 texts;
* LavinMQ's ``x-message-deduplication: true`` on an exchange of any type (``x-cache-size``
  defaults to 128), with ``x-deduplication-header`` naming the header that holds the key.

A queue with ``x-message-deduplication: true`` deduplicates while a message is in it (the
plugin's queue mode: ``queues/dedupe.py``).

``Window`` (``dedupe_window.py``) is the exchange-level memory: exact FIFO eviction at
``size`` (the plugin evicts at random), and TTL expiry judged on lookup, so an expired key
is absent whether or not it was swept; what is durable is ``broker/dedupe.py``'s.

Keys are typed (``dedupe_key``): a string ``"1"``, an integer ``1`` and bytes ``b"1"`` are
three keys, as they are three different header values on the wire. A key too long for a
store key is replaced by a digest of itself.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leveret.model.errors import PRECONDITION_FAILED, ChannelError
from leveret.model.field_table import _decode_value
from leveret.model.message import Message

try:  # Compiled, ``cython.compiled`` is true at compile time; pure, Cython's shadow says False.
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False
_U32 = struct.Struct(">I")

EXCHANGE_TYPE = "x-message-deduplication"
ARGUMENT = "x-message-deduplication"  # LavinMQ's, on any exchange; the plugin's, on a queue
HEADER = "x-deduplication-header"  # the message header holding the key (the default name)
TTL_HEADER = "x-cache-ttl"  # a per-message TTL, overriding the exchange's
DEFAULT_SIZE = 128  # LavinMQ's default window when the argument is not given
# Keys longer than this are stored as a digest: LMDB refuses keys over 511 bytes, and the
# store prefixes each with its scope.
MAX_KEY_BYTES = 400

_SIZE_TEXT = "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"
_TTL_TEXT = "Invalid argument, 'x-cache-ttl' must be an integer greater than 0"
_PERSISTENCE_TEXT = "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'"


@dataclass(frozen=True, slots=True)
class DedupeSettings:
    """One exchange's window: its size, its default TTL (ms, None: none), the header holding
    the key, and whether it is kept in the store (``x-cache-persistence``)."""

    size: int
    ttl: int | None
    header: str
    persistent: bool


def _positive(value: object) -> int | None:
    """A positive integer, from an integer or a decimal string (the plugin parses strings)."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        try:
            value = int(value.strip(), 10)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _text(value: object) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def is_dedupe_exchange(type_: str, arguments: Mapping[str, Any]) -> bool:
    """The plugin's exchange type, or LavinMQ's argument set true on any type."""
    return type_ == EXCHANGE_TYPE or arguments.get(ARGUMENT) is True


def settings_for_exchange(type_: str, arguments: Mapping[str, Any], durable: bool,
                          policy: Mapping[str, Any] | None = None) -> DedupeSettings | None:
    """The exchange's window, None if it does not deduplicate; 406 with the plugin's texts
    for a bad argument. A durable exchange keeps its window in the store unless
    ``x-cache-persistence`` says ``memory``; the plugin defaults to memory, but a window lost
    by a restart lets through exactly the retries it exists to stop. A transient exchange's
    window is never stored (``disk`` included): it could only outlive its exchange.

    ``policy``: the window keys of the exchange's policy (``queues/policy.dedupe_keys``,
    checked when it was set), used where the arguments do not set the key: the argument
    wins, as for ``alternate-exchange``. The plugin's type still needs ``x-cache-size``
    among its arguments when declared (its ``validate`` does not look at policies)."""
    if not is_dedupe_exchange(type_, arguments):
        return None
    if policy:
        arguments = {**policy, **{k: v for k, v in arguments.items() if v is not None}}
    raw_size = arguments.get("x-cache-size")
    if raw_size is None and type_ != EXCHANGE_TYPE:
        size: int | None = DEFAULT_SIZE
    else:
        size = _positive(raw_size)
    if size is None:
        raise ChannelError(PRECONDITION_FAILED, _SIZE_TEXT)
    ttl = None
    if arguments.get("x-cache-ttl") is not None:
        ttl = _positive(arguments["x-cache-ttl"])
        if ttl is None:
            raise ChannelError(PRECONDITION_FAILED, _TTL_TEXT)
    persistence = arguments.get("x-cache-persistence")
    if persistence is not None and _text(persistence) not in ("disk", "memory"):
        raise ChannelError(PRECONDITION_FAILED, _PERSISTENCE_TEXT)
    header = _text(arguments.get(HEADER)) or HEADER
    # A transient exchange's window goes with it at a restart, whatever it says.
    persistent = durable and _text(persistence) != "memory"
    return DedupeSettings(size, ttl, header, persistent)


def queue_deduplicates(arguments: Mapping[str, Any]) -> bool:
    """A queue declared with ``x-message-deduplication: true`` (the plugin's queue mode)."""
    return arguments.get(ARGUMENT) is True


def queue_header(arguments: Mapping[str, Any]) -> str:
    """The header a deduplicating queue reads the key from: LavinMQ lets the queue's
    ``x-deduplication-header`` argument name it; the plugin's publishers set the header of
    that name, which is the default."""
    return _text(arguments.get(HEADER)) or HEADER


def dedupe_key(value: object) -> bytes | None:
    """The typed key of a header value; None for a value that names nothing (void)."""
    if value is None:
        return None
    if isinstance(value, str):
        key = b"s" + value.encode("utf-8", "surrogateescape")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        key = b"b" + bytes(value)
    elif isinstance(value, bool):
        key = b"t" if value else b"f"
    elif isinstance(value, int):  # field_table's typed ints: every width is one integer
        key = b"i" + str(int(value)).encode("ascii")
    else:  # floats, decimals, timestamps, tables, arrays: their type and their text
        key = b"o" + f"{type(value).__name__}:{value!r}".encode("utf-8", "surrogateescape")
    if len(key) > MAX_KEY_BYTES:
        key = b"h" + hashlib.blake2b(key, digest_size=32).digest()
    return key


# Field value type codes of a fixed size, and those with a u32 length (field_table's types).
_FIXED = {b: n for n, codes in ((0, b"V"), (1, b"bBt"), (2, b"su"), (4, b"Iif"), (5, b"D"),
                                (8, b"lLdT")) for b in codes}
_SIZED = frozenset(b"SxFA")
_LONGSTR = ord("S")
_U32 = struct.Struct(">I")


def _utf8(data: bytes) -> bool:
    """A long string decodes as text (else ``field_table`` reads it as bytes)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class HeaderReader:
    """Reads a message's key header, and optionally one more, from its raw properties.

    Decoding every property (pamqp) costs about 25 us a message, more than the rest of a
    deduplicated publish; this walks the headers table's keys, skips the other values by
    their size, and reads only the wanted ones. A long-string key (the usual) becomes its
    typed key straight from the wire bytes (text, or bytes if not UTF-8, as
    ``field_table`` reads it); any other value is decoded by ``field_table``'s decoder, so
    every key is the one ``Message.headers`` would give. The table was checked when the message
    was published (``properties.py``); a malformed one reads as no headers.

    Compiled (``dedupe.pxd``) it is an extension type whose ``key`` is a C call from the
    window's ``check``; the table whose one field is the key is read with C integers and a
    pointer into the properties (pure, the same lines index the bytes).
    """

    __slots__ = ("_fixed", "_head", "_key", "_other")

    def __init__(self, key: str, other: str | None = None) -> None:
        self._key = key.encode("utf-8")
        self._other = other.encode("utf-8") if other is not None else None
        # A table whose one field is the key as a long string (the usual): the field's name
        # and type code (``_head``), and the table's size less the string's (``_fixed``: the
        # string starts 4 bytes after the head). A name over 255 bytes is in no table.
        self._head = bytes((len(self._key) & 0xFF,)) + self._key + b"S"
        self._fixed = len(self._head) + 4 if len(self._key) < 256 else -1

    def read(self, message: Message) -> tuple[bytes | None, object]:
        """(the typed key, ``dedupe_key``'s; the other header's value), None where absent."""
        at = message._peek()[0]  # (a C call compiled; the first reader of it peeks)
        if at < 0:
            return None, None
        raw = message.raw_properties
        key = self._alone(raw, at)
        if key is not None:
            return key, None
        return self._walk(raw, at)

    def sole(self, message: Message) -> bytes | None:
        """The typed key when the headers table holds it alone (the usual: then no other
        header is there), else None (``read`` it): no tuple to build and take apart."""
        at = message._peek()[0]
        if at < 0:
            return None
        return self._alone(message.raw_properties, at)

    def key(self, message: Message) -> bytes | None:
        """The typed key alone (the other header is not looked for: a queue's key)."""
        at = message._peek()[0]
        if at < 0:
            return None
        raw = message.raw_properties
        key = self._alone(raw, at)
        if key is not None:
            return key
        return self._walk(raw, at)[0]

    def _alone(self, raw: bytes, at: int) -> bytes | None:
        """The key of a table whose one field is the key as a long string short enough to
        be its own key (the table was checked at publish: the string is all there); None
        for any other table (``_walk`` reads it)."""
        fixed = self._fixed
        n = fixed - 4
        if fixed < 0 or len(raw) - at < fixed + 4:
            return None
        start = at + 4
        p = raw
        if COMPILED:  # the field's head and the integers through the pointers
            h = self._head
            if memcmp(p + start, h, n) != 0:  # type: ignore[name-defined,operator]  # noqa: F821
                return None
        elif not raw.startswith(self._head, start):
            return None
        start += n
        if COMPILED:  # C integers through the pointer
            size = (p[at] << 24) | (p[at + 1] << 16) | (p[at + 2] << 8) | p[at + 3]
            length = (p[start] << 24) | (p[start + 1] << 16) | (p[start + 2] << 8) | p[start + 3]
        else:  # pure: a struct call each, cheaper than eight indexings in bytecode
            size = _U32.unpack_from(raw, at)[0]
            length = _U32.unpack_from(raw, start)[0]
        if size != fixed + length or length >= MAX_KEY_BYTES:
            return None
        start += 4
        end = start + length
        if COMPILED and length:
            i = start
            while i < end and p[i] < 0x80:
                i += 1
            if i == end:  # ASCII, so text (the usual): one copy, no concatenation
                key = p[start - 1:end]  # its first byte (the length's last) becomes the type
                q = key
                q[0] = 115  # type: ignore[index]  # b"s" through the char *, no one else holds it
                return key
        data = p[start:end]  # compiled: copied from the pointer, no slice object
        return b"s" + data if data.isascii() or _utf8(data) else b"b" + data

    def _walk(self, raw: bytes, at: int) -> tuple[bytes | None, object]:
        """Any other table: its fields in order, the wanted ones read, the others skipped."""
        key: bytes | None = None
        other: object = None
        want_key, want_other = self._key, self._other
        left = 1 if want_other is None else 2
        try:
            pos = at + 4
            end = pos + _U32.unpack_from(raw, at)[0]
            while pos < end:
                stop = pos + 1 + raw[pos]
                name = raw[pos + 1:stop]
                pos = stop
                if name == want_key:
                    if raw[pos] == _LONGSTR:  # the usual: its bytes are the key's
                        stop = pos + 5 + _U32.unpack_from(raw, pos + 1)[0]
                        if stop > end:
                            raise ValueError("field value runs past its table")
                        data = raw[pos + 5:stop]
                        key = b"s" + data if data.isascii() or _utf8(data) else b"b" + data
                        if len(key) > MAX_KEY_BYTES:
                            key = b"h" + hashlib.blake2b(key, digest_size=32).digest()
                        pos = stop
                    else:
                        pos, value = _decode_value(memoryview(raw), pos, end, 1)
                        key = dedupe_key(value)
                elif name == want_other:
                    pos, other = _decode_value(memoryview(raw), pos, end, 1)
                else:
                    code = raw[pos]
                    size = _FIXED.get(code)
                    if size is None:
                        if code not in _SIZED:
                            raise ValueError(f"unknown field value type {code}")
                        size = 4 + _U32.unpack_from(raw, pos + 1)[0]
                    pos += 1 + size
                    continue
                left -= 1
                if not left:
                    break
        except (IndexError, ValueError, struct.error):
            return None, None
        return key, other


def message_ttl(value: object, default: int | None) -> int | None:
    """The window's TTL for a message whose ``x-cache-ttl`` header is ``value``: that if a
    positive integer, else the exchange's."""
    ttl = _positive(value)
    return default if ttl is None else ttl
