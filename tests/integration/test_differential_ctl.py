"""``leveret ctl`` list commands beside the real ``rabbitmqctl`` (skipped when it is not
installed or cannot reach a node): the same banner, the same default columns, the same
JSON keys, with the same objects present on both (a queue bound to amq.direct, a consumer
on a channel with prefetch)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

RABBITMQCTL = shutil.which("rabbitmqctl")
LEVERET = Path(sys.executable).parent / "leveret"
COMMANDS = ("list_queues", "list_exchanges", "list_bindings", "list_connections",
            "list_channels", "list_consumers")


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    assert RABBITMQCTL is not None
    return subprocess.run([RABBITMQCTL, *args], capture_output=True, text=True, timeout=60)


def lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """stdout without list_queues' extra "Timeout: 60.0 seconds ..." first line."""
    return [line for line in result.stdout.splitlines() if not line.startswith("Timeout:")]


@pytest.fixture(scope="module")
def reachable() -> None:
    if RABBITMQCTL is None:
        pytest.skip("rabbitmqctl is not installed")
    if rabbitmqctl("-q", "list_vhosts").returncode != 0:
        pytest.skip("rabbitmqctl cannot reach a RabbitMQ node")


def _objects(port: int, queue: str) -> pika.BlockingConnection:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    ch.queue_declare(queue)
    ch.queue_bind(queue, "amq.direct", "k")
    ch.basic_qos(prefetch_count=3)
    ch.basic_consume(queue, lambda *a: None, consumer_tag="ctag")
    conn.process_data_events(0.2)
    return conn


@pytest.fixture
def both(broker: Any, reachable: None) -> Iterator[str]:
    queue = f"ctl-diff-{uuid.uuid4().hex[:8]}"
    conns = [_objects(broker.port, queue), _objects(5672, queue)]
    yield queue
    for conn in conns:
        conn.channel().queue_delete(queue)
        conn.close()


def ours(broker: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LEVERET), "ctl", "--data-dir", str(broker.data_dir), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", COMMANDS)
def test_banner_and_default_columns_as_rabbitmqctl(broker, both, command):
    theirs = lines(rabbitmqctl(command))
    mine = lines(ours(broker, command))
    assert mine[:2] == theirs[:2]


@pytest.mark.parametrize("command", COMMANDS)
def test_json_rows_have_rabbitmqctls_keys(broker, both, command):
    theirs = json.loads(rabbitmqctl(command, "--formatter", "json").stdout)
    mine = json.loads(ours(broker, command, "--json").stdout)
    assert theirs and mine
    assert list(mine[0]) == list(theirs[0])


def test_chosen_columns_and_values(broker, both):
    columns = ("name", "durable", "auto_delete", "exclusive", "consumers", "messages_ready",
               "state", "type")
    theirs = lines(rabbitmqctl("list_queues", *columns))
    mine = lines(ours(broker, "list_queues", *columns))
    assert mine[1] == theirs[1]
    row = [line for line in theirs if line.startswith(both + "\t")]
    assert row and row[0] in mine
    columns = ("source_name", "destination_name", "routing_key")
    theirs = lines(rabbitmqctl("list_bindings", *columns))
    mine = lines(ours(broker, "list_bindings", *columns))
    assert f"amq.direct\t{both}\tk" in theirs and f"amq.direct\t{both}\tk" in mine
