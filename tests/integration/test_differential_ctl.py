"""``leveret ctl`` list commands beside the real ``rabbitmqctl`` (skipped when it is not
installed or cannot reach a node): the same banner, the same default columns, the same
JSON keys, with the same objects present on both (a queue bound to amq.direct, a consumer
on a channel with prefetch); and ``status``: the same sections in the same order, the same
lines where Leveret has the fact, the same JSON keys but Erlang's."""

from __future__ import annotations

import json
import re
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


# rabbitmqctl status --formatter json keys Leveret leaves out (inventory.status_record):
# Erlang's, plugins', Raft's.
STATUS_LEFT_OUT = {"erlang_version", "processes", "run_queue", "net_ticktime",
                   "enabled_plugin_file", "raft_data_directory"}
# Lines of rabbitmqctl's text status Leveret leaves out (by their label), and adds.
STATUS_LINES_LEFT_OUT = {"Erlang configuration", "Erlang processes", "Scheduler run queue",
                         "Cluster heartbeat timeout (net_ticktime)", "Enabled plugin file",
                         "Raft data directory"}
STATUS_LINES_ADDED = {"Product name", "Product version"}
BOLD = re.compile(r"\x1b\[[0-9;]*m")  # rabbitmqctl's section headings are bold


def _status_lines(text: str) -> tuple[list[str], list[str]]:
    """(section headings in order, labels of the "Label: value" lines outside lists)."""
    rows = ["", *BOLD.sub("", text).splitlines()[1:]]  # the banner line out
    headings = [rows[i] for i in range(1, len(rows) - 1)
                if rows[i] and not rows[i - 1] and not rows[i + 1] and ":" not in rows[i]
                and not rows[i].startswith(("(", " *"))]
    labels = [line.split(":", 1)[0] for line in rows if ": " in line
              and not line.startswith((" ", "Interface:"))
              and not re.match(r"^[a-z_]+: [0-9.]+ gb", line)]  # the memory breakdown
    return headings, labels


def test_status_as_rabbitmqctl(broker, reachable):
    theirs = rabbitmqctl("status").stdout
    mine = ours(broker, "status").stdout
    their_headings, their_labels = _status_lines(theirs)
    my_headings, my_labels = _status_lines(mine)
    assert my_headings == their_headings
    assert [x for x in my_labels if x not in STATUS_LINES_ADDED] == [
        x for x in their_labels if x not in STATUS_LINES_LEFT_OUT]
    assert mine.splitlines()[0] == theirs.splitlines()[0].replace(
        theirs.split()[3], mine.split()[3])  # "Status of node <node> ..."
    their_json = json.loads(rabbitmqctl("status", "--formatter", "json").stdout)
    my_json = json.loads(ours(broker, "status", "--formatter", "json").stdout)
    assert set(my_json) == set(their_json) - STATUS_LEFT_OUT
    for key in ("file_descriptors", "totals", "vm_memory_high_watermark_setting"):
        assert set(my_json[key]) == set(their_json[key]), key
    assert set(my_json["listeners"][0]) == set(their_json["listeners"][0])
    assert set(my_json["memory"]["total"]) <= set(their_json["memory"]["total"])
    for key, value in their_json.items():
        if key in my_json:
            assert type(my_json[key]) is type(value), key
