"""The replication link's frames and the lineage comparison, as plain values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leveret.cluster import lineage, wire


@given(st.lists(st.tuples(st.integers(1, 9), st.binary(max_size=300)), max_size=20),
       st.integers(1, 64))
def test_reader_yields_the_frames_fed_in_any_pieces(frames: list[tuple[int, bytes]],
                                                    piece: int) -> None:
    stream = b"".join(wire.frame(kind, payload) for kind, payload in frames)
    reader = wire.Reader()
    out: list[tuple[int, bytes]] = []
    for at in range(0, len(stream), piece):
        out += reader.feed(stream[at:at + piece])
    assert out == frames


def test_batch_and_ack_frames_round_trip() -> None:
    [(kind, payload)] = wire.Reader().feed(wire.batch_frame(7, 42, b"ops"))
    assert kind == wire.BATCH and wire.parse_batch(payload) == (7, 42, b"ops")
    [(kind, payload)] = wire.Reader().feed(wire.ack_frame(42))
    assert kind == wire.ACK and wire.parse_ack(payload) == 42


def test_oversized_frame_is_refused() -> None:
    with pytest.raises(wire.WireError):
        wire.Reader().feed(b"\xff\xff\xff\xff\x07")


def test_proof_needs_the_secret_and_the_nonce() -> None:
    given_proof = wire.proof(b"secret", b"nonce", "n1")
    assert wire.proof_ok(b"secret", b"nonce", "n1", given_proof)
    assert not wire.proof_ok(b"other", b"nonce", "n1", given_proof)
    assert not wire.proof_ok(b"secret", b"other", "n1", given_proof)
    assert not wire.proof_ok(b"secret", b"nonce", "n2", given_proof)
    assert not wire.proof_ok(b"secret", b"nonce", "n1", None)


def test_epoch_at_tells_shared_history_from_a_deposed_leaders_tail() -> None:
    leader = [(3, 1), (9, 101)]  # epoch 9 started at batch 101
    deposed = [(3, 1)]  # wrote batch 101 itself in epoch 3, never shipped
    assert lineage.epoch_at(leader, 100) == lineage.epoch_at(deposed, 100) == 3
    assert lineage.epoch_at(leader, 101) == 9 != lineage.epoch_at(deposed, 101)
    assert lineage.epoch_at([], 5) == 0 == lineage.epoch_at(leader, 0)
