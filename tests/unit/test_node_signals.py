"""A Ctrl-C while the node starts stops it cleanly once it has started."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from leveret.broker.broker import Broker
from leveret.config import Config
from leveret.node import process


class InterruptedDoor:
    """A front door during whose start the process gets SIGINT, as from a user's Ctrl-C."""

    def __init__(self) -> None:
        self.started = self.stopped = False

    async def start(self, broker: Broker, config: Config) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


def test_sigint_while_starting_stops_every_front_door(tmp_path: Path) -> None:
    """The handlers were installed after the ready file was written: a SIGINT in between
    went to asyncio's own handler, which cancelled the node without stopping what it had
    started, and the process never exited."""
    door = InterruptedDoor()
    try:
        process.run(Config(data_dir=tmp_path / "data"), [door])
    except KeyboardInterrupt:
        pytest.fail("the SIGINT cancelled the node instead of stopping it")
    assert door.started and door.stopped
