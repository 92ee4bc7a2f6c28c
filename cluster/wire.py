"""The replication link's frames, and how a follower proves it knows the cluster secret.

A frame is ``u32 length, u8 type, payload`` (length counts type and payload). The leader
opens with ``CHALLENGE`` (a random nonce); the follower answers ``HELLO`` (its node name,
last applied batch and lineage, and an HMAC-SHA256 of the nonce and its name under the
cluster secret); the leader answers ``STREAM`` (its lineage; batches follow) or
``SNAPSHOT`` (a consistent copy of its store follows in ``CHUNK``s up to ``END``, then
batches). ``BATCH`` is ``u64 epoch, u64 seq`` and a group-commit batch as
``persistence.batch_codec`` encodes it; the follower answers ``ACK`` (``u64 seq``) once it
has applied and synced it, and ``HEARTBEAT`` (empty) every ``HEARTBEAT_INTERVAL``.
Pure functions and one incremental reader: no sockets here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Any

CHALLENGE, HELLO, STREAM, SNAPSHOT, CHUNK, END, BATCH, ACK, REJECT, HEARTBEAT = range(1, 11)
_HEAD = struct.Struct(">IB")
_BATCH = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
# A frame larger than this is a broken or hostile peer (a batch is bounded by the group
# commit's MAX_PENDING operations, each at most a 512 MiB message in theory; 1 GiB is ample).
MAX_FRAME = 1 << 30
SNAPSHOT_CHUNK = 1 << 20
# A follower sends ``HEARTBEAT`` this often (seconds) once the leader has answered its
# ``HELLO``; a leader that hears nothing from it (no ack, no heartbeat) for
# ``LINK_TIMEOUT`` counts the link lost, so an idle leader notices a dead or stopped
# follower, not only a batch waiting for its ack. Heartbeats say "alive", never "applied":
# a follower receiving a snapshot sends them but no ack.
HEARTBEAT_INTERVAL = 0.5
LINK_TIMEOUT = 3.0


class WireError(Exception):
    """The peer sent something that is not a replication frame."""


def frame(kind: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack(len(payload) + 1, kind) + payload


def json_frame(kind: int, value: Any) -> bytes:
    return frame(kind, json.dumps(value, separators=(",", ":")).encode())


def batch_frame(epoch: int, seq: int, batch: bytes) -> bytes:
    return _HEAD.pack(len(batch) + 1 + _BATCH.size, BATCH) + _BATCH.pack(epoch, seq) + batch


def ack_frame(seq: int) -> bytes:
    return frame(ACK, _U64.pack(seq))


def parse_batch(payload: bytes) -> tuple[int, int, bytes]:
    epoch, seq = _BATCH.unpack_from(payload, 0)
    return epoch, seq, payload[_BATCH.size:]


def parse_ack(payload: bytes) -> int:
    if len(payload) != _U64.size:
        raise WireError("malformed ACK")
    seq: int = _U64.unpack(payload)[0]
    return seq


def parse_json(payload: bytes) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise WireError(f"malformed JSON frame: {exc}") from exc
    if not isinstance(value, dict):
        raise WireError("malformed JSON frame: not an object")
    return value


def proof(secret: bytes, nonce: bytes, node: str) -> str:
    return hmac.new(secret, nonce + node.encode(), hashlib.sha256).hexdigest()


def proof_ok(secret: bytes, nonce: bytes, node: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(proof(secret, nonce, node), given)


class Reader:
    """Frames out of a byte stream fed in pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buffer += data
        out: list[tuple[int, bytes]] = []
        at = 0
        while len(self._buffer) - at >= _HEAD.size:
            size, kind = _HEAD.unpack_from(self._buffer, at)
            if size < 1 or size > MAX_FRAME:
                raise WireError(f"frame of {size} bytes")
            if len(self._buffer) - at < 4 + size:
                break
            out.append((kind, bytes(self._buffer[at + _HEAD.size:at + 4 + size])))
            at += 4 + size
        del self._buffer[:at]
        return out
