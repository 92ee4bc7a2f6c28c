"""Publisher-confirm bookkeeping for one channel (pure, no I/O).

After ``confirm.select`` every publish gets the next sequence number, from 1.
A message is *held* while something still has to happen before it may be
confirmed (a store commit, for persistent messages in durable queues), and is
*settled* as ack or nack once that is done; messages that need nothing are
settled at once. ``drain`` turns the settled set into the fewest confirm
frames: nacks one by one, then a single ``basic.ack(multiple=True)`` for every
acked sequence below the oldest message still held, and individual acks for
those above it. Each sequence is confirmed exactly once.
"""

from __future__ import annotations

from collections import deque

Confirm = tuple[int, bool, bool]  # (delivery_tag, multiple, is_ack)


class ConfirmTracker:
    __slots__ = ("_acked", "_held", "_held_order", "_nacked", "confirmed", "next_seq")

    def __init__(self) -> None:
        self.next_seq = 1
        self._held: set[int] = set()
        self._held_order: deque[int] = deque()
        self._acked: list[int] = []
        self._nacked: list[int] = []
        self.confirmed = 0  # acks drained so far (the channel's ``confirm`` counter)

    def publish(self, hold: bool = False) -> int:
        """Number the next published message; ``hold`` defers its confirm until ``settle``."""
        seq = self.next_seq
        self.next_seq = seq + 1
        if hold:
            self._held.add(seq)
            self._held_order.append(seq)
        else:
            self._acked.append(seq)
        return seq

    def settle(self, seq: int, ok: bool) -> None:
        """A held message is now safe (``ok``) or lost (not ok)."""
        if seq in self._held:
            self._held.discard(seq)
            (self._acked if ok else self._nacked).append(seq)

    def settle_many(self, seqs: list[int], ok: bool) -> None:
        """``settle`` each of ``seqs``: a commit releases a whole batch at once."""
        held = self._held
        if held.issuperset(seqs):  # the usual case: one C-level pass, no call per seq
            held.difference_update(seqs)
            (self._acked if ok else self._nacked).extend(seqs)
        else:
            for seq in seqs:
                self.settle(seq, ok)

    def settle_all(self, ok: bool) -> None:
        """Settle everything held (e.g. a failed commit nacks the whole batch)."""
        for seq in self._held_order:
            if seq in self._held:
                (self._acked if ok else self._nacked).append(seq)
        self._held.clear()
        self._held_order.clear()

    @property
    def unconfirmed(self) -> int:
        """Messages numbered but not yet drained as confirms."""
        return len(self._held) + len(self._acked) + len(self._nacked)

    def has_pending(self) -> bool:
        return bool(self._acked or self._nacked)

    def drain(self) -> list[Confirm]:
        """Confirms to send now, in the order to send them."""
        out: list[Confirm] = []
        if self._nacked:
            self._nacked.sort()
            out.extend((seq, False, False) for seq in self._nacked)
            self._nacked.clear()
        acked = self._acked
        if not acked:
            return out
        order, held = self._held_order, self._held
        if held:
            while order[0] not in held:
                order.popleft()
            low = order[0]
        else:  # everything held was settled (a commit released it): no walk
            order.clear()
            low = self.next_seq
        below = 0
        highest_below = max(acked)
        above: list[int] = []
        if highest_below < low:  # the usual case: all of them, one multiple ack
            below = len(acked)
        else:
            highest_below = 0
            for seq in acked:
                if seq < low:
                    below += 1
                    if seq > highest_below:
                        highest_below = seq
                else:
                    above.append(seq)
        if below == 1:
            out.append((highest_below, False, True))
        elif below:
            out.append((highest_below, True, True))
        above.sort()
        out.extend((seq, False, True) for seq in above)
        self.confirmed += len(acked)
        acked.clear()
        return out
