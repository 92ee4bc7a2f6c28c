"""The memory watcher's check (node/watchers.py::check_memory): RSS decides paging and the
alarm, and what RSS counts but the broker does not hold is handed back only when a
threshold is crossed, then measured again."""

from __future__ import annotations

from typing import Any

from leveret.broker.alarms import MEMORY
from leveret.node.watchers import check_memory


class Monitor:
    def __init__(self, *readings: tuple[bool, bool]) -> None:
        self.readings = list(readings)

    def check(self) -> tuple[bool, bool]:
        return self.readings.pop(0)


class Broker:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def set_memory_pressure(self, pressed: bool) -> None:
        self.calls.append(("paging", pressed))

    def set_alarm(self, resource: str, active: bool) -> None:
        self.calls.append((resource, active))


def _check(*readings: tuple[bool, bool]) -> tuple[list[tuple[str, Any]], int]:
    broker, released = Broker(), []
    monitor = Monitor(*readings)
    check_memory(broker, monitor, lambda: released.append(1))  # type: ignore[arg-type]
    assert not monitor.readings  # every reading taken, no more
    return broker.calls, len(released)


def test_under_the_thresholds_nothing_is_released() -> None:
    assert _check((False, False)) == ([("paging", False), (MEMORY, False)], 0)


def test_over_a_threshold_the_release_comes_first_and_decides() -> None:
    # Free heap and read store pages were all that crossed the paging threshold.
    assert _check((False, True), (False, False)) == ([("paging", False), (MEMORY, False)], 1)
    # Still over after the release: queues page, and past the limit publishers block.
    assert _check((True, True), (True, True)) == ([("paging", True), (MEMORY, True)], 1)
    assert _check((True, True), (False, True)) == ([("paging", True), (MEMORY, False)], 1)
