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

``Window`` is the exchange-level memory: exact FIFO eviction at ``size`` (the plugin evicts
at random), and TTL expiry judged on lookup, so an expired key is absent whether or not it
was swept. It is a pure structure (times are passed in, wall-clock ms) so that it can be
tested against a naive model; what is durable is ``broker/dedupe.py``'s.

Keys are typed (``dedupe_key``): a string ``"1"``, an integer ``1`` and bytes ``b"1"`` are
three keys, as they are three different header values on the wire. A key too long for a
store key is replaced by a digest of itself.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from leveret.model.errors import PRECONDITION_FAILED, ChannelError

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


def settings_for_exchange(type_: str, arguments: Mapping[str, Any],
                          durable: bool) -> DedupeSettings | None:
    """The exchange's window, None if it does not deduplicate; 406 with the plugin's texts
    for a bad argument. A durable exchange keeps its window in the store unless
    ``x-cache-persistence`` says ``memory``; the plugin defaults to memory, but a window lost
    by a restart lets through exactly the retries it exists to stop. A transient exchange's
    window is never stored (``disk`` included): it could only outlive its exchange."""
    if not is_dedupe_exchange(type_, arguments):
        return None
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
    elif isinstance(value, int):
        key = b"i" + str(value).encode("ascii")
    else:  # floats, decimals, timestamps, tables, arrays: their type and their text
        key = b"o" + f"{type(value).__name__}:{value!r}".encode("utf-8", "surrogateescape")
    if len(key) > MAX_KEY_BYTES:
        key = b"h" + hashlib.blake2b(key, digest_size=32).digest()
    return key


def message_key(headers: Mapping[str, Any] | None, header: str) -> bytes | None:
    """The key a message carries in ``header``, None without one (never deduplicated)."""
    if not headers:
        return None
    return dedupe_key(headers.get(header))


def message_ttl(headers: Mapping[str, Any] | None, default: int | None) -> int | None:
    """The window's TTL for this message: its ``x-cache-ttl`` header if a positive integer,
    else the exchange's."""
    if headers:
        ttl = _positive(headers.get(TTL_HEADER))
        if ttl is not None:
            return ttl
    return default


class Window:
    """Keys seen, oldest first, each with its expiry (wall-clock ms, 0: never).

    ``add`` evicts the oldest keys beyond ``size`` (exact FIFO) and returns them, so that a
    durable window can remove them from the store in the same batch. A key added again after
    it expired moves to the newest end.
    """

    __slots__ = ("_keys", "size")

    def __init__(self, size: int, entries: Iterable[tuple[bytes, int]] = ()) -> None:
        self.size = size
        self._keys: OrderedDict[bytes, int] = OrderedDict(entries)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def seen(self, key: bytes, now: int) -> bool:
        """``key`` is in the window and not expired at ``now``."""
        expires = self._keys.get(key)
        return expires is not None and (expires == 0 or now < expires)

    def add(self, key: bytes, expires: int) -> list[bytes]:
        """Remember ``key`` until ``expires`` (0: until evicted); returns the evicted keys."""
        keys = self._keys
        if key in keys:
            del keys[key]
        keys[key] = expires
        evicted: list[bytes] = []
        while len(keys) > self.size:
            evicted.append(keys.popitem(last=False)[0])
        return evicted

    def discard(self, key: bytes) -> bool:
        return self._keys.pop(key, None) is not None

    def items(self) -> list[tuple[bytes, int]]:
        """(key, expires), oldest first."""
        return list(self._keys.items())

    def resize(self, size: int) -> list[bytes]:
        """A new size (a redeclared or recovered window); returns the keys evicted."""
        self.size = size
        evicted: list[bytes] = []
        while len(self._keys) > size:
            evicted.append(self._keys.popitem(last=False)[0])
        return evicted
