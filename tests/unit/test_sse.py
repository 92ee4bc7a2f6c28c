"""``sse.ring_slice`` (what a stream reads of a shared ring) against a naive model, and the
``Bell`` that wakes every waiting stream with one ring."""

from __future__ import annotations

import asyncio
from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from leveret.management_ui.sse import Bell, ring_slice


@given(st.integers(1, 20), st.integers(0, 60), st.data(), st.integers(1, 30))
def test_ring_slice_reads_what_is_held_after_the_position(capacity: int, appended: int,
                                                         data: st.DataObject,
                                                         limit: int) -> None:
    everything = list(range(appended))
    ring = deque(everything, maxlen=capacity)
    position = data.draw(st.integers(0, appended))
    items, dropped, after = ring_slice(ring, appended, position, limit)
    held_from = appended - len(ring)
    wanted = everything[max(position, held_from):]
    assert items == wanted[:limit]
    assert dropped == max(0, held_from - position)
    assert after == position + dropped + len(items)
    rest, dropped_later, end = ring_slice(ring, appended, after, appended + 1)
    assert items + rest == wanted and dropped_later == 0 and end == appended


def test_one_ring_wakes_every_waiting_stream() -> None:
    async def main() -> list[int]:
        bell = Bell()
        woken: list[int] = []

        async def stream(i: int) -> None:
            await bell.wait(3600)
            woken.append(i)

        tasks = [asyncio.create_task(stream(i)) for i in range(100)]
        while bell._waiting is None:
            await asyncio.sleep(0)
        for _ in range(1000):  # producers ring per event: one wake-up is scheduled
            bell.ring()
        await asyncio.gather(*tasks)
        return woken

    assert sorted(asyncio.run(main())) == list(range(100))
