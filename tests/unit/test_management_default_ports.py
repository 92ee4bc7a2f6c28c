"""A default HTTP port someone else holds is skipped with a warning; one asked for is fatal."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

from leveret.broker.broker import Broker
from leveret.config import Config, load_config
from leveret.management_ui.service import ManagementService
from leveret.node.process import StartupError


def test_flags_and_environment_are_explicit_defaults_are_not(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path), "LEVERET_PROMETHEUS_PORT": "0"}
    config = load_config({"management_port": "0"}, env, None)
    assert {"management_port", "prometheus_port"} <= config.explicit
    assert "port" not in config.explicit
    assert not load_config({}, {"XDG_DATA_HOME": str(tmp_path)}, None).explicit


def _start(config: Config) -> list[tuple[str, str, int]]:
    async def run() -> list[tuple[str, str, int]]:
        broker = Broker(config)
        service = ManagementService()
        try:
            await service.start(broker, config)
            return list(broker.listeners)
        finally:
            await service.stop()

    return asyncio.run(run())


def test_a_taken_default_management_port_is_skipped(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Built directly, as the defaults are: nothing marks the port as asked for.
        config = Config(data_dir=tmp_path, management_port=port, prometheus_port=0,
                        management_host=("127.0.0.1",))
        with caplog.at_level(logging.WARNING):
            listeners = _start(config)
    assert [protocol for protocol, _, _ in listeners] == ["http/prometheus"]
    assert f"not serving HTTP management API: port {port} is already in use" in caplog.text


def test_a_taken_port_that_was_asked_for_is_fatal(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = Config(data_dir=tmp_path, management_port=port, prometheus_port=0,
                        management_host=("127.0.0.1",), explicit=frozenset({"management_port"}))
        with pytest.raises(StartupError, match=f"port {port} is already in use"):
            _start(config)
