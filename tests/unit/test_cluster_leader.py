"""The leader's confirm rule, with a fake coordinator and followers: a batch is released
only when every in-sync follower acked it, a silent one is removed from the set in etcd
*before* the batch is released without it, and a leader that lost its lease or its
leadership releases nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from leveret.cluster import leader as leader_module
from leveret.cluster.leader import Leader, _Follower
from leveret.persistence.store import StoreError


class FakeCoordinator:
    def __init__(self, leading: bool = True) -> None:
        self.fresh = True
        self.leading = leading
        self.calls: list[tuple[str, bool]] = []

    def lease_fresh(self) -> bool:
        return self.fresh

    async def set_in_sync(self, node: str, present: bool, epoch: int) -> bool:
        self.calls.append((node, present))
        return self.leading


class FakeWriter:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)

    def close(self) -> None:
        pass


class NoSnapshots:
    def snapshot(self, target: Path) -> int:
        raise AssertionError("no snapshot expected")


def _leader(coordinator: FakeCoordinator, in_sync: set[str], min_in_sync: int = 2) -> Leader:
    leader = Leader("L", 7, coordinator, b"secret", NoSnapshots(), Path("."), [], min_in_sync,
                    in_sync, 0)  # type: ignore[arg-type]
    for node in in_sync - {"L"}:
        follower = _Follower(node, FakeWriter())  # type: ignore[arg-type]
        follower.streaming = True
        leader.followers[node] = follower
    return leader


@pytest.fixture(autouse=True)
def short_ack_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader_module, "ACK_TIMEOUT", 0.05)


def test_batch_waits_for_every_in_sync_follower(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader_module, "ACK_TIMEOUT", 60.0)  # nobody is dropped here

    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1", "F2"})
        done = asyncio.create_task(leader.replicate(1, b"frame"))
        await asyncio.sleep(0)
        assert leader.followers["F1"].writer.sent == [b"frame"]  # type: ignore[attr-defined]
        leader.followers["F1"].acked = 1
        leader._wake()
        await asyncio.sleep(0.05)
        assert not done.done()  # F2 has not acked
        leader.followers["F2"].acked = 1
        leader._wake()
        await asyncio.wait_for(done, 5)
        assert coordinator.calls == []  # nobody dropped
    asyncio.run(scenario())


def test_silent_follower_leaves_the_set_in_etcd_before_the_batch_is_released() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1", "F2"})
        leader.followers["F1"].acked = 1
        await asyncio.wait_for(leader.replicate(1, b"frame"), 5)
        assert coordinator.calls == [("F2", False)]
        assert leader.in_sync == {"L", "F1"}
    asyncio.run(scenario())


def test_too_few_copies_hold_the_batch_back() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1"})
        done = asyncio.create_task(leader.replicate(1, b"frame"))
        for _ in range(1000):  # until F1 is dropped (after the ack timeout)
            if leader.in_sync == {"L"}:
                break
            await asyncio.sleep(0.01)
        assert leader.in_sync == {"L"}
        await asyncio.sleep(0.1)
        assert not done.done()  # one copy left, below min_in_sync: held back
        coordinator.fresh = False
        with pytest.raises(StoreError):
            await asyncio.wait_for(done, 5)
    asyncio.run(scenario())


def test_deposed_leader_releases_nothing() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator(leading=False)  # the fenced removal is refused
        leader = _leader(coordinator, {"L", "F1", "F2"})
        leader.followers["F1"].acked = 1
        with pytest.raises(StoreError):
            await asyncio.wait_for(leader.replicate(1, b"frame"), 5)
        assert leader.fenced
    asyncio.run(scenario())


def test_stale_lease_ships_and_releases_nothing() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        coordinator.fresh = False
        leader = _leader(coordinator, {"L", "F1"})
        with pytest.raises(StoreError):
            await leader.replicate(1, b"frame")
        assert leader.followers["F1"].writer.sent == []  # type: ignore[attr-defined]
    asyncio.run(scenario())


def test_follower_one_batch_behind_a_busy_leader_is_admitted_and_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a publisher running flat out a batch is always in flight: a follower that has
    every *released* batch joins, and the batch in flight then waits for it too."""
    monkeypatch.setattr(leader_module, "ACK_TIMEOUT", 60.0)

    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1"})
        leader.followers["F1"].acked = 1
        await asyncio.wait_for(leader.replicate(1, b"one"), 5)
        joining = _Follower("F2", FakeWriter())  # type: ignore[arg-type]
        joining.streaming = True
        leader.followers["F2"] = joining
        done = asyncio.create_task(leader.replicate(2, b"two"))  # in flight
        await asyncio.sleep(0)
        joining.acked = 1  # it holds batch 1: every released batch, not batch 2
        leader._maybe_admit(joining)
        for _ in range(500):
            if "F2" in leader.in_sync:
                break
            await asyncio.sleep(0.01)
        assert coordinator.calls == [("F2", True)]
        leader.followers["F1"].acked = 2
        leader._wake()
        await asyncio.sleep(0.05)
        assert not done.done()  # batch 2 waits for the newcomer's ack
        joining.acked = 2
        leader._wake()
        await asyncio.wait_for(done, 5)
    asyncio.run(scenario())


def test_follower_behind_a_released_batch_is_not_admitted() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1"})
        leader.followers["F1"].acked = 2
        await asyncio.wait_for(leader.replicate(1, b"one"), 5)
        await asyncio.wait_for(leader.replicate(2, b"two"), 5)
        joining = _Follower("F2", FakeWriter())  # type: ignore[arg-type]
        leader.followers["F2"] = joining
        joining.acked = 1  # lacks batch 2, which may have been confirmed
        leader._maybe_admit(joining)
        await asyncio.sleep(0.05)
        assert "F2" not in leader.required and coordinator.calls == []
    asyncio.run(scenario())


def test_idle_leader_drops_a_follower_whose_link_is_lost() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1", "F2"})
        del leader.followers["F2"]  # as ``_serve`` does when the link goes
        await asyncio.wait_for(leader._drop_lost("F2", "link lost"), 5)
        assert coordinator.calls == [("F2", False)]
        assert leader.in_sync == {"L", "F1"} and leader.required == {"L", "F1"}
    asyncio.run(scenario())


def test_follower_back_before_the_drop_stays_in_the_set() -> None:
    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1", "F2"})  # F2 reconnected already
        await asyncio.wait_for(leader._drop_lost("F2", "link lost"), 5)
        assert coordinator.calls == [] and "F2" in leader.in_sync
    asyncio.run(scenario())


def test_inherited_member_that_never_dials_the_new_leader_leaves_the_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader_module.wire, "LINK_TIMEOUT", 0.01)

    async def scenario() -> None:
        coordinator = FakeCoordinator()
        leader = _leader(coordinator, {"L", "F1", "F2"})
        del leader.followers["F2"]  # in the set etcd handed over; never connected
        await asyncio.wait_for(leader._drop_absent(), 5)
        assert coordinator.calls == [("F2", False)] and leader.in_sync == {"L", "F1"}
    asyncio.run(scenario())
